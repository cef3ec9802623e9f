"""`kubegpu plan --from-snapshot`: a doctor snapshot as the planner's starting point and
demand, and the plan as an ordered runbook against that cluster.

It joins two siblings the layer contract keeps apart (see the package's docstring): the
doctor's snapshot and facts (what the cluster runs) and the planner (what it should run).
Everything here is a pure function of a `Snapshot` and a `Plan`.

The rules (docs/planner.md, "From a snapshot"):

- a GPU node is one fleet node: its model and driver from GPU feature discovery's labels,
  its GPUs' current MIG layout from `nvidia.com/mig.config` read in the mig-parted ConfigMap
  the node's MIG manager uses (only once `mig.config.state` is `success`), its sharing from
  the device-plugin config its label selects;
- the snapshot does not say which device a running pod holds, so: running pods that hold
  whole GPUs take that many of the node's full GPUs (they are alike); running pods that
  hold MIG instances pin the layout of *every* MIG GPU of their node (none of them is
  repartitioned), their instances counted busy; running pods on a sharing node keep the
  node's sharing mode and replicas;
- the demand is the Pending pods no node holds yet, grouped by what they request:
  `nvidia.com/gpu: N` is N whole GPUs of one node, `nvidia.com/mig-<profile>: 1` one
  instance of exactly that profile; anything else (a shared or renamed resource, a DRA
  claim, several MIG instances in one pod, a node selector) is listed as not planned;
- `--allow-evictions` (`plan_from`): while Pending pods are left, nodes are released one at
  a time, fewest running GPU pods first, their pods planned again ahead of any Pending pod;
  a release is kept only when it places more Pending pods and every moved pod;
- a node whose MIG manager generated its layouts (no `spec.migManager.config.name`: it
  publishes them in `<node>-mig-config` for reading only, and never reads that ConfigMap
  back) gets its new layout from a ConfigMap the runbook creates with every generated
  layout of the cluster's nodes plus the new ones, which the ClusterPolicy is then pointed
  at (`migManager.config.name`): adding a config to a generated ConfigMap does nothing.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import yaml

from kubegpu.catalog import GpuModel, get_model, nvidia
from kubegpu.doctor import facts
from kubegpu.doctor.snapshot import NodeInfo, PodInfo, Snapshot
from kubegpu.plan import Plan, make_plan
from kubegpu.plan.emit import assign_configs, device_plugin_config
from kubegpu.plan.inputs import (
    Current,
    CurrentGpu,
    FleetNode,
    Options,
    PlanInput,
    Workload,
)

MIG_PREFIX = nvidia.MIG_RESOURCE_PREFIX
GPU = nvidia.GPU_RESOURCE
# the ConfigMap the runbook creates where the MIG managers generated their layouts
CREATED_MIG_CONFIGMAP = "kubegpu-mig-parted-config"
CREATED_MIG_FILE = "mig-parted-configmap-to-create.yaml"


class SnapshotPlanError(ValueError):
    """The snapshot cannot be planned from (names the node or pod and why)."""


@dataclass(frozen=True)
class NodeStart:
    """What a node runs now, as the snapshot shows it."""

    name: str
    model: str
    count: int
    mig_config: str | None  # the `nvidia.com/mig.config` label
    plugin_config: str | None  # the `nvidia.com/device-plugin.config` label
    layout: tuple[tuple[tuple[str, int], ...] | None, ...]  # per GPU: MIG layout or None
    running: tuple[str, ...]  # running GPU pods (namespace/name)
    pinned: bool  # MIG instances in use whose devices are unknown: every layout kept
    mig_configmap: str  # the ConfigMap the node's MIG manager reads
    existing: frozenset[str] = frozenset()  # the config names that ConfigMap has
    generated: bool = False  # mig_configmap is the MIG manager's own, published, never read


@dataclass(frozen=True)
class Start:
    """The planner's input from a snapshot, and what it was made from."""

    input: PlanInput
    nodes: dict[str, NodeStart]
    pending: dict[str, tuple[str, ...]]  # workload -> the Pending pods it stands for
    requests: dict[str, dict[str, int]]  # workload -> the resources each pod requests
    not_planned: tuple[str, ...] = ()  # pods and nodes left out, with why
    plugin_configmap: str | None = None
    cluster_strategy: str = ""  # the ClusterPolicy's spec.mig.strategy
    # --allow-evictions: nodes whose running GPU pods are deleted (their controllers make
    # them again) so that the node may be repartitioned, and the workloads they become
    evicted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    moved: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # the layouts the MIG managers generated, every node's together (see the docstring)
    generated_layouts: dict[str, Any] = field(default_factory=dict)
    cluster_policy: str | None = None  # its name


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def pod_requests(pod: PodInfo) -> dict[str, int]:
    """The NVIDIA resources a pod asks for, as counts."""
    return {k: _count(v) for k, v in pod.gpu_resources.items() if _count(v) > 0}


