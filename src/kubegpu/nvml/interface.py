"""The hardware seam: everything kubegpu asks of a GPU, in one small typed interface.

Two backends implement it: `real` over nvidia-ml-py and `sim` over a state file. Callers
get one from `kubegpu.nvml.open_nvml` and never know which.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from kubegpu.nvml.errors import GpuIsLost, NotSupported, NvmlError
from kubegpu.nvml.types import (
    Activation,
    Activity,
    Clocks,
    ComputeInstanceInfo,
    ComputeInstanceProfileInfo,
    DeviceInfo,
    DeviceSample,
    GpuEvent,
    GpuInstanceInfo,
    GpuInstanceProfileInfo,
    GpuInstanceSample,
    GpuTopology,
    MemoryInfo,
    MigDeviceInfo,
    MigMode,
    NvLinkThroughput,
    Placement,
    ProcessInfo,
    ProcessUtilization,
    RemappedRows,
    SystemInfo,
    Utilization,
)

T = TypeVar("T")


def _optional(read: Callable[..., T], *args: int | None) -> T | None:
    """A telemetry value, or None when the GPU cannot report it; a lost GPU still raises."""
    try:
        return read(*args)
    except GpuIsLost:
        raise
    except NvmlError:
        return None


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
    def processes(self, index: int) -> list[ProcessInfo]:
        """The GPU's running compute processes and the framebuffer each holds
        (nvmlDeviceGetComputeRunningProcesses); on MIG, each names its instances."""

    def process_utilization(self, index: int) -> list[ProcessUtilization]:
        """Per-process utilisation samples (nvmlDeviceGetProcessUtilization); empty when no
        process ran lately. NotSupported where the GPU gives none (MIG mode, older GPUs)."""
        raise NotSupported("per-process utilization")

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

    # -- telemetry --------------------------------------------------------------------
    # Optional reads for monitoring. A backend (or a GPU) that cannot report a value
    # raises NotSupported; `sample` turns that into None.
    def clocks(self, index: int) -> Clocks:
        raise NotSupported("current clocks")

    def temperature(self, index: int) -> int:
        """GPU core temperature in degrees C."""
        raise NotSupported("GPU temperature")

    def memory_temperature(self, index: int) -> int:
        """Memory (HBM) temperature in degrees C."""
        raise NotSupported("memory temperature")

    def power_usage(self, index: int) -> float:
        """Power draw in W."""
        raise NotSupported("power usage")

    def total_energy(self, index: int) -> int:
        """Energy used since the driver was loaded, in mJ."""
        raise NotSupported("total energy consumption")

    def pcie_replay_count(self, index: int) -> int:
        raise NotSupported("PCIe replay counter")

    def encoder_utilization(self, index: int) -> int:
        raise NotSupported("encoder utilization")

    def decoder_utilization(self, index: int) -> int:
        raise NotSupported("decoder utilization")

    def remapped_rows(self, index: int) -> RemappedRows:
        raise NotSupported("remapped rows")

    def nvlink_throughput(self, index: int) -> NvLinkThroughput:
        """Data moved over the GPU's active NVLinks since the driver loaded (none: 0 links)."""
        raise NotSupported("NVLink throughput")

    def activity(self, index: int, gpu_instance_id: int | None = None) -> Activity:
        """Profiling ratios of the GPU, or of one of its GPU instances."""
        raise NotSupported("GPU performance monitoring")

    def gpu_instance_memory(self, index: int, gpu_instance_id: int) -> MemoryInfo:
        """Framebuffer of one GPU instance (total is the instance's memory)."""
        raise NotSupported("GPU-instance memory")

    def sample(self, index: int) -> DeviceSample:
        """Every telemetry value of one GPU and its GPU instances, read together.

        Values the GPU cannot report are None. Raises when the GPU itself cannot be read
        (lost, or memory information unavailable), so a caller can mark the whole GPU.
        """
        memory = self.memory(index)
        mig = bool(_optional(lambda: self.mig_mode(index).current))
        instances: list[GpuInstanceSample] = []
        if mig:
            names = {p.id: p.name for p in self.gpu_instance_profiles(index)}
            devices = self.mig_devices(index)
            for gi in self.gpu_instances(index):
                instances.append(
                    GpuInstanceSample(
                        gpu_instance_id=gi.id,
                        profile_id=gi.profile_id,
                        profile=names.get(gi.profile_id, str(gi.profile_id)),
                        memory=_optional(self.gpu_instance_memory, index, gi.id),
                        activity=_optional(self.activity, index, gi.id) or Activity(),
                        mig_device_uuids=tuple(
                            d.uuid for d in devices if d.gpu_instance_id == gi.id
                        ),
                    )
                )
        return DeviceSample(
            index=index,
            clocks=_optional(self.clocks, index),
            gpu_temp_c=_optional(self.temperature, index),
            memory_temp_c=_optional(self.memory_temperature, index),
            power_w=_optional(self.power_usage, index),
            energy_mj=_optional(self.total_energy, index),
            pcie_replays=_optional(self.pcie_replay_count, index),
            utilization=_optional(self.utilization, index),
            encoder_percent=_optional(self.encoder_utilization, index),
            decoder_percent=_optional(self.decoder_utilization, index),
            memory=memory,
            remapped_rows=_optional(self.remapped_rows, index),
            nvlink=_optional(self.nvlink_throughput, index),
            activity=_optional(self.activity, index) or Activity(),
            mig_enabled=mig,
            gpu_instances=tuple(instances),
        )

    # -- topology -------------------------------------------------------------------
    def topology(self, index: int) -> GpuTopology:
        """Device node, NUMA node, and PCIe level plus NVLink count to every other GPU."""
        from kubegpu.nvml.errors import NotSupported

        raise NotSupported(f"GPU {index}: this backend reports no topology")

    # -- lifecycle ------------------------------------------------------------------
    def state_file(self) -> Path | None:
        """The file a simulated node's GPU state lives in; None on real hardware.

        Node-wide coordination (the MIG writers' lock) lives beside it, so every process
        of one simulated node shares it as processes on one real host share /run.
        """
        return None

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
