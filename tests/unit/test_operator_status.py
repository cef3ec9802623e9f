"""Readiness per state from DaemonSet status, and the ClusterPolicy's status and conditions."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.kube.policy import parse_policy_spec
from kubegpu.operator.render import ClusterFacts, render
from kubegpu.operator.status import (
    GPU_CLUSTER_CONFLICT,
    NFD_LABELS_MISSING,
    NO_GPU_NODES,
    OPERAND_NOT_READY,
    RECONCILE_FAILED,
    RECONCILED,
    conditions,
    conflict_outcome,
    daemonset_ready,
    evaluate,
    policy_status,
)

POLICY = parse_policy_spec(
    {
        "driver": {"enabled": False},
        "toolkit": {"enabled": False},
        "migManager": {"enabled": False},
        "dcgm": {"enabled": False},
    }
)


def ds(
    desired: int,
    *,
    available: int | None = None,
    updated: int | None = None,
    unavailable: int = 0,
    generation: int = 2,
    observed: int = 2,
    strategy: str = "RollingUpdate",
    name: str = "x",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "generation": generation},
        "spec": {"updateStrategy": {"type": strategy}},
        "status": {
            "desiredNumberScheduled": desired,
            "numberAvailable": desired if available is None else available,
            "numberReady": desired if available is None else available,
            "updatedNumberScheduled": desired if updated is None else updated,
            "numberUnavailable": unavailable,
            "observedGeneration": observed,
        },
    }


@pytest.mark.parametrize(
    ("daemonset", "ready"),
    [
        (None, False),
        (ds(0), True),  # no matching node is not an error
        (ds(3), True),
        (ds(3, available=2, unavailable=1), False),
        (ds(3, updated=2), False),  # a rollout in progress
        (ds(3, observed=1), False),  # the controller has not seen the new spec yet
        (ds(3, available=2, strategy="OnDelete"), False),
        (ds(3, updated=0, strategy="OnDelete"), True),  # OnDelete: old pods may stay
    ],
)
def test_daemonset_readiness_follows_upstreams_rules(
    daemonset: dict[str, Any] | None, ready: bool
) -> None:
    assert daemonset_ready(daemonset) is ready


def test_the_policy_is_ready_when_every_state_is() -> None:
    rendered = render(POLICY, ClusterFacts(gpu_nodes=2))
    names = [n for s in rendered.states for n in s.daemonsets]
    all_ready = {n: ds(2, name=n) for n in names}
    outcome = evaluate(rendered, all_ready, gpu_nodes=2, nfd_labels=True)
    assert (outcome.state, outcome.reason) == ("ready", RECONCILED)
    some = dict(all_ready, **{"gpu-feature-discovery": ds(2, available=1, unavailable=1)})
    outcome = evaluate(rendered, some, gpu_nodes=2, nfd_labels=True)
    assert (outcome.state, outcome.reason) == ("notReady", OPERAND_NOT_READY)
    assert (
        outcome.message == "ClusterPolicy is not ready; states not ready: [gpu-feature-discovery]"
    )
    assert outcome.ok


def test_no_gpu_node_and_no_nfd_are_ready_with_their_reason() -> None:
    rendered = render(POLICY, ClusterFacts(gpu_nodes=0))
    assert evaluate(rendered, {}, gpu_nodes=0, nfd_labels=True).reason == NO_GPU_NODES
    assert evaluate(rendered, {}, gpu_nodes=0, nfd_labels=False).reason == NFD_LABELS_MISSING


def test_render_and_apply_failures_fail_the_reconcile() -> None:
    broken = render(parse_policy_spec({}), ClusterFacts(gpu_nodes=1))
    outcome = evaluate(broken, {}, gpu_nodes=1, nfd_labels=True)
    assert (outcome.state, outcome.reason) == ("notReady", RECONCILE_FAILED)
    assert "state-driver: driver: no image" in outcome.message
    assert not outcome.ok
    failed = evaluate(
        render(POLICY, ClusterFacts(gpu_nodes=0)),
        {},
        gpu_nodes=0,
        nfd_labels=True,
        apply_errors=["DaemonSet x: forbidden"],
    )
    assert failed.reason == RECONCILE_FAILED and "forbidden" in failed.message


def test_conditions_are_the_ready_error_pair() -> None:
    ok = policy_status(
        evaluate(render(POLICY, ClusterFacts(gpu_nodes=0)), {}, gpu_nodes=0, nfd_labels=True),
        None,
        "gpu-operator",
        "2026-01-01T00:00:00Z",
        3,
    )
    assert ok["state"] == "ready" and ok["namespace"] == "gpu-operator"
    by_type = {c["type"]: c for c in ok["conditions"]}
    assert by_type["Ready"]["status"] == "True"
    assert by_type["Error"]["status"] == "False"
    assert by_type["Ready"]["observedGeneration"] == 3
    conflict = policy_status(
        conflict_outcome(["dra"]), ok, "gpu-operator", "2026-01-01T00:05:00Z", 3
    )
    by_type = {c["type"]: c for c in conflict["conditions"]}
    assert conflict["state"] == "notReady"
    assert by_type["Ready"]["status"] == "False"
    assert by_type["Error"]["status"] == "True"
    assert by_type["Error"]["reason"] == GPU_CLUSTER_CONFLICT
    assert "GPUCluster dra exists" in by_type["Error"]["message"]


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    outcome = evaluate(render(POLICY, ClusterFacts(gpu_nodes=0)), {}, gpu_nodes=0, nfd_labels=True)
    first = conditions(outcome, [], "2026-01-01T00:00:00Z", 1)
    again = conditions(outcome, first, "2026-01-01T01:00:00Z", 1)
    assert again == first  # nothing to write
    flipped = conditions(conflict_outcome(["g"]), first, "2026-01-01T02:00:00Z", 1)
    assert {c["type"]: c["lastTransitionTime"] for c in flipped} == {
        "Ready": "2026-01-01T02:00:00Z",
        "Error": "2026-01-01T02:00:00Z",
    }
