"""A pod requests one resource name: on a node that names each GPU model apart, a
workload's replicas must sit on one model (issue 14 item 2)."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.plan import make_plan, parse_data, planner
from kubegpu.plan.check import check_plan

MIXED = {"name": "mixed", "gpus": "h100-80gb:2,l4:2", "driver": "550.90.07"}
BIG = {"name": "big", "replicas": 1, "memory": "40GiB", "kind": "training"}


def _job(replicas: int) -> dict[str, Any]:
    return {"name": "job", "replicas": replicas, "memory": "16GiB", "kind": "training"}


def test_a_node_whose_models_all_hold_its_workloads_keeps_one_name() -> None:
    """16 GiB fits an H100 and an L4 alike: any GPU of the node serves the job, so the
    node is not renamed and all four replicas are placed."""
    inp = parse_data({"fleet": [MIXED], "workloads": [_job(4)]})
    plan = make_plan(inp, suggest=False)
    assert check_plan(inp, plan) == []
    assert plan.complete
    assert plan.node("mixed").renamed == []
    assert plan.workload("job").resources == {"nvidia.com/gpu": 1}


def test_a_workload_that_would_span_two_named_models_is_held_to_one() -> None:
    inp = parse_data(
        {"fleet": [MIXED, {"name": "l4s", "gpus": "l4:2"}], "workloads": [BIG, _job(5)]}
    )
    plan = make_plan(inp, suggest=False)
    assert check_plan(inp, plan) == []
    job = plan.workload("job")
    assert job.models == ["l4"] and job.resources == {"nvidia.com/gpu-l4": 1}
    assert job.left == 1 and "held to one GPU model" in job.left_reason
    assert plan.split == [] and not plan.warnings
    assert any("held to one GPU model" in r.text for r in plan.reporter.reasons)


def test_check_plan_refuses_a_workload_split_across_named_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one round only: the planner keeps its first plan, which puts the job on both models
    monkeypatch.setattr(planner, "MODEL_ROUNDS", 1)
    inp = parse_data(
        {"fleet": [MIXED, {"name": "l4s", "gpus": "l4:2"}], "workloads": [BIG, _job(5)]}
    )
    plan = make_plan(inp, suggest=False)
    assert plan.split == ["job"]
    assert plan.workload("job").models == ["h100-80gb", "l4"]
    problems = check_plan(inp, plan)
    assert any("job: its replicas sit on h100-80gb, l4 GPUs" in p for p in problems), problems
