"""The names NVIDIA's stack defines and kubegpu speaks: labels, resources, env vars, CDI kinds.

One place for every string a user's manifests, node labels or containers already depend
on (design.md section 1), so two components can never disagree on a spelling. Data only:
constants and two tiny builders; no imports from the rest of kubegpu.
"""

from __future__ import annotations

# --- label and resource domain -------------------------------------------------------------

DOMAIN = "nvidia.com"
PREFIX = f"{DOMAIN}/"  # every GPU label and extended resource starts with this

# --- node labels the operator and the MIG manager read or write (gpu-operator.md) ----------

GPU_PRESENT = "nvidia.com/gpu.present"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."  # + operand, e.g. nvidia.com/gpu.deploy.device-plugin
DEPLOY_OPERANDS = "nvidia.com/gpu.deploy.operands"
WORKLOAD_CONFIG = "nvidia.com/gpu.workload.config"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
VGPU_HOST_DRIVER = "nvidia.com/vgpu.host-driver-version"

# --- GPU feature discovery labels (device-plugin.md section 6) -----------------------------

GFD_TIMESTAMP = "nvidia.com/gfd.timestamp"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_REPLICAS = "nvidia.com/gpu.replicas"
GPU_MEMORY = "nvidia.com/gpu.memory"
GPU_MACHINE = "nvidia.com/gpu.machine"
GPU_MODE = "nvidia.com/gpu.mode"
GPU_FAMILY = "nvidia.com/gpu.family"
GPU_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
MIG_CAPABLE = "nvidia.com/mig.capable"
MIG_STRATEGY = "nvidia.com/mig.strategy"
MPS_CAPABLE = "nvidia.com/mps.capable"
VGPU_PRESENT = "nvidia.com/vgpu.present"
CUDA_DRIVER_VERSION = "nvidia.com/cuda.driver-version.full"  # e.g. 580.95.05

# --- kubegpu's own names beside NVIDIA's (no upstream equivalent; docs/exporter.md) ---------

KUBEGPU_DOMAIN = "kubegpu.io"
ISOLATION_LABEL_PREFIX = f"{KUBEGPU_DOMAIN}/gpu."  # + "<index>.isolation", written by GFD
ISOLATION_ANNOTATION = f"{KUBEGPU_DOMAIN}/isolation"  # on each GPU pod, by the device plugin
# on a workload pod, by its owner: the weakest isolation it accepts (`kubegpu doctor`)
ISOLATION_REQUIRED_LABEL = f"{KUBEGPU_DOMAIN}/isolation-required"

# --- annotations ----------------------------------------------------------------------------

LAST_APPLIED_HASH = "nvidia.com/last-applied-hash"  # the operator's change detector

# --- extended resources (device-plugin.md section 2) ---------------------------------------

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"
GPU_SHARED_RESOURCE = GPU_RESOURCE + SHARED_SUFFIX  # nvidia.com/gpu.shared
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_TAINT_KEY = GPU_RESOURCE  # the taint GPU nodes often carry, tolerated by every operand

# --- container environment ------------------------------------------------------------------

NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NVIDIA_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
NVIDIA_MIG_MONITOR_DEVICES = "NVIDIA_MIG_MONITOR_DEVICES"
NVIDIA_IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
CUDA_MPS_PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
CUDA_MPS_LOG_DIRECTORY = "CUDA_MPS_LOG_DIRECTORY"
# MPS client-side limits (CUDA reads them in the client; kubegpu sets them for MIG instances)
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
VISIBLE_DEVICES_VOID = "void"  # NVIDIA_VISIBLE_DEVICES value that hands out no GPU

# --- CDI kinds ------------------------------------------------------------------------------

CDI_PLUGIN_VENDOR = "k8s.device-plugin.nvidia.com"
CDI_PLUGIN_KIND = f"{CDI_PLUGIN_VENDOR}/gpu"  # devices the device plugin hands out
CDI_MANAGEMENT_KIND = "management.nvidia.com/gpu"  # every GPU, for management containers
CDI_RUNTIME_KIND = "nvidia.com/gpu"  # the container toolkit's own spec
CDI_SPEC_DIR = "/var/run/cdi"  # where specs written at run time go (CDI's dynamic directory)
CDI_STATIC_SPEC_DIR = "/etc/cdi"  # where installed specs go (CDI's static directory)

