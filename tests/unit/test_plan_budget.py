"""The solvers' budget is CPU time, with a wall-clock ceiling (issue 14: a starved machine
must not turn the default mode's answer into the heuristic's without saying so)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.plan import make_plan, parse_data
from kubegpu.plan.check import check_plan
from kubegpu.plan.core import budget as budget_mod
from kubegpu.plan.core.budget import Budget

SCENARIOS = Path(__file__).parents[1] / "scenarios"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_counts_cpu_time_not_the_wall_clock() -> None:
    cpu, wall = Clock(), Clock()
    b = Budget(10, wall_factor=4, clock=cpu, wall=wall)
    wall.now = 30.0  # a busy machine: 30 s went by, the process had 2 s of CPU
    cpu.now = 2.0
    assert b.left() == 8.0 and not b.spent()
    cpu.now = 10.0
    assert b.spent() and not b.starved()


def test_the_wall_clock_still_ends_a_starved_search() -> None:
    cpu, wall = Clock(), Clock()
    b = Budget(10, wall_factor=4, clock=cpu, wall=wall)
    wall.now, cpu.now = 40.0, 3.0
    assert b.spent() and b.starved()
    part = b.part(0.5)
    assert part.seconds == pytest.approx(3.5)


def _scenario(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SCENARIOS / name).read_text())
    data.pop("description")
    data.pop("expect")
    return data


def test_a_starved_default_mode_says_it_is_not_proven_and_calls_nothing_infeasible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario 33 is feasible: every replica fits on 125 GPUs, and the heuristic alone
    leaves some over. A clock that runs a thousand times fast leaves HiGHS a few
    milliseconds of its budget, as a starved machine would."""
    inp = parse_data(_scenario("33-feasible-mix-144-gpus.yaml"))
    monkeypatch.setattr(budget_mod, "cpu_clock", lambda: time.process_time() * 1000)
    plan = make_plan(inp, suggest=False)
    assert check_plan(inp, plan) == []
    assert not plan.optimal
    assert plan.bound is None or plan.bound <= plan.objective
    assert any("not proven optimal" in r.text for r in plan.reporter.reasons)
    for w in plan.workloads:
        if w.left:  # left over by a search that stopped: never "not enough room"
            assert "not enough room" not in w.left_reason
            assert "not proven" in w.left_reason


def test_a_search_stopped_by_the_wall_clock_says_the_machine_was_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inp = parse_data(_scenario("33-feasible-mix-144-gpus.yaml"))
    # the wall clock runs far ahead of the CPU clock: the ceiling stops the search
    monkeypatch.setattr(budget_mod, "wall_clock", lambda: time.perf_counter() * 1000)
    plan = make_plan(inp, suggest=False)
    assert check_plan(inp, plan) == []
    assert not plan.optimal
    assert "the machine was busy" in plan.note