def is_pending(pod: PodInfo) -> bool:
    return pod.phase == "Pending" and not pod.node


def is_running(pod: PodInfo) -> bool:
    """A pod that holds devices now: bound to a node and not finished."""
    return bool(pod.node) and pod.phase in ("Running", "Pending", "Unknown", "")


def _layouts(snapshot: Snapshot, node: NodeInfo, model: GpuModel, count: int) -> list[Any]:
    """Per GPU, the MIG layout the node's label applied (None: MIG off or not applied)."""
    name = node.labels.get(nvidia.MIG_CONFIG)
    state = node.labels.get(nvidia.MIG_CONFIG_STATE)
    out: list[Any] = [None] * count
    if not name or name == nvidia.MIG_ALL_DISABLED or state != nvidia.MIG_STATE_SUCCESS:
        return out
    cm_name = facts.mig_parted_configmap(snapshot, node)
    cm = snapshot.config_map(cm_name)
    text = (cm.data.get("config.yaml") if cm is not None else None) or ""
    if not text and cm is not None and cm.data:
        text = next(iter(cm.data.values()))
    config, error = facts.mig_parted_config(text, f"configmap {cm_name}")
    if config is None or name not in config.mig_configs:
        why = error or f"has no config {name!r}"
        raise SnapshotPlanError(
            f"node {node.name}: label {nvidia.MIG_CONFIG}={name}: configmap {cm_name} {why}"
        )
    for i in range(count):
        entry = next(
            (e for e in config.mig_configs[name] if e.selects(i, model.pci_device_id)), None
        )
        if entry is not None and entry.mig_enabled and entry.wanted():
            out[i] = tuple(sorted(entry.wanted().items()))
    return out


def _single_profile(node: NodeInfo) -> str | None:
    """Under the `single` strategy with MIG on, `nvidia.com/gpu` is an instance of this."""
    _, profile = facts.split_product(node.labels.get(nvidia.GPU_PRODUCT, ""))
    return profile if profile and profile != "INVALID" else None


