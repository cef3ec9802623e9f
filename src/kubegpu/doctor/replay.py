"""When `kubegpu why` replays a pod on the what-if twin, what it tries there, and what the
outcome says (pure).

The snapshot's verdict (`doctor.why`) reads what the API server shows. Some causes only an
attempt shows: a MIG profile that is "Insufficient" (or advertised nowhere) while GPUs with
no pod on them sit in another layout, so the right answer is "this node would take it after
this relabel", not "wait" or "ask for the nearest name"; or a pod the snapshot finds no GPU
reason for at all. `replay_plan` decides whether the verdict needs a replay and which node
labels to try; `kubegpu.whatif.pod_replay` builds the twin, applies them and observes the
pod (I/O); `replayed` turns the observation into the verdict. docs/doctor.md, "Replayed on
the twin".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.doctor import why as w
from kubegpu.doctor.facts import LabelError, gpu_model, node_mig_layouts
from kubegpu.doctor.snapshot import NodeInfo, PodInfo, Snapshot

# the kinds of verdict a replay gives, in the words `--json` prints
RESHAPE = "mig-layout-would-place"
NOT_GPU = "twin-places-it"

# at most this many nodes are relabelled in one replay (each has its MIG manager's work)
MAX_TRIES = 3
# the verdicts whose cause may be capacity in the wrong shape
_SHAPE_KINDS = (w.INSUFFICIENT, w.FRAGMENTED, w.UNKNOWN_RESOURCE)
_DONE = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Try:
    """A node label to set on the twin, and why this node."""

    node: str
    labels: dict[str, str]
    why: str


@dataclass(frozen=True)
class ReplayPlan:
    """What the replay is for, the labels it tries (none: the twin as the snapshot is), and
    the nodes it leaves alone, with why."""

    pod: str
    question: str
    tries: tuple[Try, ...] = ()
    left: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "tries": [{"node": t.node, "labels": t.labels, "why": t.why} for t in self.tries],
            "not_tried": list(self.left),
        }


@dataclass(frozen=True)
class PodSeen:
    """The pod on the twin: its phase, its node, and the scheduler's words if Pending."""

    phase: str
    node: str = ""
    reason: str = ""


@dataclass(frozen=True)
class NodeSeen:
    """A tried node on the twin after the change: its MIG state, the MIG manager's last
    word, what it advertises."""

    node: str
    mig_state: str | None = None
    mig_message: str = ""
    advertised: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayResult:
    """What the twin showed: the pod before the change and after it (None: no change was
    tried), the tried nodes, and what had not settled at the deadline."""

    before: PodSeen
    after: PodSeen | None = None
    nodes: tuple[NodeSeen, ...] = ()
    unsettled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _busy(snapshot: Snapshot, node: str, pod: PodInfo) -> list[str]:
    return sorted(
        p.key
        for p in snapshot.pods_on(node)
        if p.phase not in _DONE and p.key != pod.key and (p.gpu_resources or p.claims)
    )


def _configs_offering(snapshot: Snapshot, node: NodeInfo, profile: str) -> list[str]:
    """The mig-parted configs of the node's MIG manager that make `profile` instances, the
    likeliest first: `all-<profile>`, then configs of that profile alone, then the rest."""
    try:
        layouts = node_mig_layouts(snapshot, node)
    except LabelError:
        return []
    if layouts is None:
        return []
    offering = []
    for name, entries in layouts.mig_configs.items():
        wanted = [e.wanted() for e in entries if e.mig_enabled]
        if any(profile in want for want in wanted):
            only = all(set(want) <= {profile} for want in wanted)
            offering.append((name != f"all-{profile}", not only, name))
    return [name for *_, name in sorted(offering)]


def replay_plan(snapshot: Snapshot, verdict: w.Verdict) -> ReplayPlan | None:
    """Whether the snapshot's verdict needs the twin, and what to try there; None: it does
    not (the scheduler's reason and the snapshot's facts are the whole answer).

    - `insufficient`, `fragmented` or `resource-not-advertised` for a MIG profile: the
      nodes in the pod's reach whose GPUs have no pod on them, whose model has the profile
      and whose MIG manager has a layout that makes it (and is not already asked for it),
      at most MAX_TRIES, are relabelled `nvidia.com/mig.config` to that layout; a node with
      running GPU pods is never tried (the MIG manager will not repartition a GPU in use).
    - `scheduler-says` (no GPU reason in the snapshot): the twin as the snapshot is, to
      see whether its scheduler places the pod on the same GPUs.
    A twin needs the GPU stack: without a ClusterPolicy or GPUCluster there is no replay;
    nor for a pod with resource claims, which the twin does not recreate.
    """
    if not (snapshot.cluster_policies or snapshot.gpu_clusters):
        return None
    try:
        pod = w.find_pod(snapshot, verdict.pod)
    except w.WhyError:
        return None
    if pod.claims:
        return None  # the twin does not recreate resource claims
    if verdict.kind == w.SCHEDULER:
        return ReplayPlan(
            pod.key,
            "the snapshot shows no GPU reason: does the twin's scheduler place the pod on "
            "the same GPUs?",
        )
    if verdict.kind not in _SHAPE_KINDS:
        return None
    profiles = [(res, p) for res in sorted(pod.gpu_resources) if (p := _profile(res)) is not None]
    if len(profiles) != 1:
        return None
    resource, profile = profiles[0]
    tries: list[Try] = []
    left: list[str] = []
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        model = gpu_model(node)
        if model is None or model.mig is None:
            continue
        if profile not in {p.name for p in model.mig.gpu_instance_profiles}:
            continue
        out_of_reach = w.reason_excluded(node, pod)
        if out_of_reach is not None:
            left.append(out_of_reach[1])
            continue
        state = node.labels.get(nvidia.MIG_CONFIG_STATE)
        if state == nvidia.MIG_STATE_PENDING:
            left.append(f"node {node.name}: its MIG manager is still applying a layout")
            continue
        busy = _busy(snapshot, node.name, pod)
        if busy:
            left.append(
                f"node {node.name}: running GPU pods {', '.join(busy[:5])} (a GPU in use is "
                "never repartitioned)"
            )
            continue
        configs = [
            c for c in _configs_offering(snapshot, node, profile)
            if c != node.labels.get(nvidia.MIG_CONFIG) or state == nvidia.MIG_STATE_FAILED
        ]  # fmt: skip
        if not configs:
            left.append(f"node {node.name}: no layout of its MIG manager makes {profile}")
            continue
        if len(tries) < MAX_TRIES:
            tries.append(
                Try(
                    node.name,
                    {nvidia.MIG_CONFIG: configs[0]},
                    f"no GPU pod on it; its {model.id} GPUs make {profile} under "
                    f"{configs[0]!r} (now {node.labels.get(nvidia.MIG_CONFIG) or 'unset'})",
                )
            )
    if not tries:
        return None
    return ReplayPlan(
        pod.key,
        f"{resource} is short, but idle MIG-capable GPUs could make it in another layout: "
        "which node would take the pod after which relabel?",
        tuple(tries),
        tuple(left),
    )


