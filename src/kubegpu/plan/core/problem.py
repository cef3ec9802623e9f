"""The abstract problem the planner's algorithm core solves. It knows nothing of GPUs.

Demands (a quantity of identical items) are served by *bins*. A bin holds groups of
identical *units*; each unit used is put in one *pattern*, which offers *slots* (opaque
keys) and is allowed only under some bin-wide *modes* (one mode per bin). Serving one item
of a demand through one of its *options* consumes slots of one bin, as listed by the
provider's *uses*. Every item of a demand goes through the same option (the option is a
demand-wide choice). The cost of a solution is what its opened bins, used units, patterns,
modes and options cost, plus a weight for every item left unplaced.

The provider supplies all of it, as resolvelib's provider does for packages: the core only
asks. Bins that share a `cls` must be interchangeable (same groups, modes, uses and costs);
the core computes uses once per class.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Pattern:
    """One way to configure a unit: the slots it offers and the bin modes it allows."""

    key: str
    offers: tuple[tuple[str, int], ...]
    modes: frozenset[str] | None = None  # None: allowed under every mode
    cost: float = 0.0  # added to the unit's cost when a unit takes this pattern

    def offered(self, slot: str) -> int:
        for s, n in self.offers:
            if s == slot:
                return n
        return 0

    def allowed(self, mode: str) -> bool:
        return self.modes is None or mode in self.modes


@dataclass(frozen=True)
class Group:
    """`count` identical units of one bin."""

    key: str
    count: int
    patterns: tuple[Pattern, ...]
    unit_cost: float = 1.0
    fixed: tuple[tuple[str, int], ...] = ()  # pattern key -> units that must keep it

    def pattern(self, key: str) -> Pattern:
        for p in self.patterns:
            if p.key == key:
                return p
        raise KeyError(key)


@dataclass(frozen=True)
class Bin:
    key: str
    groups: tuple[Group, ...]
    modes: tuple[str, ...] = ("",)  # allowed bin-wide modes, preferred first
    open_cost: float = 0.0  # paid once when any unit of the bin is used
    cls: str = ""  # bins of one class are interchangeable
    used: tuple[tuple[str, int], ...] = ()  # slots already taken by work outside the problem
    fixed_mode: str | None = None  # the mode the bin must keep (work already running)


@dataclass(frozen=True)
class Use:
    """Serving one item takes `amount` of `slot` on one bin."""

    slot: str
    amount: int = 1


@dataclass(frozen=True)
class Demand:
    key: str
    quantity: int
    weight: float  # cost of each item left unplaced
    options: tuple[str, ...]  # preferred first
    option_costs: tuple[float, ...] = ()  # cost per placed item, per option (default 0)

    def option_cost(self, i: int) -> float:
        return self.option_costs[i] if i < len(self.option_costs) else 0.0


class Provider(Protocol):
    """Everything the core knows about a domain comes through these calls."""

    def bins(self) -> Sequence[Bin]: ...

    def demands(self) -> Sequence[Demand]: ...

    def uses(self, demand: Demand, option: str, bin: Bin) -> Sequence[Use]:
        """Alternative ways one item of `demand` through `option` can sit on `bin`, preferred
        first; empty when it cannot."""
        ...

    def slot_size(self, slot: str) -> float:
        """How much of a unit one slot is (0..1]; the heuristic values free slots with it."""
        ...


class BinUses(Mapping[tuple[int, int, int], tuple[Use, ...]]):
    """(demand, option, bin) -> uses, stored once per class of bins: a fleet of many alike
    nodes costs its classes, not its nodes (the per-bin view is computed on access)."""

    def __init__(
        self,
        by_class: dict[tuple[int, int, int], tuple[Use, ...]],
        members: list[list[int]],
        class_of: list[int],
    ) -> None:
        self.by_class = by_class  # (demand, option, class index) -> uses
        self._members = members
        self._class_of = class_of

    def __getitem__(self, key: tuple[int, int, int]) -> tuple[Use, ...]:
        d, o, b = key
        if not 0 <= b < len(self._class_of):
            raise KeyError(key)
        return self.by_class[d, o, self._class_of[b]]

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        for d, o, c in self.by_class:
            for b in self._members[c]:
                yield d, o, b

    def __len__(self) -> int:
        return sum(len(self._members[c]) for _d, _o, c in self.by_class)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 3:
            return False
        d, o, b = key
        if not isinstance(b, int) or not 0 <= b < len(self._class_of):
            return False
        return (d, o, self._class_of[b]) in self.by_class


@dataclass
class Problem:
    """The provider's answers, compiled once into index-based tables."""

    bins: list[Bin]
    demands: list[Demand]
    # (demand index, option index, bin index) -> uses; only entries with uses are present
    uses: BinUses
    slot_sizes: dict[str, float]
    by_class: dict[str, list[int]] = field(default_factory=dict)
    class_of: list[int] = field(default_factory=list)  # bin -> index into `members`
    members: list[list[int]] = field(default_factory=list)  # class index -> its bins

    @classmethod
    def compile(cls, provider: Provider) -> Problem:
        bins = list(provider.bins())
        demands = list(provider.demands())
        _check(bins, demands)
        by_class: dict[str, list[int]] = {}
        for i, b in enumerate(bins):
            by_class.setdefault(b.cls or b.key, []).append(i)
        members = list(by_class.values())
        class_of = [0] * len(bins)
        for c, group in enumerate(members):
            for bi in group:
                class_of[bi] = c
        uses: dict[tuple[int, int, int], tuple[Use, ...]] = {}
        slots: set[str] = set()
        for c, group in enumerate(members):
            first = bins[group[0]]
            for di, d in enumerate(demands):
                for oi, o in enumerate(d.options):
                    found = tuple(provider.uses(d, o, first))
                    if not found:
                        continue
                    for u in found:
                        if u.amount < 1:
                            raise ValueError(f"use of {d.key}/{o}: amount {u.amount} < 1")
                        slots.add(u.slot)
                    uses[di, oi, c] = found
        seen: set[str] = set()
        for b in bins:
            if (b.cls or b.key) in seen:
                continue
            seen.add(b.cls or b.key)
            for g in b.groups:
                for p in g.patterns:
                    slots.update(s for s, _ in p.offers)
        sizes = {s: provider.slot_size(s) for s in sorted(slots)}
        return cls(
            bins, demands, BinUses(uses, members, class_of), sizes, by_class, class_of, members
        )

    def offered(self) -> set[tuple[int, int]]:
        """The (demand, option) pairs some bin can serve."""
        return {(d, o) for d, o, _c in self.uses.by_class}


def _check(bins: Sequence[Bin], demands: Sequence[Demand]) -> None:
    keys = [b.key for b in bins]
    if len(set(keys)) != len(keys):
        raise ValueError("bin keys must be unique")
    dkeys = [d.key for d in demands]
    if len(set(dkeys)) != len(dkeys):
        raise ValueError("demand keys must be unique")
    for b in bins:
        if not b.modes:
            raise ValueError(f"bin {b.key}: no modes")
        if b.fixed_mode is not None and b.fixed_mode not in b.modes:
            raise ValueError(f"bin {b.key}: fixed mode {b.fixed_mode!r} not among its modes")
        for g in b.groups:
            pinned = sum(n for _, n in g.fixed)
            if pinned > g.count:
                raise ValueError(f"bin {b.key}, group {g.key}: {pinned} fixed units > {g.count}")
            names = {p.key for p in g.patterns}
            for k, _ in g.fixed:
                if k not in names:
                    raise ValueError(f"bin {b.key}, group {g.key}: fixed pattern {k!r} unknown")
    for d in demands:
        if d.quantity < 0:
            raise ValueError(f"demand {d.key}: negative quantity")