def _node_start(
    snapshot: Snapshot, node: NodeInfo, pods: list[PodInfo]
) -> tuple[FleetNode, NodeStart] | str:
    model = facts.gpu_model(node)
    if model is None:
        return f"node {node.name}: GPU model of {node.labels.get(nvidia.GPU_PRODUCT)!r} unknown"
    try:
        count = facts.gpu_count(snapshot, node)
    except facts.LabelError as exc:
        return str(exc)
    if count <= 0:
        return f"node {node.name}: label {nvidia.GPU_COUNT} gives no GPU count"
    layouts = _layouts(snapshot, node, model, count)
    held: Counter[str] = Counter()
    single = _single_profile(node)
    for p in pods:
        for res, n in pod_requests(p).items():
            held[f"{MIG_PREFIX}{single}" if res == GPU and single else res] += n
    choice = facts.plugin_config_of(snapshot, node)
    sharing: tuple[str, int] | None = None
    if choice.config is not None:
        s = choice.config.sharing
        rr = s.mps if s.mps is not None else s.time_slicing
        if rr is not None and rr.resources:
            sharing = ("mps" if s.mps is not None else "time-slicing", rr.resources[0].replicas)
    gpus: dict[int, CurrentGpu] = {}
    mig_busy = {k.removeprefix(MIG_PREFIX): n for k, n in held.items() if k.startswith(MIG_PREFIX)}
    pinned = bool(mig_busy)
    for i, lay in enumerate(layouts):
        if lay is None:
            continue
        busy: dict[str, int] = {}
        for profile, n in lay:  # instances in use, packed onto the lowest GPUs
            take = min(n, mig_busy.get(profile, 0))
            if take:
                busy[profile] = take
                mig_busy[profile] -= take
        gpus[i] = CurrentGpu(mig=dict(lay), busy=busy or None, keep=pinned)
    whole = held.get(GPU, 0)
    full = [i for i, lay in enumerate(layouts) if lay is None]
    if sharing is not None:
        _, replicas = sharing
        for i in full:
            take = min(replicas, whole)
            if take:
                gpus[i] = CurrentGpu(busy=take)
                whole -= take
    else:
        for i in full[:whole]:
            gpus[i] = CurrentGpu(busy="whole")
        whole -= len(full[:whole])
    extra = [f"{n} {GPU}" for n in [whole] if n > 0]
    extra += [f"{n} {MIG_PREFIX}{p}" for p, n in sorted(mig_busy.items()) if n > 0]
    if extra:
        return f"node {node.name}: running pods hold {', '.join(extra)} more than its GPUs offer"
    current = None
    if gpus or sharing is not None:
        current = Current(
            sharing=sharing[0] if sharing else "none",
            replicas=sharing[1] if sharing else None,
            gpus=gpus,
        )
    fleet = FleetNode(
        name=node.name,
        gpus=f"{model.id}:{count}",
        driver=facts.driver(node),
        current=current,
    )
    cm_name = facts.mig_parted_configmap(snapshot, node)
    start = NodeStart(
        name=node.name,
        model=model.id,
        count=count,
        mig_config=node.labels.get(nvidia.MIG_CONFIG),
        plugin_config=node.labels.get(nvidia.DEVICE_PLUGIN_CONFIG),
        layout=tuple(layouts),
        running=tuple(sorted(p.key for p in pods)),
        pinned=pinned,
        mig_configmap=cm_name,
        existing=_config_names(snapshot, cm_name),
        generated=cm_name == node.name + nvidia.MIG_GENERATED_CONFIGMAP_SUFFIX
        and not facts.spec_at(snapshot.cluster_policy, "migManager", "config", "name"),
    )
    return fleet, start


def _generated_layouts(snapshot: Snapshot, nodes: dict[str, NodeStart]) -> dict[str, Any]:
    """Every layout the MIG managers generated, by name, in one mig-parted config: each
    entry filtered to its GPU model (`device-filter`), so that a name two models generated
    differently (`all-balanced`) holds both, each applying to its own GPUs only."""
    out: dict[str, list[Any]] = {}
    seen: set[tuple[str, str]] = set()
    for st in sorted(nodes.values(), key=lambda n: n.name):
        cm = snapshot.config_map(st.mig_configmap) if st.generated else None
        doc = yaml.safe_load(cm.data.get("config.yaml", "")) if cm is not None else None
        configs = doc.get("mig-configs") if isinstance(doc, dict) else None
        model = get_model(st.model)
        pci = f"0x{model.pci_device_id:08X}"
        for name, entries in (configs or {}).items():
            if (name, pci) in seen or not isinstance(entries, list):
                continue
            seen.add((name, pci))
            out.setdefault(name, []).extend(
                e
                if not isinstance(e, dict) or "device-filter" in e
                else {**e, "device-filter": [pci]}
                for e in entries
            )
    return out


def _config_names(snapshot: Snapshot, cm_name: str) -> frozenset[str]:
    cm = snapshot.config_map(cm_name)
    if cm is None:
        return frozenset()
    config, _ = facts.mig_parted_config(cm.data.get("config.yaml", ""), f"configmap {cm_name}")
    return frozenset(config.mig_configs) if config is not None else frozenset()


def _workload_name(requests: dict[str, int], prefix: str = "pending") -> str:
    ((res, n),) = requests.items()
    text = res.removeprefix(nvidia.PREFIX)
    return re.sub(r"[^a-z0-9]+", "-", f"{prefix}-{text}-x{n}".lower()).strip("-")[:63]


