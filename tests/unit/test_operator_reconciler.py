"""`Reconciler.plan()`: what one pass decides from its inputs, before any write (the writes
themselves are tested against the real API server in tests/e2e/test_operator_apply.py)."""

from __future__ import annotations

from typing import Any

from kubegpu.operator import status as st
from kubegpu.operator.api import OWNED, Api
from kubegpu.operator.reconciler import Caches, Plan, Reconciler, Snapshot

POLICY_SPEC: dict[str, Any] = {
    "driver": {"enabled": False},
    "toolkit": {"enabled": False},
    "dcgm": {"enabled": False},
}
NFD_GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}


def policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "uid": "u", "generation": 3}, "spec": spec}


def reconciler(nodes: list[dict[str, Any]], owned: dict[str, Snapshot] | None = None) -> Reconciler:
    caches = Caches(
        Snapshot(), Snapshot(), Snapshot(nodes), owned or {k: Snapshot() for k in OWNED}
    )
    return Reconciler(Api(None), caches)  # type: ignore[arg-type]  # plan() sends nothing


def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_the_facts_are_the_labels_the_pass_will_leave() -> None:
    """A GPU node NFD labelled but not yet the operator: the pass that sets its gpu.present
    label renders the DaemonSets for it in the same pass."""
    plan = reconciler([node("n1", NFD_GPU)]).plan(policy(POLICY_SPEC), "ClusterPolicy")
    assert isinstance(plan, Plan)
    assert plan.label_patches["n1"]["nvidia.com/gpu.present"] == "true"
    assert plan.facts.gpu_nodes == 1
    assert any(o["kind"] == "DaemonSet" for o in plan.writes)


def test_objects_live_with_their_hash_are_not_written_again() -> None:
    first = reconciler([node("n1", NFD_GPU)]).plan(policy(POLICY_SPEC), "ClusterPolicy")
    assert isinstance(first, Plan)
    owned = {k: Snapshot() for k in OWNED}
    for obj in first.writes:
        owned[obj["kind"]].store(obj)
    again = reconciler([node("n1", NFD_GPU)], owned).plan(policy(POLICY_SPEC), "ClusterPolicy")
    assert isinstance(again, Plan)
    assert again.writes == ()
    assert again.desired == first.desired


def test_a_spec_the_model_refuses_is_a_refusal_naming_the_field_not_an_exception() -> None:
    """A stored policy the typed model cannot read (one written under an older CRD) ends the
    pass in ReconcileFailed: before, the exception ended the operator's loop."""
    bad = {**POLICY_SPEC, "mig": {"strategy": "sometimes"}}
    outcome = reconciler([]).plan(policy(bad), "ClusterPolicy")
    assert isinstance(outcome, st.Outcome)
    assert outcome.reason == st.RECONCILE_FAILED
    assert outcome.message.startswith("ClusterPolicy p: field spec.mig.strategy, value 'sometimes'")


def test_a_spec_with_a_reserved_key_plans_no_write() -> None:
    bad = {**POLICY_SPEC, "devicePlugin": {"env": [{"name": "NODE_NAME", "value": "x"}]}}
    plan = reconciler([node("n1", NFD_GPU)]).plan(policy(bad), "ClusterPolicy")
    assert isinstance(plan, Plan)
    assert plan.rendered.problems and plan.writes == ()
