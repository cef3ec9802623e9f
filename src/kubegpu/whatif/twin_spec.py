"""What the twin of a snapshot is made of, read from the snapshot alone (pure).

The snapshot holds what the API server shows, not the GPUs: each node's model, count and
MIG state are read back from the labels GPU feature discovery and the MIG manager put on
it (`nvidia.com/gpu.product`, `gpu.count`, the driver version, `mig.config`), the way an
administrator reads them with `kubectl get node -o yaml`. What cannot be read back is an
error naming the node and the label, never a guess.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.doctor.facts import (
    LabelError,
    gpu_count,
    model_of_product,
    node_mig_layouts,
    split_product,
)
from kubegpu.doctor.snapshot import ConfigMapInfo, NodeInfo, PodInfo, Snapshot
from kubegpu.mig.config import MigPartedConfig

ROOT_CA = "kube-root-ca.crt"
MANAGED_BY = "app.kubernetes.io/managed-by"
# ConfigMaps the twin's own operator and MIG managers write again: never copied
GENERATED_BY = frozenset({"kubegpu-operator", "kubegpu-mig-manager"})
# labels the simulated kubelet and NFD set themselves on a twin node
OWN_PREFIXES = ("kubernetes.io/", "beta.kubernetes.io/", "feature.node.kubernetes.io/")
# where a running simulated pod needs no process: its containers just run
TWIN_IMAGE = "nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04"
NFD_LABEL = "feature.node.kubernetes.io/pci-10de.present"
DCGM_LISTEN = "DCGM_EXPORTER_LISTEN"


class TwinSpecError(ValueError):
    """The snapshot does not say enough to build its twin; names the object and why."""


@dataclass(frozen=True)
class TwinNode:
    name: str
    gpus: str | None  # a sim node spec (`h100-80gb:2;driver=...;mig=on`); None: no GPU
    labels: dict[str, str]
    nfd: bool


@dataclass(frozen=True)
class TwinPod:
    """A workload pod recreated in the twin, asking for the same NVIDIA resources."""

    namespace: str
    name: str
    node: str  # "" for a pod that was Pending: the twin's scheduler places it, or not
    resources: dict[str, str]
    labels: dict[str, str]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class TwinPolicy:
    kind: str  # ClusterPolicy | GPUCluster
    name: str
    spec: dict[str, Any]


@dataclass(frozen=True)
class TwinSpec:
    nodes: tuple[TwinNode, ...]
    policies: tuple[TwinPolicy, ...]
    config_maps: tuple[ConfigMapInfo, ...]
    pods: tuple[TwinPod, ...]
    skipped: tuple[str, ...] = field(default=())  # what the twin leaves out, and why

    def node(self, name: str) -> TwinNode | None:
        return next((n for n in self.nodes if n.name == name), None)


def twin_spec(snapshot: Snapshot) -> TwinSpec:
    """The twin of `snapshot`: its nodes, kubegpu's custom resources and ConfigMaps, and
    the workload pods that hold or wait for GPUs."""
    if not snapshot.nodes:
        raise TwinSpecError("the snapshot has no nodes")
    skipped: list[str] = []
    nodes = tuple(_node(n, snapshot) for n in snapshot.nodes)
    if not any(n.gpus for n in nodes):
        raise TwinSpecError(no_gpu_node(snapshot))
    policies = tuple(
        TwinPolicy(o.kind, o.name, simulated_spec(o.spec))
        for o in (*snapshot.cluster_policies, *snapshot.gpu_clusters)
    )
    config_maps = tuple(
        c
        for c in snapshot.config_maps
        if c.namespace == snapshot.operator_namespace
        and c.name != ROOT_CA
        and c.labels.get(MANAGED_BY) not in GENERATED_BY
    )
    pods: list[TwinPod] = []
    for p in snapshot.workload_pods:
        if p.claims:
            skipped.append(f"pod {p.key}: holds resource claims (DRA), not recreated")
        elif p.phase not in ("Running", "Pending"):
            continue
        elif p.phase == "Running" and not snapshot.node(p.node):
            skipped.append(f"pod {p.key}: runs on node {p.node!r}, not in the snapshot")
        else:
            pods.append(_pod(p))
    return TwinSpec(nodes, policies, config_maps, tuple(pods), tuple(skipped))


def no_gpu_node(snapshot: Snapshot) -> str:
    """Why a snapshot without a GPU node has no twin worth building: every node would start
    without GPUs, and a report on them ("nothing repartitions, nothing pending") would read
    as a change that goes through when nothing was tried."""
    source = f" (taken from {snapshot.source})" if snapshot.source else ""
    return (
        f"the snapshot{source} has no GPU node: none of its {len(snapshot.nodes)} node(s) has "
        f"the {nvidia.GPU_PRODUCT} label GPU feature discovery sets, so the twin would have no "
        "GPU to try the change on; take the snapshot with the GPU cluster's kubeconfig context, "
        "once GPU feature discovery labels its GPU nodes (`kubegpu doctor` says what it sees)"
    )


def _pod(p: PodInfo) -> TwinPod:
    return TwinPod(
        namespace=p.namespace,
        name=p.name,
        node=p.node if p.phase == "Running" else "",
        resources=dict(p.gpu_resources),
        labels=dict(p.labels),
    )


def copied_labels(labels: dict[str, str]) -> dict[str, str]:
    """The labels a twin node starts with: the user's own and the two config selectors;
    not what the kubelet, NFD, feature discovery or the operator set again themselves."""
    out: dict[str, str] = {}
    for key, value in labels.items():
        if key.startswith(OWN_PREFIXES):
            continue
        if key.startswith(nvidia.PREFIX):
            chosen = key in (nvidia.MIG_CONFIG, nvidia.DEVICE_PLUGIN_CONFIG)
            # an operand a user switched off stays off; paused ones are the MIG manager's
            disabled = key.startswith(nvidia.DEPLOY_PREFIX) and value == "false"
            if not (chosen or disabled):
                continue
        out[key] = value
    return out


def simulated_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A custom resource's spec as the twin runs it: the same, except that every simulated
    exporter shares the host's network, so none may listen on a fixed port."""
    out = copy.deepcopy(spec)
    exporter = out.get("dcgmExporter")
    if isinstance(exporter, dict):
        env = [e for e in exporter.get("env") or [] if e.get("name") != DCGM_LISTEN]
        exporter["env"] = [*env, {"name": DCGM_LISTEN, "value": "127.0.0.1:0"}]
    return out


