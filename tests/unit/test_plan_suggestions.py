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
