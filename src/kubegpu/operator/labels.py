"""Node labels the operator owns: GPU detection and the `nvidia.com/gpu.deploy.*` labels.

`label_changes(labels, policy)` is pure: from a node's current labels it returns the merge
patch (value, or None to remove) that brings them to what the policy wants, or {} when the
node is already right. Rules (gpu-operator.md §3):

- a node is a GPU node when Node Feature Discovery found an NVIDIA PCI device;
- `nvidia.com/gpu.present` follows that (`true`, or `false` once the device is gone);
- missing or empty deploy labels for the node's workload config are set to `true`; a
  non-empty value (`false`, `paused-for-mig-change`, a driver-manager pause) is never
  overwritten, which is the contract that lets users and the MIG manager pause operands;
- deploy labels outside the node's workload config are removed;
- `nvidia.com/gpu.deploy.operands=false` removes every deploy label (all operands off);
- `nvidia.com/gpu.workload.config` picks container / vm-passthrough / vm-vgpu, honoured
  only when sandbox workloads are enabled;
- MIG-capable nodes get `nvidia.com/mig.config=all-disabled` when they have none and the
  policy's migManager.config.default asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kubegpu.catalog import nvidia
from kubegpu.kube.policy import ClusterPolicySpec
from kubegpu.operator.states import ALL_OPERANDS, MIG_MANAGER, workload_operands

NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
NFD_PREFIX = "feature.node.kubernetes.io/"
GPU_PRESENT = nvidia.GPU_PRESENT
DEPLOY_PREFIX = nvidia.DEPLOY_PREFIX
DEPLOY_OPERANDS = nvidia.DEPLOY_OPERANDS
WORKLOAD_CONFIG = nvidia.WORKLOAD_CONFIG
MIG_CAPABLE = nvidia.MIG_CAPABLE
MIG_CONFIG = nvidia.MIG_CONFIG
GPU_PRODUCT = nvidia.GPU_PRODUCT
VGPU_HOST_DRIVER = nvidia.VGPU_HOST_DRIVER
WORKLOADS = ("container", "vm-passthrough", "vm-vgpu")

# labels whose changes matter to the operator (a node event touching none is ignored)
WATCHED_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/mig.", "nvidia.com/vgpu.", NFD_PREFIX)

Patch = dict[str, str | None]


def is_gpu_node(labels: Mapping[str, str]) -> bool:
    return any(labels.get(k) == "true" for k in NFD_GPU_LABELS)


def has_nfd_labels(labels: Mapping[str, str]) -> bool:
    return any(k.startswith(NFD_PREFIX) for k in labels)


def mig_capable(labels: Mapping[str, str]) -> bool:
    """GFD's `nvidia.com/mig.capable`, else a product name upstream knows has MIG; never a
    vGPU host."""
    if VGPU_HOST_DRIVER in labels:
        return False
    if MIG_CAPABLE in labels:
        return labels[MIG_CAPABLE] == "true"
    product = labels.get(GPU_PRODUCT, "").lower()
    return any(model in product for model in ("h100", "a100", "a30"))


def workload_config(labels: Mapping[str, str], spec: ClusterPolicySpec) -> str:
    if not spec.sandbox_enabled:
        return "container"
    value = labels.get(WORKLOAD_CONFIG, "")
    return value if value in WORKLOADS else spec.default_workload


def desired_operands(labels: Mapping[str, str], spec: ClusterPolicySpec) -> tuple[str, ...]:
    """The operands whose deploy label should be `true` on this GPU node."""
    workload = workload_config(labels, spec)
    operands = workload_operands(workload, spec.sandbox_mode)
    if workload == "container" and mig_capable(labels):
        operands = (*operands, MIG_MANAGER)
    return operands


def label_changes(labels: Mapping[str, str], spec: ClusterPolicySpec) -> Patch:
    """The label patch for one node ({} when nothing changes)."""
    patch: Patch = {}
    deploy = {k for k in labels if k.startswith(DEPLOY_PREFIX) and k != DEPLOY_OPERANDS}
    if not is_gpu_node(labels):
        if labels.get(GPU_PRESENT) == "true":
            patch[GPU_PRESENT] = "false"
            patch.update(dict.fromkeys(deploy))
        return patch
    if labels.get(GPU_PRESENT) != "true":
        patch[GPU_PRESENT] = "true"
    if labels.get(DEPLOY_OPERANDS) == "false":
        patch.update(dict.fromkeys(deploy))
        return patch
    wanted = desired_operands(labels, spec)
    for operand in wanted:
        key = DEPLOY_PREFIX + operand
        if not labels.get(key):
            patch[key] = "true"
    workload = workload_config(labels, spec)
    for operand in ALL_OPERANDS:
        key = DEPLOY_PREFIX + operand
        keep = operand in wanted or (operand == MIG_MANAGER and workload == "container")
        if key in labels and not keep:
            patch[key] = None
    mig_default = spec.migManager.config.default if spec.migManager.config else "all-disabled"
    if (
        workload == "container"
        and mig_capable(labels)
        and spec.migManager.is_enabled(True)
        and (mig_default is None or mig_default == "all-disabled")
        and MIG_CONFIG not in labels
    ):
        patch[MIG_CONFIG] = "all-disabled"
    return patch


def node_patches(
    nodes: Mapping[str, Mapping[str, str]],
    changes: Callable[[dict[str, str]], Mapping[str, str | None]],
) -> dict[str, Mapping[str, str | None]]:
    """Node name -> label patch, for the nodes whose labels `changes` would change; the
    operator sends them together (never one round trip after the other)."""
    out: dict[str, Mapping[str, str | None]] = {}
    for name, labels in nodes.items():
        patch = changes(dict(labels))
        if patch:
            out[name] = patch
    return out


def relevant_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The part of a node's labels the operator reacts to."""
    return {k: v for k, v in labels.items() if k.startswith(WATCHED_PREFIXES)}


def os_tag(labels: Mapping[str, str]) -> str | None:
    """The driver image's OS suffix from NFD (`ubuntu24.04`; major version only for
    ol/rocky/rhel); `node_facts.os_tag` also falls back to the node's osImage."""
    from kubegpu.operator.node_facts import os_tag_from_labels

    return os_tag_from_labels(labels)
