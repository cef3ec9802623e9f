"""A solution of the abstract problem, its cost, and a checker both solvers answer to."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kubegpu.plan.core.problem import Problem


@dataclass
class BinPlan:
    """What one bin becomes: its mode and how many units take each pattern, per group."""

    mode: str
    patterns: dict[str, dict[str, int]] = field(default_factory=dict)

    def units_used(self) -> int:
        return sum(sum(ps.values()) for ps in self.patterns.values())


@dataclass(frozen=True)
class Placement:
    demand: int
    option: int
    bin: int
    slot: str
    count: int  # items


@dataclass
class Solution:
    bins: list[BinPlan]
    chosen: list[int | None]  # option index per demand (None: nothing placed)
    placements: list[Placement]
    solver: str
    optimal: bool = False
    bound: float | None = None  # a lower bound on the optimum, when the solver has one
    objective: float = 0.0
    note: str = ""

    def placed(self, demand: int) -> int:
        return sum(p.count for p in self.placements if p.demand == demand)

    def unplaced(self, problem: Problem) -> list[int]:
        per = [0] * len(problem.demands)
        for p in self.placements:
            per[p.demand] += p.count
        return [d.quantity - per[i] for i, d in enumerate(problem.demands)]


def evaluate(problem: Problem, sol: Solution) -> float:
    """The objective: bins opened, units used, pattern and option costs, items unplaced."""
    total = 0.0
    for b, plan in zip(problem.bins, sol.bins, strict=True):
        if plan.units_used():
            total += b.open_cost
        for g in b.groups:
            for key, n in plan.patterns.get(g.key, {}).items():
                total += n * (g.unit_cost + g.pattern(key).cost)
    placed = [0] * len(problem.demands)
    for p in sol.placements:
        placed[p.demand] += p.count
        total += p.count * problem.demands[p.demand].option_cost(p.option)
    for i, d in enumerate(problem.demands):
        total += d.weight * (d.quantity - placed[i])
    return total


def verify(problem: Problem, sol: Solution) -> list[str]:
    """Every constraint a solution must meet; the broken ones, in words (empty when valid)."""
    errors: list[str] = []
    if len(sol.bins) != len(problem.bins):
        return [f"{len(sol.bins)} bin plans for {len(problem.bins)} bins"]
    offered: list[dict[str, int]] = []
    for b, plan in zip(problem.bins, sol.bins, strict=True):
        if plan.mode not in b.modes:
            errors.append(f"bin {b.key}: mode {plan.mode!r} not allowed")
        if b.fixed_mode is not None and plan.mode != b.fixed_mode:
            errors.append(f"bin {b.key}: mode must stay {b.fixed_mode!r}")
        slots: dict[str, int] = defaultdict(int)
        for s, n in b.used:
            slots[s] -= n
        for g in b.groups:
            counts = plan.patterns.get(g.key, {})
            if sum(counts.values()) > g.count:
                errors.append(
                    f"bin {b.key}, group {g.key}: {sum(counts.values())} > {g.count} units"
                )
            for key, n in g.fixed:
                if counts.get(key, 0) < n:
                    errors.append(f"bin {b.key}, group {g.key}: pattern {key} must keep {n} units")
            for key, n in counts.items():
                if n < 0:
                    errors.append(f"bin {b.key}: negative count")
                try:
                    p = g.pattern(key)
                except KeyError:
                    errors.append(f"bin {b.key}, group {g.key}: unknown pattern {key}")
                    continue
                if n and not p.allowed(plan.mode):
                    errors.append(f"bin {b.key}: pattern {key} not allowed in mode {plan.mode!r}")
                for s, k in p.offers:
                    slots[s] += k * n
        for key in plan.patterns:
            if key not in {g.key for g in b.groups}:
                errors.append(f"bin {b.key}: unknown group {key}")
        offered.append(slots)
    placed = [0] * len(problem.demands)
    for pl in sol.placements:
        if pl.count < 0:
            errors.append("negative placement")
        d = problem.demands[pl.demand]
        if sol.chosen[pl.demand] != pl.option:
            errors.append(f"demand {d.key}: placed through option {pl.option}, not the chosen one")
        uses = problem.uses.get((pl.demand, pl.option, pl.bin), ())
        amount = next((u.amount for u in uses if u.slot == pl.slot), None)
        if amount is None:
            errors.append(
                f"demand {d.key}: no use of slot {pl.slot} on bin {problem.bins[pl.bin].key}"
            )
            continue
        offered[pl.bin][pl.slot] -= amount * pl.count
        placed[pl.demand] += pl.count
    for bi, slots in enumerate(offered):
        for s, n in slots.items():
            if n < 0:
                errors.append(f"bin {problem.bins[bi].key}: slot {s} over-used by {-n}")
    for i, d in enumerate(problem.demands):
        if placed[i] > d.quantity:
            errors.append(f"demand {d.key}: {placed[i]} placed > {d.quantity}")
    return errors