# --- DRA driver (dcgm-dra.md section 2) -----------------------------------------------------

DRA_DRIVER = "gpu.nvidia.com"  # driver name, attribute domain and DeviceClass of whole GPUs
DRA_MIG_CLASS = "mig.nvidia.com"  # DeviceClass of MIG devices
DRA_CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"  # opaque config: GpuConfig, ...
CDI_CLAIM_VENDOR = "k8s.gpu.nvidia.com"
CDI_CLAIM_CLASS = "claim"
CDI_CLAIM_KIND = f"{CDI_CLAIM_VENDOR}/{CDI_CLAIM_CLASS}"  # one transient spec per claim


def deploy_label(operand: str) -> str:
    """`device-plugin` -> `nvidia.com/gpu.deploy.device-plugin`."""
    return DEPLOY_PREFIX + operand


def isolation_label(index: int) -> str:
    """GPU 0 -> `kubegpu.io/gpu.0.isolation` (exclusive, mig, mps or time-sliced)."""
    return f"{ISOLATION_LABEL_PREFIX}{index}.isolation"


def mig_resource(profile: str) -> str:
    """`1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`: upstream's mixed-strategy name (`+` -> `.`).

    No length or DNS checks here; the device-plugin config validates names it is given.
    """
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


# --- what `kubegpu doctor` reads (gpu-operator.md, device-plugin.md, dcgm-dra.md) -----------

CUDA_DRIVER_VERSION_FULL = "nvidia.com/cuda.driver-version.full"  # GFD: "580.82.07"
MIG_INVALID_SUFFIX = "-MIG-INVALID"  # gpu.product under `single` when the GPUs disagree
MIG_ALL_DISABLED = "all-disabled"  # the mig-parted config that turns MIG off
MIG_STATE_PENDING = "pending"  # nvidia.com/mig.config.state values the MIG manager writes
MIG_STATE_SUCCESS = "success"
MIG_STATE_FAILED = "failed"
MIG_STATE_REBOOTING = "rebooting"
GPU_MODE_GRAPHICS = "graphics"  # nvidia.com/gpu.mode of a GPU in graphics display mode
SHARING_TIME_SLICING = "time-slicing"  # nvidia.com/gpu.sharing-strategy values
SHARING_MPS = "mps"
DEVICE_PLUGIN_DAEMONSET = "nvidia-device-plugin-daemonset"  # also its pods' `app` label
MIG_MANAGER_DAEMONSET = "nvidia-mig-manager"
GFD_DAEMONSET = "gpu-feature-discovery"
DRA_KUBELET_PLUGIN_DAEMONSET = "nvidia-dra-driver-gpu-kubelet-plugin"
DRA_MIN_DRIVER = "565"  # the DRA driver for GPUs needs this driver branch or newer

# Node Feature Discovery's labels the operator reads (gpu-operator.md section 2.2)
NFD_PREFIX = "feature.node.kubernetes.io/"
NFD_PCI_NVIDIA = "feature.node.kubernetes.io/pci-10de.present"
NFD_PCI_NVIDIA_3D = "feature.node.kubernetes.io/pci-0302_10de.present"
NFD_PCI_NVIDIA_VGA = "feature.node.kubernetes.io/pci-0300_10de.present"
NFD_GPU_LABELS = (NFD_PCI_NVIDIA, NFD_PCI_NVIDIA_3D, NFD_PCI_NVIDIA_VGA)
NFD_KERNEL_VERSION = "feature.node.kubernetes.io/kernel-version.full"
NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
NFD_OS_VERSION_ID = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
MIG_PARTED_DEFAULT_CONFIGMAP = "default-mig-parted-config"  # the chart's mig-parted layouts
MIG_GENERATED_CONFIGMAP_SUFFIX = "-mig-config"  # <node>-mig-config: the MIG manager's own
