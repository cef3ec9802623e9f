"""The solvers' time budget: CPU seconds of this process, with a wall-clock ceiling.

A wall-clock limit hands a starved process a fraction of its search: on a loaded 2-core
machine 30 s of wall clock gave HiGHS 3-8 s of CPU, and the plan it stopped on was the
heuristic's, up to 26% above the optimum. The budget counts the CPU time the process got
instead, so a loaded machine makes the planner slower, not worse. The wall clock still ends
the search at `WALL_FACTOR` times the budget (a plan must come back); a plan stopped there
is not proven optimal and says how much CPU it had.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# The wall clock ends a search after this many times its CPU budget.
WALL_FACTOR = 4.0


def cpu_clock() -> float:
    """CPU seconds of this process (HiGHS runs in it, on one thread)."""
    return time.process_time()


def wall_clock() -> float:
    return time.monotonic()


@dataclass
class Budget:
    """`seconds` of CPU from now on; `clock` and `wall` are seams for tests."""

    seconds: float
    wall_factor: float = WALL_FACTOR
    clock: Callable[[], float] | None = None  # None: `cpu_clock`
    wall: Callable[[], float] | None = None  # None: `wall_clock`
    _cpu0: float = field(init=False, default=0.0)
    _wall0: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._cpu0 = self._now()
        self._wall0 = self._wall()

    def _now(self) -> float:
        return (self.clock or cpu_clock)()

    def _wall(self) -> float:
        return (self.wall or wall_clock)()

    def used(self) -> float:
        """CPU seconds spent since the budget began."""
        return self._now() - self._cpu0

    def elapsed(self) -> float:
        """Wall-clock seconds since the budget began."""
        return self._wall() - self._wall0

    def left(self) -> float:
        return max(0.0, self.seconds - self.used())

    def wall_left(self) -> float:
        return max(0.0, self.wall_factor * self.seconds - self.elapsed())

    def spent(self) -> bool:
        return self.left() <= 0 or self.wall_left() <= 0

    def starved(self) -> bool:
        """The wall clock ran out before the CPU budget: the machine gave us too little."""
        return self.wall_left() <= 0 < self.left()

    def part(self, fraction: float) -> Budget:
        """A budget of `fraction` of the CPU time left, on the same clocks."""
        return Budget(fraction * self.left(), self.wall_factor, self.clock, self.wall)