def _demand(
    pods: list[PodInfo], prefix: str = "pending", priority: float = 1.0
) -> tuple[list[Workload], dict[str, list[str]], list[str]]:
    groups: dict[str, list[str]] = {}
    asks: dict[str, dict[str, int]] = {}
    skipped: list[str] = []
    for p in pods:
        req = pod_requests(p)
        if p.claims and not req:
            skipped.append(f"pod {p.key}: DRA claims are not planned from a snapshot")
            continue
        if p.node_selector:
            skipped.append(
                f"pod {p.key}: a node selector ({', '.join(sorted(p.node_selector))}) is not planned"
            )
            continue
        if len(req) != 1:
            skipped.append(f"pod {p.key}: requests {req}: one NVIDIA resource per pod is planned")
            continue
        ((res, n),) = req.items()
        if res.startswith(MIG_PREFIX) and n != 1:
            skipped.append(f"pod {p.key}: {n} MIG instances in one pod are not planned")
            continue
        if res != GPU and not res.startswith(MIG_PREFIX):
            skipped.append(f"pod {p.key}: resource {res} is not planned (only {GPU}, mig-*)")
            continue
        name = _workload_name(req, prefix)
        groups.setdefault(name, []).append(p.key)
        asks[name] = req
    workloads = []
    for name, keys in sorted(groups.items()):
        ((res, n),) = asks[name].items()
        if res == GPU:
            w = Workload(
                name=name,
                replicas=len(keys),
                memory="1MiB",
                kind="training",
                gpus=n,
                priority=priority,
            )
        else:
            w = Workload(
                name=name,
                replicas=len(keys),
                memory="1MiB",
                profile=res.removeprefix(MIG_PREFIX),
                priority=priority,
            )
        workloads.append(w)
    return workloads, groups, skipped


def start_from(
    snapshot: Snapshot,
    *,
    solver: str = "auto",
    time_limit: float = 30.0,
    evict: frozenset[str] = frozenset(),
) -> Start:
    """The fleet as it runs now and the Pending GPU pods as the demand; on the nodes in
    `evict`, the running GPU pods become demand too (placed before any Pending pod)."""
    workload_pods = snapshot.workload_pods
    by_node: dict[str, list[PodInfo]] = {}
    for p in workload_pods:
        if is_running(p):
            by_node.setdefault(p.node, []).append(p)
    fleet: list[FleetNode] = []
    nodes: dict[str, NodeStart] = {}
    skipped: list[str] = []
    moved_pods: list[PodInfo] = []
    for node in snapshot.nodes:
        if not facts.is_gpu_node(node):
            continue
        running = by_node.get(node.name, [])
        if node.name in evict:
            moved_pods += [_as_pending(node, p) for p in running]
            running = []
        made = _node_start(snapshot, node, running)
        if isinstance(made, str):
            skipped.append(made)
            continue
        fleet.append(made[0])
        nodes[node.name] = made[1]
    if not fleet:
        raise SnapshotPlanError("the snapshot has no GPU node the planner can use")
    workloads, groups, skipped_pods = _demand([p for p in workload_pods if is_pending(p)])
    # a moved pod outweighs any Pending one: evicting it must never leave it unplaced
    moved, moved_groups, moved_skipped = _demand(moved_pods, "moved", priority=1000.0)
    inp = PlanInput(
        fleet=tuple(fleet),
        workloads=tuple(workloads + moved),
        options=Options(solver=solver, mig_strategy="mixed", time_limit=time_limit),
    )
    return Start(
        input=inp,
        nodes=nodes,
        pending={k: tuple(v) for k, v in groups.items()},
        requests={w.name: _request_of(w) for w in workloads + moved},
        not_planned=tuple(skipped + skipped_pods + moved_skipped),
        plugin_configmap=facts.plugin_configmap(snapshot)[0],
        cluster_strategy=str(facts.spec_at(snapshot.cluster_policy, "mig", "strategy") or ""),
        evicted={
            n: tuple(sorted(p.key for p in by_node.get(n, []))) for n in sorted(evict) if n in nodes
        },
        moved={k: tuple(v) for k, v in moved_groups.items()},
        generated_layouts=_generated_layouts(snapshot, nodes),
        cluster_policy=snapshot.cluster_policy.name if snapshot.cluster_policy else None,
    )


