"""The GPUCluster: kubegpu's DRA stack, and which of a ClusterPolicy or a GPUCluster is in
charge.

A GPUCluster (`nvidia.com/v1alpha1`, a singleton named `gpu-cluster`) renders the DRA
plugin (`kubegpu dra-plugin`) with its RBAC and the DeviceClasses, the exporter with DRA
attribution, and, when asked for, the standalone DCGM host engine. It manages neither the
driver nor the container toolkit (both are the host's, or an NVIDIADriver's), nor the
device plugin: on a GPUCluster's nodes the device plugin's deploy label is removed and the
DRA plugin's is set, so the two never hand out the same GPU.

A cluster is configured by one of the two. `choose` picks the oldest of the ClusterPolicies
and the GPUClusters named `gpu-cluster` (a ClusterPolicy wins a tie, as it did first); the
rest get a status saying which one is active. Pure functions only; the controller does the
I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubegpu.kube.policy import (
    ClusterPolicySpec,
    DevicePluginSpec,
    DriverSpec,
    GPUClusterSpec,
    GPUFeatureDiscoverySpec,
    HostPathsSpec,
    MIGManagerSpec,
    ToolkitSpec,
)
from kubegpu.operator import labels as node_labels
from kubegpu.operator.operands import dra, native, upstream
from kubegpu.operator.operands.context import ClusterFacts, Obj, RenderContext
from kubegpu.operator.quantities import quantity_problems
from kubegpu.operator.render import Rendered, StateObjects, render_states
from kubegpu.operator.reserved import reserved_key_problems
from kubegpu.operator.states import DCGM, DCGM_EXPORTER, PRE_REQUISITES, OperandState
from kubegpu.operator.status import (
    CLUSTER_POLICY_CONFLICT,
    EXCLUSIVE,
    GPU_CLUSTER_CONFLICT,
)
from kubegpu.operator.status import IGNORED_REASON as IGNORED

GPU_CLUSTER_NAME = "gpu-cluster"
DRA_STATE = "state-dra-driver"
DRA_DAEMONSET = "nvidia-dra-driver-gpu-kubelet-plugin"
DRA_DEPLOY_LABEL = "dra-driver"  # nvidia.com/gpu.deploy.dra-driver
DEVICE_PLUGIN_DEPLOY_LABEL = "device-plugin"
# the exporter's switch for DRA attribution (DCGM exporter's --kubernetes-enable-dra)
EXPORTER_DRA_ENV = "KUBERNETES_ENABLE_DRA"
VALIDATIONS_VOLUME = "run-nvidia-validations"


def policy_view(gc: GPUClusterSpec) -> ClusterPolicySpec:
    """The GPUCluster as the ClusterPolicy settings the shared builders read: its exporter,
    DCGM (off unless enabled, as upstream), daemonset and host-path settings; everything
    a GPUCluster does not manage switched off."""
    return ClusterPolicySpec(
        daemonsets=gc.daemonsets,
        driver=DriverSpec(enabled=False),
        toolkit=ToolkitSpec(enabled=False),
        devicePlugin=DevicePluginSpec(enabled=False),
        dcgm=gc.dcgm.model_copy(update={"enabled": gc.dcgm.is_enabled(False)}),
        dcgmExporter=gc.dcgmExporter,
        gfd=GPUFeatureDiscoverySpec(enabled=False),
        migManager=MIGManagerSpec(enabled=False),
        hostPaths=HostPathsSpec(
            rootFS=gc.hostPaths.rootFS,
            driverInstallDir=gc.hostPaths.driverInstallDir,
            kubeletRootDir=gc.hostPaths.kubeletRootDir,
        ),
    )


def _without_validator(objects: list[Obj]) -> list[Obj]:
    """The DRA stack runs no validator: its operands start without waiting for ready files
    (the driver and the toolkit are the host's, there before the node is)."""
    for obj in objects:
        if obj["kind"] != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        pod.pop("initContainers", None)
        pod["volumes"] = [v for v in pod.get("volumes") or [] if v["name"] != VALIDATIONS_VOLUME]
        for c in pod["containers"]:
            c["volumeMounts"] = [
                m for m in c.get("volumeMounts") or [] if m["name"] != VALIDATIONS_VOLUME
            ]
    return objects


def _exporter(ctx: RenderContext) -> list[Obj]:
    objects = _without_validator(native.dcgm_exporter(ctx))
    for obj in objects:
        if obj["kind"] == "DaemonSet":
            main = obj["spec"]["template"]["spec"]["containers"][0]
            names = {e["name"] for e in main["env"]}
            if EXPORTER_DRA_ENV not in names:  # the GPUCluster's own env wins
                main["env"].append({"name": EXPORTER_DRA_ENV, "value": "true"})
    return objects


def _dcgm(ctx: RenderContext) -> list[Obj]:
    return _without_validator(upstream.dcgm(ctx))


def dra_states(gc: GPUClusterSpec | None = None) -> tuple[OperandState, ...]:
    """The GPUCluster's states, in the order they are applied."""
    spec = gc or GPUClusterSpec()
    return (
        PRE_REQUISITES,
        OperandState(
            DRA_STATE,
            DRA_DAEMONSET,
            DRA_DEPLOY_LABEL,
            lambda s: True,
            lambda ctx: dra.dra_plugin(ctx, spec.draDriver),
        ),
        OperandState("state-dcgm", "nvidia-dcgm", DCGM, lambda s: s.dcgm.is_enabled(False), _dcgm),
        OperandState(
            "state-dcgm-exporter",
            "nvidia-dcgm-exporter",
            DCGM_EXPORTER,
            lambda s: s.dcgmExporter.is_enabled(True),
            _exporter,
        ),
    )


def render_gpu_cluster(gc: GPUClusterSpec, facts: ClusterFacts) -> Rendered:
    """Every GPUCluster state's desired objects. `draDriver.computeDomains` is read past:
    ComputeDomains (IMEX) are out of scope (docs/dra.md). A spec that sets a reserved key
    or a resource value that is no quantity renders nothing (`problems`)."""
    problems = [*reserved_key_problems(gc), *quantity_problems(gc)]
    states, view = dra_states(gc), policy_view(gc)
    if problems:
        return Rendered(
            tuple(StateObjects(s.name, s.enabled(view)) for s in states), tuple(problems)
        )
    return render_states(states, view, facts)


def wanted_operands(gc: GPUClusterSpec) -> tuple[str, ...]:
    operands = [DRA_DEPLOY_LABEL]
    if gc.dcgm.is_enabled(False):
        operands.append(DCGM)
    if gc.dcgmExporter.is_enabled(True):
        operands.append(DCGM_EXPORTER)
    return tuple(operands)


def dra_label_changes(labels: Mapping[str, str], gc: GPUClusterSpec) -> node_labels.Patch:
    """The label patch for one node under a GPUCluster: `gpu.present` as always; the DRA
    stack's deploy labels set (a non-empty value, a pause, is kept); every other deploy
    label removed, the device plugin's first of all."""
    prefix = node_labels.DEPLOY_PREFIX
    patch: node_labels.Patch = {}
    deploy = {k for k in labels if k.startswith(prefix) and k != node_labels.DEPLOY_OPERANDS}
    if not node_labels.is_gpu_node(labels):
        if labels.get(node_labels.GPU_PRESENT) == "true":
            patch[node_labels.GPU_PRESENT] = "false"
            patch.update(dict.fromkeys(deploy))
        return patch
    if labels.get(node_labels.GPU_PRESENT) != "true":
        patch[node_labels.GPU_PRESENT] = "true"
    if labels.get(node_labels.DEPLOY_OPERANDS) == "false":
        patch.update(dict.fromkeys(deploy))
        return patch
    wanted = {prefix + o for o in wanted_operands(gc)}
    for key in sorted(wanted):
        if not labels.get(key):
            patch[key] = "true"
    for key in deploy - wanted:
        patch[key] = None
    return patch


def policy_label_changes(labels: Mapping[str, str], spec: ClusterPolicySpec) -> node_labels.Patch:
    """The ClusterPolicy's label patch, which also takes the DRA plugin's deploy label off a
    node a GPUCluster had."""
    patch = node_labels.label_changes(labels, spec)
    key = node_labels.DEPLOY_PREFIX + DRA_DEPLOY_LABEL
    if key in labels:
        patch[key] = None
    return patch


# -- which custom resource is in charge ------------------------------------------------------------
@dataclass(frozen=True)
class Ignored:
    """A resource that is not the active one: the condition reason and message it gets."""

    obj: Obj
    reason: str
    message: str


@dataclass(frozen=True)
class Choice:
    """The active resource (None: neither exists) and why each other one is not."""

    kind: str | None  # "ClusterPolicy" or "GPUCluster"
    active: Obj | None
    ignored_policies: tuple[Ignored, ...] = ()
    ignored_clusters: tuple[Ignored, ...] = ()
    conflicting: tuple[str, ...] = ()  # "GPUCluster x" / "ClusterPolicy y" beside the active


def _age(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("creationTimestamp") or "", meta["name"])


def _live(objs: Sequence[Obj]) -> list[Obj]:
    return sorted((o for o in objs if not o["metadata"].get("deletionTimestamp")), key=_age)


def choose(policies: Sequence[Obj], clusters: Sequence[Obj]) -> Choice:
    """Oldest wins: of the ClusterPolicies and the GPUClusters named `gpu-cluster`, the
    one created first is active (a ClusterPolicy on a tie). Other ClusterPolicies are
    ignored; a GPUCluster with another name is ignored whatever its age."""
    live_policies = _live(policies)
    live_clusters = _live(clusters)
    named = [c for c in live_clusters if c["metadata"]["name"] == GPU_CLUSTER_NAME]
    badly_named = [
        Ignored(c, IGNORED, f"a GPUCluster must be named {GPU_CLUSTER_NAME!r}; this one is ignored")
        for c in live_clusters
        if c["metadata"]["name"] != GPU_CLUSTER_NAME
    ]
    policy = live_policies[0] if live_policies else None
    cluster = named[0] if named else None
    gpu_cluster_wins = cluster is not None and (
        policy is None or _age(cluster)[0] < _age(policy)[0]
    )
    if gpu_cluster_wins:
        assert cluster is not None
        why = f"GPUCluster {GPU_CLUSTER_NAME} is older and active: {EXCLUSIVE}; delete one of them"
        return Choice(
            "GPUCluster",
            cluster,
            ignored_policies=tuple(Ignored(p, GPU_CLUSTER_CONFLICT, why) for p in live_policies),
            ignored_clusters=tuple(badly_named),
            conflicting=tuple(f"ClusterPolicy {p['metadata']['name']}" for p in live_policies),
        )
    if policy is None:
        return Choice(None, None, ignored_clusters=tuple(badly_named))
    name = policy["metadata"]["name"]
    others = tuple(
        Ignored(p, IGNORED, f"only the oldest ClusterPolicy is used; {name!r} is active")
        for p in live_policies[1:]
    )
    why = f"ClusterPolicy {name} is older and active: {EXCLUSIVE}; delete one of them"
    clusters_out = [Ignored(c, CLUSTER_POLICY_CONFLICT, why) for c in named] + badly_named
    return Choice(
        "ClusterPolicy",
        policy,
        ignored_policies=others,
        ignored_clusters=tuple(clusters_out),
        conflicting=tuple(f"GPUCluster {c['metadata']['name']}" for c in live_clusters),
    )
