"""Any ClusterPolicy or GPUCluster spec the CRD's schema admits (Hypothesis strategies
generated from the generated CRDs) is planned by the operator's reconciler without an
exception: a plan of objects, or a refusal naming a field. The API server as judge of the
plan's objects is tests/e2e/test_operator_policy_fuzz.py.

Bounded for CI like the other fuzz tests (KUBEGPU_FUZZ_EXAMPLES, derandomized)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings

from fuzz.openapi_strategies import BASE_POLICY, from_schema, merged, spec_schema
from kubegpu.operator import status as st
from kubegpu.operator.api import OWNED, Api
from kubegpu.operator.reconciler import Caches, Plan, Reconciler, Snapshot

FUZZ = settings(
    max_examples=int(os.environ.get("KUBEGPU_FUZZ_EXAMPLES", "100")),
    deadline=None,
    derandomize=os.environ.get("KUBEGPU_FUZZ_SEED_RANDOM") != "1",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
GPU_NODE = {
    "metadata": {
        "name": "gpu-0",
        "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"},
    }
}


def plan_of(kind: str, spec: dict[str, Any]) -> Plan | st.Outcome:
    if kind == "ClusterPolicy":
        spec = merged(BASE_POLICY, spec)
    name = "cluster-policy" if kind == "ClusterPolicy" else "gpu-cluster"
    obj = {"metadata": {"name": name, "uid": "u-1", "generation": 1}, "spec": spec}
    caches = Caches(
        policies=Snapshot([obj] if kind == "ClusterPolicy" else []),
        gpu_clusters=Snapshot([obj] if kind == "GPUCluster" else []),
        nodes=Snapshot([GPU_NODE]),
        owned={k: Snapshot() for k in OWNED},
    )
    return Reconciler(Api(None), caches).plan(obj, kind)  # type: ignore[arg-type]


def judged(plan: Plan | st.Outcome) -> None:
    if isinstance(plan, st.Outcome):
        assert plan.reason == st.RECONCILE_FAILED and plan.message.startswith(
            ("ClusterPolicy", "GPUCluster")
        )
        return
    problems = plan.rendered.problems
    if problems:
        assert plan.rendered.objects() == [] and all(p for p in problems)
    names = [
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in plan.writes
    ]
    assert len(names) == len(set(names)), "one object rendered twice"


@FUZZ
@given(from_schema(spec_schema("ClusterPolicy"), max_keys=5))
def test_any_schema_valid_cluster_policy_is_planned_or_refused(spec: dict[str, Any]) -> None:
    judged(plan_of("ClusterPolicy", spec))


@FUZZ
@given(from_schema(spec_schema("GPUCluster"), max_keys=5))
def test_any_schema_valid_gpu_cluster_is_planned_or_refused(spec: dict[str, Any]) -> None:
    judged(plan_of("GPUCluster", spec))
