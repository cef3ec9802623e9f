"""Benchmarks with targets. Run with `make bench` (or `python -m bench [name]`); figures go
into bench/README.md by hand. Never run as timed assertions in the test suite."""
