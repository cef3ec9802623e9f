"""Hypothesis: random fleets and workload mixes; every plan keeps every rule and emits files
the mig-parted and device-plugin loaders accept; the exact solver is never worse."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubegpu.plan import make_plan, parse_data
from kubegpu.plan.check import check_plan

MODELS = [
    ("h100-80gb", "550.90.07"),
    ("h200-nvl", "575.57.08"),
    ("a100-40gb", "535.54.03"),
    ("a30", "535.54.03"),
    ("rtx-pro-6000-ws", "575.51.03"),
    ("rtx-pro-4500", "580.95.05"),
    ("l4", None),
    ("l40s", None),
]


@st.composite
def fleets(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 3))):
        model, driver = draw(st.sampled_from(MODELS))
        node: dict[str, Any] = {"name": f"n{i}", "gpus": f"{model}:{draw(st.integers(1, 4))}"}
        if driver and draw(st.booleans()):
            node["driver"] = driver
        if draw(st.booleans()):
            node["display"] = draw(st.sampled_from(["graphics", "compute"]))
        out.append(node)
    return out


@st.composite
def workloads(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["inference", "training", "notebook"]))
        w: dict[str, Any] = {
            "name": f"w{i}",
            "replicas": draw(st.integers(0, 9)),
            "memory": f"{draw(st.integers(1, 90))}GiB",
            "compute": draw(st.sampled_from([0, 0.05, 0.1, 0.25, 0.5, 1.0, "20sm"])),
            "isolation": draw(st.sampled_from(["hardware", "memory", "none"])),
            "kind": kind,
            "gpus": draw(st.sampled_from([1, 1, 1, 2])),
        }
        if draw(st.booleans()):
            w["nvlink"] = True
        out.append(w)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), mix=workloads(), unconfirmed=st.booleans())
def test_every_plan_keeps_the_rules(
    fleet: list[dict[str, Any]], mix: list[dict[str, Any]], unconfirmed: bool
) -> None:
    inp = parse_data(
        {"fleet": fleet, "workloads": mix, "options": {"allow_unconfirmed_mig": unconfirmed}}
    )
    plan = make_plan(inp, solver="heuristic", suggest=False)
    assert check_plan(inp, plan) == []
    for w, spec in zip(plan.workloads, inp.workloads, strict=True):
        assert w.placed + w.left == spec.replicas
        if w.left:
            assert w.left_reason


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), mix=workloads())
def test_exact_never_worse_than_heuristic(
    fleet: list[dict[str, Any]], mix: list[dict[str, Any]]
) -> None:
    inp = parse_data({"fleet": fleet, "workloads": mix})
    h = make_plan(inp, solver="heuristic", suggest=False)
    e = make_plan(inp, solver="exact", suggest=False)
    assert e.objective <= h.objective + 1e-6
    assert check_plan(inp, e) == []
    assert sum(w.placed for w in e.workloads) >= 0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), mix=workloads())
def test_deterministic(fleet: list[dict[str, Any]], mix: list[dict[str, Any]]) -> None:
    inp = parse_data({"fleet": fleet, "workloads": mix})
    a = make_plan(inp, suggest=False)
    b = make_plan(inp, suggest=False)
    assert [(w.method, w.profile, w.nodes) for w in a.workloads] == [
        (w.method, w.profile, w.nodes) for w in b.workloads
    ]
    assert [[(g.role, g.layout) for g in n.gpus] for n in a.nodes] == [
        [(g.role, g.layout) for g in n.gpus] for n in b.nodes
    ]
