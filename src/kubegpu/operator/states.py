"""The operator's states, in the order upstream walks them, and when each one is enabled.

Each state owns a set of objects (usually one DaemonSet with its ServiceAccount and RBAC),
built by the builder registered on it here (kubegpu.operator.operands).
Ordering between states is not enforced by the controller: every pass applies all states
and only aggregates readiness; on the nodes, init containers waiting for the validator's
ready files enforce driver -> toolkit -> everything else (gpu-operator.md §7).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kubegpu.kube.policy import ClusterPolicySpec
from kubegpu.operator.operands import native, upstream
from kubegpu.operator.operands.context import Builder

# deploy-label suffixes (nvidia.com/gpu.deploy.<operand>)
DRIVER = "driver"
TOOLKIT = "container-toolkit"
VALIDATOR = "operator-validator"
DEVICE_PLUGIN = "device-plugin"
DCGM = "dcgm"
DCGM_EXPORTER = "dcgm-exporter"
GFD = "gpu-feature-discovery"
MIG_MANAGER = "mig-manager"
NODE_STATUS_EXPORTER = "node-status-exporter"
VGPU_MANAGER = "vgpu-manager"
VGPU_DEVICE_MANAGER = "vgpu-device-manager"
SANDBOX_VALIDATOR = "sandbox-validator"
VFIO_MANAGER = "vfio-manager"
SANDBOX_DEVICE_PLUGIN = "sandbox-device-plugin"
KATA_SANDBOX_DEVICE_PLUGIN = "kata-sandbox-device-plugin"
KATA_MANAGER = "kata-manager"
CC_MANAGER = "cc-manager"
CLIENT = "client"


@dataclass(frozen=True)
class OperandState:
    name: str
    daemonset: str | None  # the DaemonSet's name and its pods' `app` label
    deploy_label: str | None  # nvidia.com/gpu.deploy.<deploy_label>=true selects nodes
    enabled: Callable[[ClusterPolicySpec], bool]
    build: Builder  # the state's desired objects (called only when enabled)


def _sandbox(spec: ClusterPolicySpec) -> bool:
    return spec.sandbox_enabled


# the first state of both the ClusterPolicy and the GPUCluster
PRE_REQUISITES = OperandState(
    "pre-requisites",
    None,
    None,
    lambda s: not s.cdi.nriPluginEnabled,
    upstream.pre_requisites,
)

STATES: tuple[OperandState, ...] = (
    PRE_REQUISITES,
    OperandState("state-operator-metrics", None, None, lambda s: True, upstream.operator_metrics),
    OperandState(
        "state-driver",
        "nvidia-driver-daemonset",
        DRIVER,
        lambda s: s.driver_managed,
        upstream.driver,
    ),
    OperandState(
        "state-container-toolkit",
        "nvidia-container-toolkit-daemonset",
        TOOLKIT,
        lambda s: s.toolkit.is_enabled(True),
        upstream.toolkit,
    ),
    OperandState(
        "state-operator-validation",
        "nvidia-operator-validator",
        VALIDATOR,
        lambda s: True,
        native.validator,
    ),
    OperandState(
        "state-device-plugin",
        "nvidia-device-plugin-daemonset",
        DEVICE_PLUGIN,
        lambda s: s.devicePlugin.is_enabled(True),
        native.device_plugin,
    ),
    OperandState(
        "state-mps-control-daemon",
        "nvidia-device-plugin-mps-control-daemon",
        DEVICE_PLUGIN,
        lambda s: s.devicePlugin.is_enabled(True),
        native.mps_control_daemon,
    ),
    OperandState(
        "state-dcgm", "nvidia-dcgm", DCGM, lambda s: s.dcgm.is_enabled(True), upstream.dcgm
    ),
    OperandState(
        "state-dcgm-exporter",
        "nvidia-dcgm-exporter",
        DCGM_EXPORTER,
        lambda s: s.dcgmExporter.is_enabled(True),
        native.dcgm_exporter,
    ),
    OperandState(
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        GFD,
        lambda s: s.gfd.is_enabled(True),
        native.gfd,
    ),
    OperandState(
        "state-mig-manager",
        "nvidia-mig-manager",
        MIG_MANAGER,
        lambda s: s.migManager.is_enabled(True),
        native.mig_manager,
    ),
    OperandState(
        "state-node-status-exporter",
        "nvidia-node-status-exporter",
        NODE_STATUS_EXPORTER,
        lambda s: s.nodeStatusExporter.is_enabled(False),
        native.node_status_exporter,
    ),
    OperandState(
        "state-vgpu-manager",
        "nvidia-vgpu-manager-daemonset",
        VGPU_MANAGER,
        lambda s: (
            _sandbox(s) and s.vgpuManager.is_enabled(False) and not s.driver.useNvidiaDriverCRD
        ),
        upstream.sandbox_operand("vgpuManager", "nvidia-vgpu-manager-ctr"),
    ),
    OperandState(
        "state-vgpu-device-manager",
        "nvidia-vgpu-device-manager",
        VGPU_DEVICE_MANAGER,
        lambda s: _sandbox(s) and s.vgpuDeviceManager.is_enabled(False),
        upstream.vgpu_device_manager,
    ),
    OperandState(
        "state-sandbox-validation",
        "nvidia-sandbox-validator",
        SANDBOX_VALIDATOR,
        _sandbox,
        native.sandbox_validator,
    ),
    OperandState(
        "state-vfio-manager",
        "nvidia-vfio-manager",
        VFIO_MANAGER,
        lambda s: _sandbox(s) and s.vfioManager.is_enabled(False),
        upstream.sandbox_operand("vfioManager", "nvidia-vfio-manager"),
    ),
    OperandState(
        "state-sandbox-device-plugin",
        "nvidia-sandbox-device-plugin-daemonset",
        SANDBOX_DEVICE_PLUGIN,
        lambda s: (
            _sandbox(s) and s.sandboxDevicePlugin.is_enabled(False) and s.sandbox_mode == "kubevirt"
        ),
        upstream.sandbox_operand(
            "sandboxDevicePlugin", "nvidia-sandbox-device-plugin-ctr", "vfio-pci-ready"
        ),
    ),
    OperandState(
        "state-kata-device-plugin",
        "nvidia-kata-sandbox-device-plugin-daemonset",
        KATA_SANDBOX_DEVICE_PLUGIN,
        lambda s: (
            _sandbox(s) and s.kataSandboxDevicePlugin.is_enabled(False) and s.sandbox_mode == "kata"
        ),
        upstream.sandbox_operand(
            "kataSandboxDevicePlugin", "nvidia-kata-sandbox-device-plugin-ctr", "vfio-pci-ready"
        ),
    ),
    # deprecated upstream: never enabled
    OperandState(
        "state-kata-manager",
        "nvidia-kata-manager",
        KATA_MANAGER,
        lambda s: False,
        upstream.sandbox_operand("kataManager", "nvidia-kata-manager"),
    ),
    OperandState(
        "state-cc-manager",
        "nvidia-cc-manager",
        CC_MANAGER,
        lambda s: _sandbox(s) and s.ccManager.is_enabled(False) and s.sandbox_mode == "kata",
        upstream.cc_manager,
    ),
)

STATE_NAMES = tuple(s.name for s in STATES)


def state(name: str) -> OperandState:
    for s in STATES:
        if s.name == name:
            return s
    raise KeyError(name)


# Which deploy labels each workload config turns on (gpu-operator.md §3.3); mig-manager is
# added for MIG-capable nodes with the container config.
CONTAINER_OPERANDS = (
    DRIVER,
    GFD,
    TOOLKIT,
    DEVICE_PLUGIN,
    DCGM,
    DCGM_EXPORTER,
    NODE_STATUS_EXPORTER,
    VALIDATOR,
    CLIENT,
)


def workload_operands(workload: str, sandbox_mode: str) -> tuple[str, ...]:
    if workload == "vm-passthrough":
        plugin = KATA_SANDBOX_DEVICE_PLUGIN if sandbox_mode == "kata" else SANDBOX_DEVICE_PLUGIN
        return (plugin, SANDBOX_VALIDATOR, VFIO_MANAGER, KATA_MANAGER, CC_MANAGER, CLIENT)
    if workload == "vm-vgpu":
        return (
            SANDBOX_DEVICE_PLUGIN,
            VGPU_MANAGER,
            VGPU_DEVICE_MANAGER,
            SANDBOX_VALIDATOR,
            CC_MANAGER,
            CLIENT,
        )
    return CONTAINER_OPERANDS


ALL_OPERANDS = (
    *CONTAINER_OPERANDS,
    MIG_MANAGER,
    VGPU_MANAGER,
    VGPU_DEVICE_MANAGER,
    SANDBOX_VALIDATOR,
    VFIO_MANAGER,
    SANDBOX_DEVICE_PLUGIN,
    KATA_SANDBOX_DEVICE_PLUGIN,
    KATA_MANAGER,
    CC_MANAGER,
)
