"""The real backend: thin calls into nvidia-ml-py (pynvml).

Each method is a few NVML calls. Two traps it avoids: GPU-instance profiles are queried by
NVML enum but created, placed and listed by the per-device `.id`; and profile names are
computed with the naming formula, not read from the driver.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from kubegpu.catalog import find_by_pci_id, gpu_instance_name
from kubegpu.catalog.loader import GI_PROFILE_ENUM
from kubegpu.catalog.naming import compute_instance_name, variant_of
from kubegpu.nvml import errors
from kubegpu.nvml.interface import Nvml
from kubegpu.nvml.types import (
    Activation,
    ComputeInstanceInfo,
    ComputeInstanceProfileInfo,
    DeviceInfo,
    EventType,
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

T = TypeVar("T")
MIB = 1024 * 1024
ENUM_NAME = {v: k for k, v in GI_PROFILE_ENUM.items()}
CI_PROFILE_COUNT = 9  # NVML_COMPUTE_INSTANCE_PROFILE_COUNT
XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
NO_ID = 0xFFFFFFFF


def _call(fn: Callable[..., T], *args: Any) -> T:
    """Call pynvml, turning NVMLError into the seam's error classes."""
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise errors.error_for_code(int(exc.value), str(exc)) from None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RealNvml(Nvml):
    def __init__(self) -> None:
        _call(pynvml.nvmlInit)
        self._event_set: Any = None

    def close(self) -> None:
        if self._event_set is not None:
            _call(pynvml.nvmlEventSetFree, self._event_set)
            self._event_set = None
        _call(pynvml.nvmlShutdown)

    def _handle(self, index: int) -> Any:
        return _call(pynvml.nvmlDeviceGetHandleByIndex, index)

    # -- system and devices -------------------------------------------------------------
    def system(self) -> SystemInfo:
        return SystemInfo(
            _text(_call(pynvml.nvmlSystemGetDriverVersion)),
            int(_call(pynvml.nvmlSystemGetCudaDriverVersion_v2)),
            _text(_call(pynvml.nvmlSystemGetNVMLVersion)),
        )

    def device_count(self) -> int:
        return int(_call(pynvml.nvmlDeviceGetCount))

    def device(self, index: int) -> DeviceInfo:
        h = self._handle(index)
        pci = _call(pynvml.nvmlDeviceGetPciInfo, h)
        mem = _call(pynvml.nvmlDeviceGetMemoryInfo, h)
        major, minor = _call(pynvml.nvmlDeviceGetCudaComputeCapability, h)
        model = find_by_pci_id(int(pci.pciDeviceId))
        return DeviceInfo(
            index=index,
            uuid=_text(_call(pynvml.nvmlDeviceGetUUID, h)),
            name=_text(_call(pynvml.nvmlDeviceGetName, h)),
            pci_bus_id=_text(pci.busId),
            pci_device_id=int(pci.pciDeviceId),
            memory_total_mib=int(mem.total) // MIB,
            compute_capability=(int(major), int(minor)),
            model_id=model.id if model else None,
        )

    def memory(self, index: int) -> MemoryInfo:
        mem = _call(pynvml.nvmlDeviceGetMemoryInfo, self._handle(index))
        return MemoryInfo(int(mem.total) // MIB, int(mem.used) // MIB)

    def utilization(self, index: int) -> Utilization:
        u = _call(pynvml.nvmlDeviceGetUtilizationRates, self._handle(index))
        return Utilization(int(u.gpu), int(u.memory))

    def processes(self, index: int) -> list[ProcessInfo]:
        procs = _call(pynvml.nvmlDeviceGetComputeRunningProcesses, self._handle(index))
        out = []
        for p in procs:
            gi = getattr(p, "gpuInstanceId", NO_ID)
            ci = getattr(p, "computeInstanceId", NO_ID)
            used = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else 0
            out.append(
                ProcessInfo(
                    int(p.pid),
                    used // MIB,
                    None if gi == NO_ID else int(gi),
                    None if ci == NO_ID else int(ci),
                )
            )
        return out

    # -- MIG mode -----------------------------------------------------------------------
    def mig_mode(self, index: int) -> MigMode:
        current, pending = _call(pynvml.nvmlDeviceGetMigMode, self._handle(index))
        return MigMode(bool(current), bool(pending))

    def set_mig_mode(self, index: int, enabled: bool) -> Activation:
        status = _call(pynvml.nvmlDeviceSetMigMode, self._handle(index), int(enabled))
        if int(status) == errors.ResetRequired.code:
            return Activation.RESET_REQUIRED
        if int(status) != 0:
            raise errors.error_for_code(int(status), f"GPU {index}: MIG mode change")
        return Activation.APPLIED

    def reset(self, index: int) -> None:
        raise errors.NotSupported(
            "GPU reset is not done through NVML here; run `nvidia-smi --gpu-reset -i "
            f"{index}` with the GPU idle, or reboot the node"
        )

    # -- GPU instances ------------------------------------------------------------------
    def _profile_infos(self, h: Any) -> list[GpuInstanceProfileInfo]:
        total = int(_call(pynvml.nvmlDeviceGetMemoryInfo, h).total) // MIB
        out = []
        for enum in sorted(ENUM_NAME):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
            except pynvml.NVMLError as exc:
                if int(exc.value) in (errors.NotSupported.code, errors.InvalidArgument.code):
                    continue  # NVML's advice: skip profiles this GPU does not have
                raise errors.error_for_code(int(exc.value), str(exc)) from None
            memory = int(info.memorySizeMB)
            name = gpu_instance_name(
                int(info.sliceCount), memory, total, variant_of(ENUM_NAME[enum])
            )
            out.append(
                GpuInstanceProfileInfo(
                    nvml_enum=enum,
                    id=int(info.id),
                    name=name,
                    slice_count=int(info.sliceCount),
                    instance_count=int(info.instanceCount),
                    multiprocessor_count=int(info.multiprocessorCount),
                    copy_engine_count=int(info.copyEngineCount),
                    decoder_count=int(info.decoderCount),
                    encoder_count=int(info.encoderCount),
                    jpeg_count=int(info.jpegCount),
                    ofa_count=int(info.ofaCount),
                    memory_size_mib=memory,
                )
            )
        return out

    def gpu_instance_profiles(self, index: int) -> list[GpuInstanceProfileInfo]:
        return self._profile_infos(self._handle(index))

    def gpu_instance_possible_placements(self, index: int, profile_id: int) -> list[Placement]:
        h = self._handle(index)
        count = ctypes.c_uint(0)
        _call(
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements,
            h,
            profile_id,
            None,
            ctypes.byref(count),
        )
        array = (pynvml.c_nvmlGpuInstancePlacement_t * max(1, count.value))()
        _call(
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements,
            h,
            profile_id,
            array,
            ctypes.byref(count),
        )
        return [Placement(int(array[i].start), int(array[i].size)) for i in range(count.value)]

    def gpu_instance_remaining_capacity(self, index: int, profile_id: int) -> int:
        return int(
            _call(pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, self._handle(index), profile_id)
        )

    def _gi_info(self, index: int, gi: Any) -> GpuInstanceInfo:
        info = _call(pynvml.nvmlGpuInstanceGetInfo, gi)
        return GpuInstanceInfo(
            index,
            int(info.id),
            int(info.profileId),
            Placement(int(info.placement.start), int(info.placement.size)),
        )

    def create_gpu_instance(
        self, index: int, profile_id: int, start: int | None = None
    ) -> GpuInstanceInfo:
        h = self._handle(index)
        if start is None:
            gi = _call(pynvml.nvmlDeviceCreateGpuInstance, h, profile_id)
        else:
            size = next(
                (
                    p.size
                    for p in self.gpu_instance_possible_placements(index, profile_id)
                    if p.start == start
                ),
                None,
            )
            if size is None:
                raise errors.InvalidArgument(f"profile {profile_id} cannot start at {start}")
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = start, size
            gi = _call(
                pynvml.nvmlDeviceCreateGpuInstanceWithPlacement,
                h,
                profile_id,
                ctypes.byref(placement),
            )
        return self._gi_info(index, gi)

    def _gi_handles(self, h: Any) -> list[Any]:
        handles = []
        for p in self._profile_infos(h):
            count = ctypes.c_uint(0)
            array = (pynvml.c_nvmlGpuInstance_t * max(1, p.instance_count))()
            _call(pynvml.nvmlDeviceGetGpuInstances, h, p.id, array, ctypes.byref(count))
            handles += [array[i] for i in range(count.value)]
        return handles

    def gpu_instances(self, index: int) -> list[GpuInstanceInfo]:
        infos = [self._gi_info(index, gi) for gi in self._gi_handles(self._handle(index))]
        return sorted(infos, key=lambda g: g.id)

    def _gi(self, index: int, gi_id: int) -> Any:
        return _call(pynvml.nvmlDeviceGetGpuInstanceById, self._handle(index), gi_id)

    def destroy_gpu_instance(self, index: int, gi_id: int) -> None:
        _call(pynvml.nvmlGpuInstanceDestroy, self._gi(index, gi_id))

    # -- compute instances --------------------------------------------------------------
    def _gi_name(self, index: int, gi_id: int) -> str:
        profile_id = self._gi_info(index, self._gi(index, gi_id)).profile_id
        return next(p.name for p in self.gpu_instance_profiles(index) if p.id == profile_id)

    def compute_instance_profiles(self, index: int, gi_id: int) -> list[ComputeInstanceProfileInfo]:
        gi = self._gi(index, gi_id)
        gi_name = self._gi_name(index, gi_id)
        out = []
        for enum in range(CI_PROFILE_COUNT):
            try:
                info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, 0)
            except pynvml.NVMLError as exc:
                if int(exc.value) in (errors.NotSupported.code, errors.InvalidArgument.code):
                    continue
                raise errors.error_for_code(int(exc.value), str(exc)) from None
            out.append(
                ComputeInstanceProfileInfo(
                    int(info.id),
                    compute_instance_name(int(info.sliceCount), gi_name),
                    int(info.sliceCount),
                    int(info.instanceCount),
                    int(info.multiprocessorCount),
                )
            )
        return out

    def create_compute_instance(
        self, index: int, gi_id: int, profile_id: int
    ) -> ComputeInstanceInfo:
        ci = _call(pynvml.nvmlGpuInstanceCreateComputeInstance, self._gi(index, gi_id), profile_id)
        return self._ci_info(index, gi_id, ci)

    def _ci_info(self, index: int, gi_id: int, ci: Any) -> ComputeInstanceInfo:
        info = _call(pynvml.nvmlComputeInstanceGetInfo, ci)
        return ComputeInstanceInfo(
            index,
            gi_id,
            int(info.id),
            int(info.profileId),
            Placement(int(info.placement.start), int(info.placement.size)),
        )

    def compute_instances(self, index: int, gi_id: int) -> list[ComputeInstanceInfo]:
        gi = self._gi(index, gi_id)
        out = []
        for p in self.compute_instance_profiles(index, gi_id):
            count = ctypes.c_uint(0)
            array = (pynvml.c_nvmlComputeInstance_t * max(1, p.instance_count))()
            _call(pynvml.nvmlGpuInstanceGetComputeInstances, gi, p.id, array, ctypes.byref(count))
            out += [self._ci_info(index, gi_id, array[i]) for i in range(count.value)]
        return out

    def destroy_compute_instance(self, index: int, gi_id: int, ci_id: int) -> None:
        ci = _call(pynvml.nvmlGpuInstanceGetComputeInstanceById, self._gi(index, gi_id), ci_id)
        _call(pynvml.nvmlComputeInstanceDestroy, ci)

    def mig_devices(self, index: int) -> list[MigDeviceInfo]:
        h = self._handle(index)
        if not self.mig_mode(index).current:
            return []
        profiles = {p.id: p for p in self._profile_infos(h)}
        gis = {g.id: g for g in self.gpu_instances(index)}
        out = []
        for i in range(int(_call(pynvml.nvmlDeviceGetMaxMigDeviceCount, h))):
            try:
                mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except pynvml.NVMLError as exc:
                if int(exc.value) == errors.NotFound.code:
                    continue
                raise errors.error_for_code(int(exc.value), str(exc)) from None
            gi_id = int(_call(pynvml.nvmlDeviceGetGpuInstanceId, mh))
            ci_id = int(_call(pynvml.nvmlDeviceGetComputeInstanceId, mh))
            attrs = _call(pynvml.nvmlDeviceGetAttributes_v2, mh)
            gi = gis[gi_id]
            gip = profiles[gi.profile_id]
            out.append(
                MigDeviceInfo(
                    parent_index=index,
                    index=i,
                    uuid=_text(_call(pynvml.nvmlDeviceGetUUID, mh)),
                    gpu_instance_id=gi_id,
                    compute_instance_id=ci_id,
                    gi_profile_id=gi.profile_id,
                    profile=compute_instance_name(int(attrs.computeInstanceSliceCount), gip.name),
                    memory_mib=int(attrs.memorySizeMB),
                    multiprocessor_count=int(attrs.multiprocessorCount),
                    placement=gi.placement,
                )
            )
        return out

    # -- events -------------------------------------------------------------------------
    def wait_for_event(self, timeout_s: float) -> GpuEvent | None:
        if self._event_set is None:
            self._event_set = _call(pynvml.nvmlEventSetCreate)
            for i in range(self.device_count()):
                try:
                    pynvml.nvmlDeviceRegisterEvents(self._handle(i), XID_EVENT, self._event_set)
                except pynvml.NVMLError as exc:
                    if int(exc.value) != errors.NotSupported.code:
                        raise errors.error_for_code(int(exc.value), str(exc)) from None
        try:
            data = pynvml.nvmlEventSetWait_v2(self._event_set, int(timeout_s * 1000))
        except pynvml.NVMLError as exc:
            if int(exc.value) == errors.Timeout.code:
                return None
            raise errors.error_for_code(int(exc.value), str(exc)) from None
        uuid = _text(_call(pynvml.nvmlDeviceGetUUID, data.device))
        index = int(_call(pynvml.nvmlDeviceGetIndex, data.device))
        xid = int(data.eventData)
        gi = None if data.gpuInstanceId == NO_ID else int(data.gpuInstanceId)
        ci = None if data.computeInstanceId == NO_ID else int(data.computeInstanceId)
        kind = EventType.GPU_LOST if xid == 79 else EventType.XID
        return GpuEvent(index, uuid, kind, xid, gi, ci)
