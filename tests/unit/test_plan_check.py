"""`check_plan` reads back what the planner emits: a wrong file must be caught, not just a
wrong plan."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.plan import emit, make_plan, parse_data, result
from kubegpu.plan.check import check_plan, check_values
from kubegpu.plan.inputs import PlanInput
from kubegpu.plan.result import Plan

# one node needs mixed (three profiles on one A100), the other single (one profile)
MIXED_AND_SINGLE: dict[str, Any] = {
    "fleet": [
        {"name": "mixed", "gpus": "a100-40gb:1", "driver": "535.54.03"},
        {"name": "single", "gpus": "h100-80gb:1", "driver": "550.90.07"},
    ],
    "workloads": [
        {"name": "big", "memory": "18GiB", "compute": 0.3},
        {"name": "mid", "memory": "9GiB", "compute": 0.25},
        {"name": "small", "memory": "4GiB", "compute": 0.1},
        {"name": "svc", "replicas": 7, "memory": "60GiB", "compute": 0.1},
    ],
}
ONLY_MIXED: dict[str, Any] = {"fleet": MIXED_AND_SINGLE["fleet"][:1]} | {
    "workloads": MIXED_AND_SINGLE["workloads"][:3]
}


def _plan(data: dict[str, Any]) -> tuple[PlanInput, Plan]:
    inp = parse_data(data)
    return inp, make_plan(inp, suggest=False)


def test_the_emitted_values_pass() -> None:
    inp, plan = _plan(ONLY_MIXED)
    assert plan.node("mixed").mig_strategy == "mixed"
    assert check_plan(inp, plan) == []


@pytest.mark.parametrize("data", [ONLY_MIXED, MIXED_AND_SINGLE], ids=["mixed", "both"])
def test_a_values_file_that_always_says_single_is_caught(
    data: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    inp, plan = _plan(data)
    assert check_plan(inp, plan) == []
    monkeypatch.setattr(emit, "cluster_strategy", lambda plan: "single")
    problems = check_plan(inp, plan)
    assert any("mixed" in p and "mig.strategy 'single'" in p for p in problems), problems


def test_values_must_name_the_configmaps_and_configs_that_exist() -> None:
    dp = {"metadata": {"name": "dp"}, "data": {"plan-none": ""}}
    mig = {"metadata": {"name": "mig"}, "data": {}}
    good = {
        "mig": {"strategy": "mixed"},
        "devicePlugin": {"config": {"name": "dp", "default": "plan-none"}},
        "migManager": {"config": {"name": "mig", "default": "all-disabled"}},
    }
    assert check_values(good, dp, mig, {"all-disabled"}) == ([], "mixed")
    bad = good | {"devicePlugin": {"config": {"name": "other", "default": "plan-ts4"}}}
    problems, _ = check_values(bad, dp, mig, {"all-disabled"})
    assert any("devicePlugin.config.name 'other'" in p for p in problems)
    assert any("devicePlugin.config.default 'plan-ts4'" in p for p in problems)
    problems, _ = check_values(good, dp, mig, {"plan-1"})
    assert problems == [
        "clusterpolicy-values.yaml: migManager.config.default 'all-disabled' is not a config"
    ]


def test_an_unknown_strategy_in_the_values_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inp, plan = _plan(ONLY_MIXED)
    monkeypatch.setattr(emit, "cluster_strategy", lambda plan: "maybe")
    problems = check_plan(inp, plan)
    assert any("mig.strategy 'maybe'" in p for p in problems), problems


MIXED_NODE = [{"name": "mixed", "gpus": "h100-80gb:2,l4:2", "driver": "550.90.07"}]
WHOLE_JOB = [{"name": "job", "replicas": 2, "memory": "40GiB", "kind": "training"}]
MPS_SERVICE = [
    {"name": "svc", "replicas": 20, "memory": "6GiB", "compute": 0.05, "isolation": "memory"}
]


@pytest.mark.parametrize("mix", [WHOLE_JOB, MPS_SERVICE], ids=["whole", "mps"])
def test_a_node_with_two_models_names_them_apart(
    mix: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    inp, plan = _plan({"fleet": MIXED_NODE, "workloads": mix})
    assert plan.node("mixed").renamed == ["h100-80gb", "l4"]
    assert check_plan(inp, plan) == []
    (resource,) = plan.workloads[0].resources
    assert resource.startswith("nvidia.com/gpu-")
    # one name for every model, as before: a pod may land on a card that cannot hold it
    monkeypatch.setattr(result, "_rename", lambda *args: None)
    inp, plan = _plan({"fleet": MIXED_NODE, "workloads": mix})
    problems = check_plan(inp, plan)
    assert any("also advertises on l4 GPUs" in p for p in problems), problems


@pytest.mark.parametrize(("driver", "gpus"), [("470.82.01", 2), ("535.54.03", 1)])
def test_layouts_follow_the_driver(driver: str, gpus: int) -> None:
    """4g.20gb + 3g.20gb on one A100 needs R510 (mig-hardware.md)."""
    services = [
        {"name": "big", "memory": "18GiB", "compute": 0.5},
        {"name": "mid", "memory": "18GiB", "compute": 0.35},
    ]
    inp, plan = _plan(
        {"fleet": [{"name": "n", "gpus": "a100-40gb:2", "driver": driver}], "workloads": services}
    )
    assert check_plan(inp, plan) == []
    assert plan.complete
    assert plan.gpus_used == gpus
