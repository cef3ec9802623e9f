"""The planner's algorithm core on a domain-free toy: both solvers, the checker, determinism."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kubegpu.plan import parse_data
from kubegpu.plan.core import (
    BaseReporter,
    Bin,
    Demand,
    Group,
    Pattern,
    Problem,
    Use,
    evaluate,
    solve,
    verify,
)
from kubegpu.plan.core.classes import floored, solve_classes
from kubegpu.plan.core.exact import Model, solve_exact
from kubegpu.plan.core.heuristic import Greedy, orders
from kubegpu.plan.core.solution import BinPlan, Placement, Solution
from kubegpu.plan.generate import scenario
from kubegpu.plan.provider import GpuProvider
from kubegpu.plan.reporter import PlanReporter

ANY = frozenset({"plain", "share"})
PATTERNS = (
    Pattern("whole", (("whole", 1),), frozenset({"plain"})),
    Pattern("small7", (("small", 7),), ANY, 0.001),
    Pattern("mix", (("big", 1), ("small", 3)), ANY, 0.001),
    Pattern("big2", (("big", 2),), ANY, 0.001),
    Pattern("pool", (("pool", 4),), frozenset({"share"})),
)


class Toy:
    def __init__(self, bins: int = 3, units: int = 8, demands: Sequence[Demand] = ()) -> None:
        self._bins = [
            Bin(f"n{i}", (Group("g", units, PATTERNS),), ("plain", "share"), cls="c")
            for i in range(bins)
        ]
        self._demands = list(demands) or [
            Demand("train", 2, 100, ("whole",)),
            Demand("svc", 10, 100, ("small", "whole")),
            Demand("big", 3, 100, ("big",)),
        ]

    def bins(self) -> Sequence[Bin]:
        return self._bins

    def demands(self) -> Sequence[Demand]:
        return self._demands

    def uses(self, demand: Demand, option: str, bin: Bin) -> Sequence[Use]:
        if option == "whole":
            return [Use("whole", 4 if demand.key == "train" else 1)]
        return [Use(option, 1)]

    def slot_size(self, slot: str) -> float:
        return {"whole": 1.0, "small": 1 / 7, "big": 0.5, "pool": 0.25}[slot]


@pytest.mark.parametrize("method", ["heuristic", "exact"])
def test_solvers_place_everything_and_verify(method: str) -> None:
    problem, sol = solve(Toy(), method=method)  # type: ignore[arg-type]
    assert verify(problem, sol) == []
    assert sol.unplaced(problem) == [0, 0, 0]
    assert sol.objective == pytest.approx(evaluate(problem, sol))
    # 8 whole GPUs for training, 3 units for the mixed small/big demand
    assert sum(b.units_used() for b in sol.bins) == 11


def test_exact_is_never_worse_and_proves_optimality() -> None:
    toy = Toy()
    _, h = solve(toy, method="heuristic")
    _, e = solve(toy, method="exact")
    assert e.objective <= h.objective + 1e-9
    assert e.optimal
    assert e.bound == pytest.approx(e.objective)


def test_same_input_same_answer() -> None:
    a = solve(Toy(), method="auto")[1]
    b = solve(Toy(), method="auto")[1]
    assert a.bins == b.bins
    assert a.placements == b.placements


def test_modes_are_exclusive_per_bin() -> None:
    demands = [Demand("train", 1, 100, ("whole",)), Demand("pooled", 4, 100, ("pool",))]
    problem, sol = solve(Toy(bins=2, demands=demands), method="exact")
    assert verify(problem, sol) == []
    modes = sorted(b.mode for b in sol.bins if b.units_used())
    assert modes == ["plain", "share"]


def test_leftover_when_capacity_runs_out() -> None:
    demands = [Demand("train", 5, 100, ("whole",))]  # 20 units wanted, 8 per bin, 2 bins
    problem, sol = solve(Toy(bins=2, demands=demands), method="exact")
    assert sol.unplaced(problem) == [1]
    assert verify(problem, sol) == []


def test_fixed_units_and_used_slots_are_respected() -> None:
    class Pinned(Toy):
        def bins(self) -> Sequence[Bin]:
            g = Group("g", 2, PATTERNS, fixed=(("pool", 1),))
            return [Bin("n0", (g,), ("plain", "share"), fixed_mode="share", used=(("pool", 3),))]

    demands = [Demand("pooled", 6, 100, ("pool",)), Demand("train", 1, 100, ("whole",))]
    problem, sol = solve(Pinned(demands=demands), method="exact")
    assert verify(problem, sol) == []
    assert sol.bins[0].mode == "share"
    # 1 free slot on the pinned unit + 4 on the other: 5 of 6; whole is impossible in share
    assert sol.unplaced(problem) == [1, 1]


def test_verify_names_broken_constraints() -> None:
    problem = Problem.compile(Toy(bins=1))
    bad = Solution(
        [BinPlan("share", {"g": {"whole": 1}})],
        [0, None, None],
        [Placement(0, 0, 0, "whole", 1)],
        "test",
    )
    errors = verify(problem, bad)
    assert any("not allowed in mode" in e for e in errors)
    assert any("over-used" in e for e in errors)


def test_reporter_hears_every_decision() -> None:
    events: list[str] = []

    class Rec(BaseReporter):
        def starting(self, bins: int, demands: int, solver: str) -> None:
            events.append(f"start {solver}")

        def choosing(self, demand: str, option: str | None, placed: int, quantity: int) -> None:
            events.append(f"choose {demand} {option} {placed}/{quantity}")

        def configuring(self, bin: str, group: str, pattern: str, units: int) -> None:
            events.append(f"configure {bin} {pattern} {units}")

    solve(Toy(), Rec(), method="exact")
    assert events[0] == "start exact"
    assert "choose train whole 2/2" in events
    assert any(e.startswith("configure") for e in events)


def test_the_class_programme_matches_the_per_bin_one() -> None:
    problem = Problem.compile(Toy())
    by_class = solve_classes(problem)
    assert by_class is not None
    assert verify(problem, by_class) == []
    per_bin = solve_exact(problem)
    assert by_class.optimal and per_bin.optimal
    assert by_class.objective == pytest.approx(per_bin.objective)


def test_the_first_phase_drops_tie_breakers_and_never_raises_a_cost() -> None:
    m = Model([1.001, 0.001, -16.99998, 2.35, 0.0], [0.0] * 5, [1.0] * 5, [True] * 5, [])
    rough = floored(m)
    assert rough is not None
    assert rough.cost == pytest.approx([1.0, 0.0, -17.0, 2.35, 0.0])
    # rounded down, so the first phase's bound also bounds the true costs
    assert all(r <= c for r, c in zip(rough.cost, m.cost, strict=True))
    assert m.cost[0] == 1.001  # the model itself is left as it was
    assert floored(Model([1.0, -17.0], [0.0] * 2, [1.0] * 2, [True] * 2, [])) is None


def test_the_tie_breakers_still_decide_between_plans_of_equal_size() -> None:
    # two items take one unit either way (big2 or small7); only a tie-breaking option cost,
    # which the first phase rounds away, says "small" is better
    svc = Demand("svc", 2, 10, ("big", "small"), option_costs=(0.0005, 0.0))
    problem = Problem.compile(Toy(bins=1, demands=[svc]))
    by_class = solve_classes(problem)
    assert by_class is not None and by_class.optimal
    assert by_class.chosen == [1]
    assert by_class.objective == pytest.approx(solve_exact(problem).objective)


def test_the_class_programme_holds_items_of_several_units_to_what_one_bin_holds() -> None:
    class Threes(Toy):
        def uses(self, demand: Demand, option: str, bin: Bin) -> Sequence[Use]:
            return [Use("whole", 3)]

    # 16 units hold 5 items of 3 in sum, but an 8-unit bin holds only 2 of them: the class
    # programme knows (at most floor(8 / 3) per bin), so its plan splits and is optimal
    problem = Problem.compile(Threes(bins=2, demands=[Demand("train", 5, 100, ("whole",))]))
    by_class = solve_classes(problem)
    assert by_class is not None and by_class.optimal
    assert verify(problem, by_class) == []
    assert by_class.unplaced(problem) == [1]
    _, sol = solve(Threes(bins=2, demands=[Demand("train", 5, 100, ("whole",))]), method="exact")
    assert verify(problem, sol) == []
    assert sol.unplaced(problem) == [1]


def test_the_greedy_remembers_pattern_choices_without_changing_one() -> None:
    """The greedy memoises its pattern choices (the key is what a choice reads); a pass
    that recomputes every choice makes the same plan."""

    class Forgetful(dict[tuple[object, ...], int | None]):
        def __setitem__(self, key: tuple[object, ...], value: int | None) -> None:
            pass

    for seed in (3, 19, 57):
        inp = parse_data(scenario(seed, gpus=64, count=10, replicas=150))
        problem = Problem.compile(GpuProvider(inp, PlanReporter()))
        order = orders(problem)[0]
        calls = {"remembered": 0, "fresh": 0}
        passes = {"remembered": Greedy(problem, order), "fresh": Greedy(problem, order)}
        passes["fresh"]._picks = Forgetful()
        for name, g in passes.items():
            pick = g._pick

            def counted(
                *args: Any, name: str = name, pick: Any = pick, calls: dict[str, int] = calls
            ) -> int | None:
                calls[name] += 1
                return pick(*args)

            g._pick = counted  # type: ignore[method-assign, assignment]
        plan = passes["remembered"].solution("heuristic")
        recomputed = passes["fresh"].solution("heuristic")
        assert calls["remembered"] < calls["fresh"]  # the memo answered some choices
        assert plan.placements == recomputed.placements
        assert plan.bins == recomputed.bins
