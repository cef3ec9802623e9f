"""Bounds on the intervals and periods node components take from flags and environment.

A poll interval of 0 (or NaN, or a negative number) would spin a CPU and flood the API
server; an infinite one would never notice a change. Every such value is checked at start,
before any work, and refused with the flag, the variable and the value named
(docs/limits.md lists the bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kubegpu.node.runtime import ComponentError

DAY_S = 86_400.0


@dataclass(frozen=True)
class Bound:
    """Seconds a value may take: `low`..`high`, or exactly 0 when `zero_ok` (0: "never")."""

    low: float
    high: float
    zero_ok: bool = False

    def words(self) -> str:
        zero = "0 or " if self.zero_ok else ""
        return f"{zero}{self.low:g} to {self.high:g} seconds"


POLL = Bound(0.01, 300.0)  # --poll-interval: kubelet socket, config files, MPS readiness
HEALTH_RECOVERY = Bound(1e-3, 30 * DAY_S, zero_ok=True)  # --health-recovery-period
COLLECT = Bound(0.0, DAY_S)  # the exporter's --collect-interval (0: read on every scrape)
WAIT = Bound(0.0, DAY_S)  # how long to wait for something before giving up (0: not at all)


def check_seconds(value: float, bound: Bound, flag: str, variable: str | None = None) -> float:
    """`value` when it is within `bound`; ComponentError naming the flag otherwise."""
    ok = math.isfinite(value) and (
        (bound.zero_ok and value == 0) or bound.low <= value <= bound.high
    )
    if not ok:
        name = f"{flag} / {variable}" if variable else flag
        raise ComponentError(f"{name} {value:g}: must be {bound.words()}")
    return value