# -- GPUs from labels ------------------------------------------------------------------------


def _node(node: NodeInfo, snapshot: Snapshot) -> TwinNode:
    return TwinNode(
        name=node.name,
        gpus=node_gpus(node, snapshot),
        labels=copied_labels(node.labels),
        nfd=NFD_LABEL in node.labels,
    )


def node_gpus(node: NodeInfo, snapshot: Snapshot) -> str | None:
    """The node's GPUs as a sim node spec, from its feature-discovery labels."""
    labels = node.labels
    product = labels.get(nvidia.GPU_PRODUCT)
    if product is None:
        if node.gpu_present or any(k.startswith(nvidia.PREFIX) for k in node.capacity):
            raise TwinSpecError(
                f"node {node.name}: has GPUs but no {nvidia.GPU_PRODUCT} label "
                "(is GPU feature discovery running there?)"
            )
        return None
    _, mig_profile = split_product(product)
    model = model_of_product(product)
    if model is None:
        raise TwinSpecError(
            f"node {node.name}: label {nvidia.GPU_PRODUCT}={product!r} names no GPU model "
            "the catalog knows"
        )
    try:
        count = gpu_count(snapshot, node)
    except LabelError as exc:
        raise TwinSpecError(str(exc)) from None
    if not 1 <= count <= 16:
        raise TwinSpecError(
            f"node {node.name}: label {nvidia.GPU_COUNT}={count}: a simulated node has 1..16 GPUs"
        )
    opts = [f"{model.id}:{count}"]
    driver = labels.get(nvidia.CUDA_DRIVER_VERSION)
    if driver:
        opts.append(f"driver={driver}")
    mode = labels.get(nvidia.GPU_MODE)
    switchable = model.mig is not None and model.mig.display_mode_compute_required
    if mode == "graphics" or (mode == "compute" and switchable):
        opts.append(f"display={mode}")  # cards that ship in graphics mode say which they are in
    if model.mig is not None and _mig_in_use(labels, mig_profile):
        opts.append("mig=on")
    return ";".join(opts)


def _mig_in_use(labels: dict[str, str], single_profile: str) -> bool:
    """Feature discovery shows MIG devices: a `-MIG-` product (single strategy) or a
    `nvidia.com/mig-<profile>.count` above 0 (mixed)."""
    if single_profile:
        return True
    for key, value in labels.items():
        counted = key.startswith(nvidia.MIG_RESOURCE_PREFIX) and key.endswith(".count")
        if counted and value.isdigit() and int(value) > 0:
            return True
    return False


def mig_layouts(node: str, snapshot: Snapshot) -> MigPartedConfig | None:
    """The mig-parted configs the node's MIG manager reads (`doctor.facts.node_mig_layouts`);
    None when they are not in the snapshot."""
    try:
        return node_mig_layouts(snapshot, node)
    except LabelError as exc:
        raise TwinSpecError(str(exc)) from None