def _profile(resource: str) -> str | None:
    prefix = nvidia.MIG_RESOURCE_PREFIX
    return resource.removeprefix(prefix) if resource.startswith(prefix) else None


def _seen(where: str, seen: PodSeen) -> str:
    if seen.phase == "Running" or seen.node:
        return f"{where}: the pod is {seen.phase or 'bound'} on {seen.node or '?'}"
    return f"{where}: still {seen.phase or 'not created'}" + (
        f"; the twin's scheduler: {seen.reason}" if seen.reason else ""
    )


def replayed(verdict: w.Verdict, plan: ReplayPlan, result: ReplayResult) -> w.Verdict:
    """The verdict once the twin has answered: a relabel that placed the pod becomes the
    cause and the fix; otherwise the snapshot's verdict stands, with what the twin showed."""
    evidence = [*verdict.evidence, f"replayed on the what-if twin: {plan.question}"]
    evidence.append(_seen("on the twin as the snapshot", result.before))
    for t in plan.tries:
        shown = ", ".join(f"{k}={v}" for k, v in t.labels.items())
        evidence.append(f"tried: node {t.node}: {shown} ({t.why})")
    evidence += [f"not tried: {why}" for why in plan.left]
    for n in result.nodes:
        said = f"; the MIG manager: {n.mig_message}" if n.mig_message else ""
        evidence.append(f"node {n.node} after: {nvidia.MIG_CONFIG_STATE}={n.mig_state}{said}")
    if result.after is not None:
        evidence.append(_seen("on the twin after the relabel", result.after))
    evidence += [f"unsettled: {u}" for u in result.unsettled]
    evidence += list(result.notes)
    record = {**plan.to_json(), "before": _json(result.before)}
    record["after"] = _json(result.after) if result.after is not None else None
    record["nodes"] = [
        {"node": n.node, "mig_state": n.mig_state, "mig_message": n.mig_message}
        for n in result.nodes
    ]
    base = replace(verdict, evidence=tuple(evidence), replay=record)
    placed = result.after is not None and result.after.phase == "Running"
    if placed and result.after is not None:
        took = next((t for t in plan.tries if t.node == result.after.node), None)
        if took is not None:
            labels = " ".join(f"{k}={v}" for k, v in took.labels.items())
            return replace(
                base,
                kind=RESHAPE,
                reason=f"the GPUs to run it exist in another MIG layout: on the twin, node "
                f"{took.node} took the pod once labelled {labels}",
                evidence=(
                    f"from the snapshot alone ({verdict.kind}): {verdict.reason}",
                    *base.evidence,
                ),
                fix=f"kubectl label node {took.node} {labels} --overwrite, and wait for "
                f"{nvidia.MIG_CONFIG_STATE}=success (`kubegpu plan --from-snapshot` finds "
                "the smallest change for every Pending pod)",
            )
    if plan.tries == () and result.before.phase == "Running":
        return replace(
            base,
            kind=NOT_GPU,
            reason=f"the twin (the same nodes, GPUs, labels and GPU pods) runs the pod on "
            f"{result.before.node}: the GPUs are not what keeps it Pending",
            fix="look beyond the GPUs: CPU and memory requests, affinities, volumes, "
            "priorities and quotas (`kubectl describe pod`)",
        )
    return base


def not_replayed(verdict: w.Verdict, plan: ReplayPlan, why: str) -> w.Verdict:
    """The snapshot's verdict, saying the replay that would have been tried and why not."""
    tries = "; ".join(
        f"node {t.node}: " + ", ".join(f"{k}={v}" for k, v in t.labels.items()) for t in plan.tries
    )
    line = f"not replayed on the what-if twin ({why}): {plan.question}" + (
        f" (would try {tries})" if tries else ""
    )
    return replace(
        verdict,
        evidence=(*verdict.evidence, line),
        replay={**plan.to_json(), "skipped": why},
    )


def _json(seen: PodSeen) -> dict[str, str]:
    return {"phase": seen.phase, "node": seen.node, "reason": seen.reason}