def _as_pending(node: NodeInfo, pod: PodInfo) -> PodInfo:
    """A running pod as the Pending pod its controller makes after the eviction, asking
    what it holds now (`nvidia.com/gpu` under `single` with MIG on: that profile)."""
    single = _single_profile(node)
    req = {
        (f"{MIG_PREFIX}{single}" if k == GPU and single else k): str(n)
        for k, n in pod_requests(pod).items()
    }
    return pod.model_copy(update={"node": "", "phase": "Pending", "requests": req, "limits": req})


def evictable(snapshot: Snapshot, node: str) -> list[PodInfo] | None:
    """The running GPU pods on `node`, if a controller makes each again once deleted (a
    bare pod deleted is gone: such a node is never a candidate)."""
    pods = [p for p in snapshot.workload_pods if is_running(p) and p.node == node]
    return pods if pods and all(p.owner_kind for p in pods) else None


def plan_from(
    snapshot: Snapshot, *, solver: str = "auto", allow_evictions: bool = False
) -> tuple[Start, Plan]:
    """The plan that disrupts no running pod; with `allow_evictions`, while Pending pods
    are left, nodes are released one at a time, fewest running GPU pods first, and a
    release is kept only when it places more Pending pods and every moved pod."""
    start = start_from(snapshot, solver=solver)
    plan = make_plan(start.input)
    if not allow_evictions or _left(start, plan) == 0:
        return start, plan
    candidates = sorted(
        (len(pods), n.name)
        for n in snapshot.nodes
        if n.name in start.nodes and (pods := evictable(snapshot, n.name)) is not None
    )
    evict: frozenset[str] = frozenset()
    for _, name in candidates:
        trial = start_from(snapshot, solver=solver, evict=evict | {name})
        tplan = make_plan(trial.input)
        moved_left = sum(w.left for w in tplan.workloads if w.name in trial.moved)
        if moved_left == 0 and _left(trial, tplan) < _left(start, plan):
            start, plan, evict = trial, tplan, evict | {name}
            if _left(start, plan) == 0:
                break
    return start, plan


def _left(start: Start, plan: Plan) -> int:
    return sum(w.left for w in plan.workloads if w.name in start.pending)


def _request_of(w: Workload) -> dict[str, int]:
    if w.profile is not None:
        return {f"{MIG_PREFIX}{w.profile}": 1}
    return {GPU: w.gpus}


# --- the change -----------------------------------------------------------------------


@dataclass(frozen=True)
class NodeChange:
    node: str
    mig_configmap: str  # where the new layout is added
    mig_config: str | None  # new `nvidia.com/mig.config` value (None: unchanged)
    plugin_config: str | None  # new `nvidia.com/device-plugin.config` value
    repartitioned: tuple[int, ...]  # GPUs whose MIG layout changes
    waits_for: dict[str, int]  # allocatable the node advertises once it is done


@dataclass(frozen=True)
class Change:
    nodes: tuple[NodeChange, ...]
    mig_configs: dict[str, list[dict[str, Any]]]  # configs to add to the cluster's ConfigMap
    plugin_configs: dict[str, dict[str, Any]]  # device-plugin configs to add

    @property
    def repartitioned(self) -> int:
        return sum(len(c.repartitioned) for c in self.nodes)


def change_of(start: Start, plan: Plan) -> Change:
    """The relabels and new configs that turn the cluster into the plan: only nodes with a
    GPU whose layout changes are touched (a node whose layouts stay keeps its labels)."""
    mig_configs, _ = assign_configs(plan)
    out: list[NodeChange] = []
    used_mig: dict[str, list[dict[str, Any]]] = {}
    used_dp: dict[str, dict[str, Any]] = {}
    for n in sorted(plan.nodes, key=lambda n: n.name):
        st = start.nodes[n.name]
        moved = []
        for g in n.gpus:
            now = st.layout[g.index]
            want = tuple(sorted((p, k) for p, k in g.mig.items() if k)) if g.mig_enabled else None
            if now != want:
                moved.append(g.index)
        if not moved and n.name not in start.evicted:
            continue
        mig_name = n.mig_config
        if mig_name is not None:
            mig_name = _fresh(mig_name, st, start.generated_layouts if st.generated else {})
            used_mig[mig_name] = mig_configs[n.mig_config or ""]
        dp_name, dp = device_plugin_config(n)
        plugin = None
        if n.mig_strategy == "mixed" or n.sharing != "none":
            plugin = dp_name
            used_dp[dp_name] = dp
        waits: Counter[str] = Counter()
        for g in n.gpus:
            if g.mig_enabled:
                for p, k in g.mig.items():
                    waits[f"{MIG_PREFIX}{p}"] += k
        out.append(
            NodeChange(
                n.name,
                CREATED_MIG_CONFIGMAP if st.generated else st.mig_configmap,
                mig_name,
                plugin,
                tuple(moved),
                dict(sorted(waits.items())),
            )
        )
    return Change(tuple(out), used_mig, used_dp)


