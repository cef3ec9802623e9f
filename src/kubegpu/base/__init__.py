"""The bottom layer: what every other layer may use, and which uses nothing of kubegpu's.

`loader` reads user input files (bounded, strict YAML, pydantic validation) with one error
format; `InputError` is the base of every input error class. `request_head` reads one
HTTP/1.1 request head within bounds for kubegpu's small servers (a parser over asyncio
streams, not an HTTP client).
"""

from __future__ import annotations

from kubegpu.base.loader import (
    DEFAULT_LIMITS,
    EXCERPT_CHARS,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_VALUES,
    InputError,
    Limits,
    excerpt,
)

__all__ = [
    "DEFAULT_LIMITS",
    "EXCERPT_CHARS",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "InputError",
    "Limits",
    "excerpt",
]
