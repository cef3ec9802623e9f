"""Run the benchmarks: `python -m bench` (all) or `python -m bench mig`."""

from __future__ import annotations

import importlib
import sys

SUITES = [
    "mig",
    "sim",
    "controlplane",
    "exporter",
    "mig_manager",
    "device_plugin",
    "plan",
    "plan_midsize",
    "plan_snapshot",
    "operator",
    "dra",
]


def main(argv: list[str]) -> int:
    chosen = argv or SUITES
    failed = 0
    for name in chosen:
        if name not in SUITES:
            print(f"unknown benchmark {name!r}; known: {', '.join(SUITES)}", file=sys.stderr)
            return 2
        module = importlib.import_module(f"bench.bench_{name}")
        failed += module.run()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
