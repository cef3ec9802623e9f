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

    @property
    def free_mib(self) -> int:
        return self.total_mib - self.used_mib


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
