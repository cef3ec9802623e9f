"""Readiness per state from DaemonSet status, and the ClusterPolicy's status and conditions.

Pure functions over plain dicts (what the watch caches hold). Conditions come as the pair
`Ready` / `Error` with upstream's reasons; a condition's lastTransitionTime only moves when
its status changes, so an unchanged status is never rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubegpu.operator.render import Rendered

Obj = dict[str, Any]

READY = "ready"
NOT_READY = "notReady"
IGNORED = "ignored"

# condition reasons (upstream's, plus one for the GPUCluster conflict)
RECONCILED = "Reconciled"
RECONCILE_FAILED = "ReconcileFailed"
NFD_LABELS_MISSING = "NFDLabelsMissing"
NO_GPU_NODES = "NoGPUNodes"
OPERAND_NOT_READY = "OperandNotReady"
GPU_CLUSTER_CONFLICT = "GPUClusterConflict"
CLUSTER_POLICY_CONFLICT = "ClusterPolicyConflict"
IGNORED_REASON = "Ignored"
EXCLUSIVE = "a cluster is configured by a ClusterPolicy or by a GPUCluster, never both"


def daemonset_ready(ds: Obj | None) -> bool:
    """Upstream's rules (gpu-operator.md §2.5): no matching nodes is ready; otherwise every
    scheduled pod must be updated and available."""
    if ds is None:
        return False
    status = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled", 0))
    generation = int(ds.get("metadata", {}).get("generation", 0))
    if int(status.get("observedGeneration", 0)) < generation:
        return False
    if desired == 0:
        return True
    if int(status.get("numberUnavailable", 0)) != 0:
        return False
    strategy = (ds.get("spec", {}).get("updateStrategy") or {}).get("type", "RollingUpdate")
    if strategy == "OnDelete":
        return int(status.get("numberReady", 0)) == desired
    return (
        int(status.get("updatedNumberScheduled", 0)) == desired
        and int(status.get("numberAvailable", 0)) == desired
    )


@dataclass(frozen=True)
class Outcome:
    state: str  # ready / notReady
    reason: str
    message: str
    not_ready: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.reason not in {RECONCILE_FAILED, GPU_CLUSTER_CONFLICT, CLUSTER_POLICY_CONFLICT}


def evaluate(
    rendered: Rendered,
    daemonsets: Mapping[str, Obj],
    *,
    gpu_nodes: int,
    nfd_labels: bool,
    apply_errors: Sequence[str] = (),
    kind: str = "ClusterPolicy",
) -> Outcome:
    """The policy's (or GPUCluster's) overall state from its rendered states and the
    observed DaemonSets."""
    failures = [*rendered.problems, *(f"{s.name}: {s.error}" for s in rendered.states if s.error)]
    failures += list(apply_errors)
    if failures:
        return Outcome(NOT_READY, RECONCILE_FAILED, "; ".join(failures))
    not_ready = tuple(
        s.name
        for s in rendered.states
        if s.enabled and any(not daemonset_ready(daemonsets.get(name)) for name in s.daemonsets)
    )
    if not_ready:
        return Outcome(
            NOT_READY,
            OPERAND_NOT_READY,
            f"{kind} is not ready; states not ready: [{' '.join(not_ready)}]",
            not_ready,
        )
    if not nfd_labels:
        return Outcome(
            READY,
            NFD_LABELS_MISSING,
            "no node carries Node Feature Discovery labels: GPU nodes cannot be detected",
        )
    if gpu_nodes == 0:
        return Outcome(READY, NO_GPU_NODES, f"{kind} is ready; no GPU node in the cluster")
    return Outcome(
        READY,
        RECONCILED,
        f"{kind} is ready as all resources have been successfully reconciled",
    )


def conflict_outcome(gpu_clusters: Sequence[str]) -> Outcome:
    """The active (older) ClusterPolicy's outcome while GPUClusters exist as well: its
    operands stay, but the cluster is not in a state to call ready."""
    names = ", ".join(gpu_clusters)
    return Outcome(
        NOT_READY,
        GPU_CLUSTER_CONFLICT,
        f"GPUCluster {names} exists: {EXCLUSIVE}; this ClusterPolicy is older and stays "
        "active, the GPUCluster is ignored; delete one of them",
    )


def policy_conflict_outcome(policies: Sequence[str]) -> Outcome:
    """The active (older) GPUCluster's outcome while ClusterPolicies exist as well."""
    names = ", ".join(policies)
    return Outcome(
        NOT_READY,
        CLUSTER_POLICY_CONFLICT,
        f"ClusterPolicy {names} exists: {EXCLUSIVE}; this GPUCluster is older and stays "
        "active, the ClusterPolicy is ignored; delete one of them",
    )


def ignored_status(
    reason: str, message: str, previous: Obj | None, namespace: str, now: str
) -> Obj:
    """The status of a resource that is not the active one (another is older, or its name
    is wrong): state `ignored`, Ready False with the reason; Error True for a conflict
    between a ClusterPolicy and a GPUCluster, which needs someone to delete one."""
    error = reason in {GPU_CLUSTER_CONFLICT, CLUSTER_POLICY_CONFLICT}
    outcome = Outcome(IGNORED, reason, message)
    conds = conditions(outcome, (previous or {}).get("conditions") or [], now, 0)
    if not error:
        conds = conds[:1]
    return {"state": IGNORED, "namespace": namespace, "conditions": conds}


def conditions(outcome: Outcome, previous: Sequence[Obj], now: str, generation: int) -> list[Obj]:
    """The Ready/Error pair for an outcome, keeping transition times that did not change."""
    ready = outcome.state == READY
    error = not outcome.ok
    old = {c.get("type"): c for c in previous}

    def cond(kind: str, status: bool, reason: str, message: str) -> Obj:
        value = "True" if status else "False"
        prev = old.get(kind)
        since = prev["lastTransitionTime"] if prev and prev.get("status") == value else now
        return {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
            "observedGeneration": generation,
        }

    return [
        cond("Ready", ready, outcome.reason, outcome.message),
        cond(
            "Error",
            error,
            outcome.reason if error else RECONCILED,
            outcome.message if error else "",
        ),
    ]


def policy_status(
    outcome: Outcome, previous: Obj | None, namespace: str, now: str, generation: int
) -> Obj:
    previous = previous or {}
    return {
        "state": outcome.state,
        "namespace": namespace,
        "conditions": conditions(outcome, previous.get("conditions") or [], now, generation),
    }