def _fresh(name: str, st: NodeStart, more: dict[str, Any]) -> str:
    """The plan's config name, unless the node's ConfigMap (or `more`) has one of that name."""
    out, i = name, 1
    while out in st.existing or out in more:
        i += 1
        out = f"{name}-{i}"
    return out


# --- the runbook ----------------------------------------------------------------------


def _jsonpath_key(key: str) -> str:
    return key.replace(".", r"\.")


def runbook(start: Start, plan: Plan, change: Change, namespace: str = "gpu-operator") -> str:
    """The steps in order, each with the command and what to wait for."""
    lines = ["# Runbook: from the snapshot's cluster to the plan", ""]
    placed = {w.name: w.placed for w in plan.workloads}
    for name, pods in sorted(start.pending.items()):
        lines.append(f"- {name}: {placed.get(name, 0)} of {len(pods)} Pending pods placed")
    lines += [
        "",
        f"GPUs repartitioned: {change.repartitioned}; running pods disrupted: "
        f"{sum(len(p) for p in start.evicted.values())}.",
        "",
    ]
    if not change.nodes:
        lines.append("Nothing to change: no node needs a new layout.")
        return "\n".join(lines) + "\n"
    step = 1
    if start.cluster_strategy != "mixed" and any(c.waits_for for c in change.nodes):
        lines += [
            "The plan's MIG instances are advertised as `nvidia.com/mig-<profile>`, which needs "
            "the `mixed` strategy: set the ClusterPolicy's spec.mig.strategy to mixed first "
            f"(it is {start.cluster_strategy or 'unset'}; it overrides every node's "
            "device-plugin config).",
            "",
        ]
    lines += [
        f"## {step}. Add the new layouts to the ConfigMaps (nothing changes on a node yet)",
        "",
    ]
    by_cm: dict[str, list[str]] = {}
    for c in change.nodes:
        if c.mig_config:
            by_cm.setdefault(c.mig_configmap, []).append(c.mig_config)
    created = by_cm.pop(CREATED_MIG_CONFIGMAP, None)
    if created:
        patch = json.dumps({"spec": {"migManager": {"config": {"name": CREATED_MIG_CONFIGMAP}}}})
        lines += [
            f"- The MIG managers generated their layouts (`<node>{nvidia.MIG_GENERATED_CONFIGMAP_SUFFIX}` "
            "ConfigMaps are published for reading, a config added there is never read): "
            f"create ConfigMap {namespace}/{CREATED_MIG_CONFIGMAP} with every generated "
            f"layout and {', '.join(sorted(set(created)))}, and point the ClusterPolicy at it "
            "(the nodes keep their layouts: their configs are in it under the same names).",
            "",
            "```bash",
            f"kubectl apply -n {namespace} -f {CREATED_MIG_FILE}",
            f"kubectl patch clusterpolicy {start.cluster_policy or 'cluster-policy'} --type merge -p '{patch}'",
            "```",
            "",
        ]
    for cm, names in sorted(by_cm.items()):
        lines.append(
            f"- ConfigMap {namespace}/{cm}, key config.yaml: add mig-configs "
            f"{', '.join(sorted(set(names)))} from `mig-parted-configs-to-add.yaml`."
        )
    if change.plugin_configs and start.plugin_configmap:
        lines.append(
            f"- ConfigMap {namespace}/{start.plugin_configmap}: add the keys "
            f"{', '.join(sorted(change.plugin_configs))} from `device-plugin-configs-to-add.yaml`."
        )
    if change.plugin_configs and not start.plugin_configmap:
        lines.append(
            "The cluster has no device-plugin ConfigMap: create one from "
            "`device-plugin-configs-to-add.yaml` and set the ClusterPolicy's "
            "devicePlugin.config.name to it."
        )
    lines.append("")
    for c in change.nodes:
        step += 1
        lines += [
            f"## {step}. node {c.node}: GPUs {', '.join(map(str, c.repartitioned))} repartitioned"
            + (
                " (its running GPU pods evicted first)"
                if c.node in start.evicted
                else " (no running pod on them)"
            ),
            "",
            "```bash",
        ]
        evicted = start.evicted.get(c.node, ())
        if evicted:
            lines.append(
                f"# --allow-evictions: {len(evicted)} running GPU pods are deleted here; "
                "their controllers make them again and the plan places them"
            )
            lines.append(f"kubectl cordon {c.node}")
            lines += [
                f"kubectl delete pod -n {k.split('/')[0]} {k.split('/')[1]} --wait" for k in evicted
            ]
        if c.plugin_config:
            lines.append(
                f"kubectl label node {c.node} {nvidia.DEVICE_PLUGIN_CONFIG}={c.plugin_config} --overwrite"
            )
        if c.mig_config:
            lines += [
                f"kubectl label node {c.node} {nvidia.MIG_CONFIG}={c.mig_config} --overwrite",
                f"kubectl wait node/{c.node} --for=jsonpath='{{.metadata.labels.{_jsonpath_key(nvidia.MIG_CONFIG_STATE)}}}'=success --timeout=10m",
            ]
        if c.waits_for:
            lines.append("# done when the node advertises the new instances:")
        for res, n in c.waits_for.items():
            lines.append(
                f"kubectl wait node/{c.node} --for=jsonpath='{{.status.allocatable.{_jsonpath_key(res)}}}'={n} --timeout=5m"
            )
        if evicted:
            lines.append(f"kubectl uncordon {c.node}")
        lines += ["```", ""]
    step += 1
    # only where every pod of a group is placed is it known which pods schedule: for the
    # others the scheduler picks, and a wait on one left Pending would never end
    whole = [(n, p) for n, p in sorted(start.pending.items()) if placed.get(n, 0) >= len(p)]
    partial = [(n, p) for n, p in sorted(start.pending.items()) if 0 < placed.get(n, 0) < len(p)]
    lines += [f"## {step}. The Pending pods schedule", ""]
    lines += [
        f"- {name}: {placed[name]} of its {len(pods)} pods schedule (the scheduler picks "
        "which); the others stay Pending"
        for name, pods in partial
    ]
    lines += ["", "```bash"] if partial else ["```bash"]
    lines += [
        f"kubectl wait pod -n {pod.split('/')[0]} {pod.split('/')[1]} --for=condition=PodScheduled --timeout=5m"
        for _, pods in whole
        for pod in pods
    ]
    lines.append("```")
    if start.not_planned:
        lines += ["", "## Not planned", "", *(f"- {x}" for x in start.not_planned)]
    return "\n".join(lines) + "\n"


