""" "Would fit with" advice (issue 14, items 4 and 5): every suggestion is checked by
planning with it, and the search is bounded in time."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.plan import make_plan, parse_data, planner
from kubegpu.plan.provider import NVLINK_MODELS

NVLINK_JOB: dict[str, Any] = {
    "fleet": [{"name": "pcie", "gpus": "l40s:4"}],
    "workloads": [
        {"name": "ddp", "memory": "30GiB", "gpus": 2, "nvlink": True, "kind": "training"}
    ],
}
TOO_MUCH: dict[str, Any] = {
    "fleet": [{"name": "n1", "gpus": "h100-80gb:8", "driver": "550.90.07"}],
    "workloads": [
        {"name": "train", "replicas": 6, "memory": "60GiB", "gpus": 2, "kind": "training"}
    ],
}


def test_a_suggested_card_serves_the_workload() -> None:
    plan = make_plan(parse_data(NVLINK_JOB))
    (card,) = [s for s in plan.workload("ddp").suggestions if s.startswith("a card")]
    model = card.split("such as ")[1].split(" ")[0]
    assert model in NVLINK_MODELS


def test_growing_the_fleet_fits_exactly_the_leftovers() -> None:
    plan = make_plan(parse_data(TOO_MUCH))
    assert plan.workload("train").left == 2
    assert plan.workload("train").suggestions[0] == "1 more node(s) like n1 (h100-80gb:8): 8 GPUs"


def test_the_search_stops_at_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner, "SUGGEST_BUDGET_S", 0.0)
    plan = make_plan(parse_data(TOO_MUCH))
    assert plan.workload("train").left == 2
    assert plan.workload("train").suggestions == []
    assert any("stopped after" in r.text for r in plan.reporter.reasons)


OLD_DRIVER: dict[str, Any] = {
    "fleet": [{"name": "old", "gpus": "a100-40gb:1", "driver": "470.82.01"}],
    "workloads": [
        {"name": "big", "memory": "18GiB", "compute": 0.5},
        {"name": "mid", "memory": "18GiB", "compute": 0.35},
    ],
}


def test_a_driver_gate_suggests_the_driver_not_another_node() -> None:
    """4g.20gb + 3g.20gb on one A100 needs R510 (issue 30): the smallest change is the
    driver, named first, and the suggestion is checked by planning with it."""
    plan = make_plan(parse_data(OLD_DRIVER))
    (left,) = [w for w in ("big", "mid") if plan.workload(w).left]
    suggestions = plan.workload(left).suggestions
    assert suggestions[0].startswith("driver R510+ on old (470.82.01)")
    upgraded = {**OLD_DRIVER, "fleet": [{**OLD_DRIVER["fleet"][0], "driver": "510"}]}
    assert all(make_plan(parse_data(upgraded)).workload(w).left == 0 for w in ("big", "mid"))


def test_no_driver_is_suggested_where_the_driver_is_not_the_gate() -> None:
    plan = make_plan(parse_data(TOO_MUCH))
    assert not any(s.startswith("driver") for s in plan.workload("train").suggestions)
