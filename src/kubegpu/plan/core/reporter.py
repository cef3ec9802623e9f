"""Hooks the algorithm core calls as it decides; the base class does nothing.

Like resolvelib's reporter: observability enters only here. Every argument is a key the
provider gave (demand, option, bin, group, pattern, slot), so a domain reporter can turn
them back into words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubegpu.plan.core.solution import Solution


class BaseReporter:
    def starting(self, bins: int, demands: int, solver: str) -> None:
        """The core starts solving a problem of this size with this solver."""

    def unavailable(self, demand: str, option: str) -> None:
        """No bin can take an item of `demand` through `option`."""

    def choosing(self, demand: str, option: str | None, placed: int, quantity: int) -> None:
        """The option a demand goes through (None when nothing of it is placed)."""

    def configuring(self, bin: str, group: str, pattern: str, units: int) -> None:
        """`units` units of a bin's group take a pattern."""

    def setting_mode(self, bin: str, mode: str) -> None:
        """A bin's mode is decided."""

    def placing(self, demand: str, option: str, bin: str, slot: str, count: int) -> None:
        """`count` items of a demand sit on a bin's slot."""

    def leaving(self, demand: str, count: int) -> None:
        """`count` items of a demand are left unplaced."""

    def ending(self, solution: Solution) -> None:
        """The solver is done."""