def created_mig_configmap(start: Start, change: Change) -> dict[str, Any] | None:
    """The ConfigMap the runbook creates for nodes with generated layouts (None: none)."""
    new = {
        c.mig_config: change.mig_configs[c.mig_config]
        for c in change.nodes
        if c.mig_config and c.mig_configmap == CREATED_MIG_CONFIGMAP
    }
    if not new:
        return None
    config = {"version": "v1", "mig-configs": {**start.generated_layouts, **new}}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CREATED_MIG_CONFIGMAP},
        "data": {"config.yaml": yaml.safe_dump(config, sort_keys=False)},
    }


def files(start: Start, plan: Plan, change: Change) -> dict[str, str]:
    """The runbook and the configs it adds, by relative path."""
    created = created_mig_configmap(start, change)
    extra = {CREATED_MIG_FILE: yaml.safe_dump(created, sort_keys=False)} if created else {}
    return {
        **extra,
        "runbook.md": runbook(start, plan, change),
        "mig-parted-configs-to-add.yaml": yaml.safe_dump(
            {"mig-configs": change.mig_configs}, sort_keys=False
        ),
        "device-plugin-configs-to-add.yaml": yaml.safe_dump(
            {
                name: yaml.safe_dump(data, sort_keys=False)
                for name, data in change.plugin_configs.items()
            },
            sort_keys=False,
        ),
    }
