"""Typed records returned by the hardware seam (both backends)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class SystemInfo:
    driver_version: str  # "580.82.07"
    cuda_driver_version: int  # NVML's encoding: 13000 for CUDA 13.0
    nvml_version: str

    @property
    def cuda_version(self) -> tuple[int, int]:
        return self.cuda_driver_version // 1000, (self.cuda_driver_version % 1000) // 10


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    uuid: str
    name: str  # product name, e.g. "NVIDIA H200 NVL"
    pci_bus_id: str  # "00000000:18:00.0"
    pci_device_id: int  # 0xDDDD10DE
    memory_total_mib: int
    compute_capability: tuple[int, int]
    model_id: str | None  # catalog id when the model is known


@dataclass(frozen=True)
class MigMode:
    current: bool
    pending: bool

    @property
    def change_pending(self) -> bool:
        return self.current != self.pending


class Activation(Enum):
    """What setting MIG mode did: applied now, or waiting for a GPU reset / reboot."""

    APPLIED = "applied"
    RESET_REQUIRED = "reset-required"


@dataclass(frozen=True)
class Placement:
    start: int
    size: int


@dataclass(frozen=True)
class GpuInstanceProfileInfo:
    """nvmlGpuInstanceProfileInfo_v2_t, plus the enum it was queried with."""

    nvml_enum: int
    id: int
    name: str
    slice_count: int
    instance_count: int
    multiprocessor_count: int
    copy_engine_count: int
    decoder_count: int
    encoder_count: int
    jpeg_count: int
    ofa_count: int
    memory_size_mib: int


@dataclass(frozen=True)
class ComputeInstanceProfileInfo:
    id: int
    name: str
    slice_count: int
    instance_count: int
    multiprocessor_count: int


@dataclass(frozen=True)
class GpuInstanceInfo:
    device_index: int
    id: int
    profile_id: int
    placement: Placement


@dataclass(frozen=True)
class ComputeInstanceInfo:
    device_index: int
    gpu_instance_id: int
    id: int
    profile_id: int
    placement: Placement


@dataclass(frozen=True)
class MigDeviceInfo:
    """A MIG device: one compute instance inside one GPU instance, as CUDA sees it."""

    parent_index: int
    index: int  # MIG device index on its parent (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str  # "MIG-..."
    gpu_instance_id: int
    compute_instance_id: int
    gi_profile_id: int
    profile: str  # "1g.18gb" or "1c.2g.20gb"
    memory_mib: int
    multiprocessor_count: int
    placement: Placement


@dataclass(frozen=True)
class MemoryInfo:
    total_mib: int
    used_mib: int
    reserved_mib: int = 0  # held by the driver and firmware (nvmlMemory_v2_t.reserved)

    @property
    def free_mib(self) -> int:
        return self.total_mib - self.used_mib - self.reserved_mib


@dataclass(frozen=True)
class Utilization:
    gpu_percent: int
    memory_percent: int


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    used_memory_mib: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class ProcessUtilization:
    """One process's share of a GPU over the last sample period
    (nvmlDeviceGetProcessUtilization: percent of the GPU's SMs, memory bandwidth, engines)."""

    pid: int
    sm_percent: int
    memory_percent: int
    encoder_percent: int = 0
    decoder_percent: int = 0


class EventType(Enum):
    XID = "xid"  # nvmlEventTypeXidCriticalError
    GPU_LOST = "gpu-lost"  # the GPU fell off the bus (reported with Xid 79)


@dataclass(frozen=True)
class GpuEvent:
    device_index: int
    uuid: str
    type: EventType
    xid: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


# -- telemetry (what a metrics exporter reads) ------------------------------------------


@dataclass(frozen=True)
class Clocks:
    sm_mhz: int
    memory_mhz: int


@dataclass(frozen=True)
class RemappedRows:
    """nvmlDeviceGetRemappedRows: rows remapped after memory errors."""

    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


@dataclass(frozen=True)
class NvLinkThroughput:
    """Data a GPU moved over its NVLinks since the driver loaded, its active links together
    (NVML's NVLINK_THROUGHPUT_DATA_TX/RX fields, KiB of payload). A GPU without NVLink, or
    whose links are all down, has no active link and moves nothing."""

    active_links: int
    tx_kib: int
    rx_kib: int

    @property
    def total_kib(self) -> int:
        return self.tx_kib + self.rx_kib


@dataclass(frozen=True)
class Activity:
    """Profiling ratios (0.0-1.0) and PCIe rates of a GPU or one GPU instance.

    On hardware these come from GPU Performance Monitoring (GPM, Hopper and newer); None
    marks a figure the GPU cannot measure.
    """

    graphics_active: float | None = None  # any graphics/compute context busy
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    fp64_active: float | None = None
    fp32_active: float | None = None
    fp16_active: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None


@dataclass(frozen=True)
class GpuInstanceSample:
    """One MIG GPU instance's share of a device sample."""

    gpu_instance_id: int
    profile_id: int
    profile: str  # GPU-instance profile name, e.g. "1g.18gb"
    memory: MemoryInfo | None
    activity: Activity
    mig_device_uuids: tuple[str, ...]  # the MIG devices (compute instances) inside it


@dataclass(frozen=True)
class DeviceSample:
    """One reading of a GPU's telemetry. None marks a value this GPU cannot report."""

    index: int
    clocks: Clocks | None = None
    gpu_temp_c: int | None = None
    memory_temp_c: int | None = None
    power_w: float | None = None
    energy_mj: int | None = None  # since the driver was loaded
    pcie_replays: int | None = None
    utilization: Utilization | None = None
    encoder_percent: int | None = None
    decoder_percent: int | None = None
    memory: MemoryInfo | None = None
    remapped_rows: RemappedRows | None = None
    nvlink: NvLinkThroughput | None = None
    activity: Activity = Activity()
    mig_enabled: bool = False
    gpu_instances: tuple[GpuInstanceSample, ...] = ()


# -- topology (what the device plugin's preferred allocation reads) ----------------------


class TopologyLevel(Enum):
    """nvmlGpuTopologyLevel_t: the closest PCIe ancestor two GPUs share (lower is closer)."""

    INTERNAL = 0  # the same board (a multi-GPU card)
    SINGLE = 10  # one PCIe switch
    MULTIPLE = 20  # several PCIe switches, no host bridge in between
    HOSTBRIDGE = 30  # the same host bridge
    NODE = 40  # the same NUMA node / CPU, across host bridges
    SYSTEM = 50  # across CPUs (the SMP interconnect)


@dataclass(frozen=True)
class GpuLink:
    """How one GPU reaches a peer: the PCIe path and the active NVLinks between them."""

    peer: int  # index of the other GPU
    level: TopologyLevel
    nvlinks: int = 0


@dataclass(frozen=True)
class GpuTopology:
    """Where a GPU sits: its device node, NUMA node and links to every other GPU."""

    index: int
    minor_number: int  # N of /dev/nvidiaN
    numa_node: int | None  # None when the platform does not say
    links: tuple[GpuLink, ...] = ()
