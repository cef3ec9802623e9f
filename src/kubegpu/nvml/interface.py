"""The hardware seam: everything kubegpu asks of a GPU, in one small typed interface.

Two backends implement it: `real` over nvidia-ml-py and `sim` over a state file. Callers
get one from `kubegpu.nvml.open_nvml` and never know which.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType

from kubegpu.nvml.types import (
    Activation,
    ComputeInstanceInfo,
    ComputeInstanceProfileInfo,
    DeviceInfo,
    GpuEvent,
    GpuInstanceInfo,
    GpuInstanceProfileInfo,
    MemoryInfo,
    MigDeviceInfo,
    MigMode,
    Placement,
    ProcessInfo,
    SystemInfo,
    Utilization,
)


class Nvml(ABC):
    """One node's GPUs. Methods raise kubegpu.nvml.errors.NvmlError subclasses."""

    # -- system and devices ---------------------------------------------------------
    @abstractmethod
    def system(self) -> SystemInfo: ...

    @abstractmethod
    def device_count(self) -> int: ...

    @abstractmethod
    def device(self, index: int) -> DeviceInfo: ...

    def devices(self) -> list[DeviceInfo]:
        return [self.device(i) for i in range(self.device_count())]

    @abstractmethod
    def memory(self, index: int) -> MemoryInfo: ...

    @abstractmethod
    def utilization(self, index: int) -> Utilization: ...

    @abstractmethod
    def processes(self, index: int) -> list[ProcessInfo]: ...

    # -- MIG mode -------------------------------------------------------------------
    @abstractmethod
    def mig_mode(self, index: int) -> MigMode:
        """Current and pending MIG mode; NotSupported on GPUs without MIG."""

    @abstractmethod
    def set_mig_mode(self, index: int, enabled: bool) -> Activation: ...

    @abstractmethod
    def reset(self, index: int) -> None:
        """GPU reset: applies a pending MIG mode, drops GPU and compute instances."""

    # -- GPU instances --------------------------------------------------------------
    @abstractmethod
    def gpu_instance_profiles(self, index: int) -> list[GpuInstanceProfileInfo]: ...

    @abstractmethod
    def gpu_instance_possible_placements(self, index: int, profile_id: int) -> list[Placement]: ...

    @abstractmethod
    def gpu_instance_remaining_capacity(self, index: int, profile_id: int) -> int: ...

    @abstractmethod
    def create_gpu_instance(
        self, index: int, profile_id: int, start: int | None = None
    ) -> GpuInstanceInfo:
        """Create a GPU instance at `start`, or wherever the driver chooses when None."""

    @abstractmethod
    def gpu_instances(self, index: int) -> list[GpuInstanceInfo]: ...

    @abstractmethod
    def destroy_gpu_instance(self, index: int, gi_id: int) -> None: ...

    # -- compute instances ----------------------------------------------------------
    @abstractmethod
    def compute_instance_profiles(
        self, index: int, gi_id: int
    ) -> list[ComputeInstanceProfileInfo]: ...

    @abstractmethod
    def create_compute_instance(
        self, index: int, gi_id: int, profile_id: int
    ) -> ComputeInstanceInfo: ...

    @abstractmethod
    def compute_instances(self, index: int, gi_id: int) -> list[ComputeInstanceInfo]: ...

    @abstractmethod
    def destroy_compute_instance(self, index: int, gi_id: int, ci_id: int) -> None: ...

    @abstractmethod
    def mig_devices(self, index: int) -> list[MigDeviceInfo]: ...

    # -- events ---------------------------------------------------------------------
    @abstractmethod
    def wait_for_event(self, timeout_s: float) -> GpuEvent | None:
        """The next XID / GPU-lost event since this handle was opened, or None on timeout."""

    # -- lifecycle ------------------------------------------------------------------
    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the backend (nvmlShutdown on real hardware)."""

    def __enter__(self) -> Nvml:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
