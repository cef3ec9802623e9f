"""The real backend: thin calls into nvidia-ml-py (pynvml).

Each method is a few NVML calls. Two traps it avoids: GPU-instance profiles are queried by
NVML enum but created, placed and listed by the per-device `.id`; and profile names are
computed with the naming formula, not read from the driver.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from kubegpu.catalog import find_by_pci_id, gpu_instance_name
from kubegpu.catalog.loader import GI_PROFILE_ENUM
from kubegpu.catalog.naming import compute_instance_name, variant_of
from kubegpu.nvml import errors
from kubegpu.nvml.interface import Nvml
from kubegpu.nvml.types import (
    Activation,
    Activity,
    Clocks,
    ComputeInstanceInfo,
    ComputeInstanceProfileInfo,
    DeviceInfo,
    EventType,
    GpuEvent,
    GpuInstanceInfo,
    GpuInstanceProfileInfo,
    GpuLink,
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
    TopologyLevel,
    Utilization,
)

T = TypeVar("T")
MIB = 1024 * 1024
ENUM_NAME = {v: k for k, v in GI_PROFILE_ENUM.items()}
CI_PROFILE_COUNT = 9  # NVML_COMPUTE_INSTANCE_PROFILE_COUNT
XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
NO_ID = 0xFFFFFFFF
FALLBACK_CODES = (3, 13, 25)  # NotSupported, FunctionNotFound, ArgumentVersionMismatch
# GPU Performance Monitoring metrics behind `activity` (Hopper and newer):
# Activity field, NVML_GPM_METRIC_* id, scale to the field's unit (percent -> ratio,
# MiB/s -> bytes/s)
GPM_METRICS = (
    ("graphics_active", 1, 0.01),  # GRAPHICS_UTIL
    ("sm_active", 2, 0.01),  # SM_UTIL
    ("sm_occupancy", 3, 0.01),  # SM_OCCUPANCY
    ("tensor_active", 5, 0.01),  # ANY_TENSOR_UTIL
    ("dram_active", 10, 0.01),  # DRAM_BW_UTIL
    ("fp64_active", 11, 0.01),  # FP64_UTIL
    ("fp32_active", 12, 0.01),  # FP32_UTIL
    ("fp16_active", 13, 0.01),  # FP16_UTIL
    ("pcie_tx_bytes_per_s", 20, float(1024 * 1024)),  # PCIE_TX_PER_SEC (MiB/s)
    ("pcie_rx_bytes_per_s", 21, float(1024 * 1024)),  # PCIE_RX_PER_SEC (MiB/s)
)
NVLINK_ACTIVE = 1  # nvmlEnableState_t NVML_FEATURE_ENABLED
SYSFS_PCI = "/sys/bus/pci/devices"


def _bus_key(bus_id: str) -> str:
    """`00000000:18:00.0` and `0000:18:00.0` -> `0000:18:00.0` (sysfs form, lower case)."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{domain[-4:]:0>4}:{rest}"


def _numa_node(bus_id: str) -> int | None:
    try:
        with open(f"{SYSFS_PCI}/{_bus_key(bus_id)}/numa_node") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _call(fn: Callable[..., T], *args: Any) -> T:
    """Call pynvml, turning NVMLError into the seam's error classes."""
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise errors.error_for_code(int(exc.value), str(exc)) from None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# a component the runtime injects no driver into (the DRA plugin: NVIDIA_VISIBLE_DEVICES
# =void) names the driver root it mounted; NVML is then loaded from there, searched where
# NVIDIA's DRA plugin searches (node-runtime.md §3.4)
DRIVER_LIBRARY_ROOT_ENV = "KUBEGPU_DRIVER_LIBRARY_ROOT"
NVML_LIBRARY = "libnvidia-ml.so.1"
NVML_LIBRARY_DIRS = (
    "",
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
)


def driver_nvml_library(root: Path) -> Path | None:
    """libnvidia-ml.so.1 under a driver root (symlinks resolved), or None."""
    for d in NVML_LIBRARY_DIRS:
        candidate = root / d / NVML_LIBRARY
        if candidate.exists():
            return candidate.resolve()
    return None


def _load_driver_library() -> None:
    """Load NVML from the driver root the env names, so pynvml's dlopen of the soname finds
    it already loaded; without the env, pynvml finds the library the runtime injected."""
    root = os.environ.get(DRIVER_LIBRARY_ROOT_ENV)
    if not root:
        return
    library = driver_nvml_library(Path(root))
    if library is None:
        raise errors.NvmlError(
            f"{DRIVER_LIBRARY_ROOT_ENV}={root}: no {NVML_LIBRARY} under it in "
            + ", ".join("/" + d for d in NVML_LIBRARY_DIRS)
        )
    try:
        ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise errors.NvmlError(f"cannot load {library}: {exc}") from None


class RealNvml(Nvml):
    def __init__(self) -> None:
        _load_driver_library()
        _call(pynvml.nvmlInit)
        self._event_set: Any = None
        self._gpm_supported: dict[int, bool] = {}
        self._gpm_samples: dict[tuple[int, int | None], Any] = {}

    def close(self) -> None:
        for sample in self._gpm_samples.values():
            _call(pynvml.nvmlGpmSampleFree, sample)
        self._gpm_samples.clear()
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
        return self._memory(self._handle(index))

    @staticmethod
    def _memory(h: Any) -> MemoryInfo:
        """nvmlMemory_v2_t (used excludes the reserved part) where the driver has it."""
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            return MemoryInfo(int(mem.total) // MIB, int(mem.used) // MIB, int(mem.reserved) // MIB)
        except pynvml.NVMLError as exc:
            if int(exc.value) not in FALLBACK_CODES:
                raise errors.error_for_code(int(exc.value), str(exc)) from None
        mem = _call(pynvml.nvmlDeviceGetMemoryInfo, h)
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

    def process_utilization(self, index: int) -> list[ProcessUtilization]:
        """Every sample the driver buffered (timestamp 0); the latest per process wins.
        NVML answers NotFound when no process ran lately: that is no sample, not an error."""
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(self._handle(index), 0)
        except pynvml.NVMLError as exc:
            if int(exc.value) == errors.NotFound.code:
                return []
            raise errors.error_for_code(int(exc.value), str(exc)) from None
        latest: dict[int, Any] = {}
        for s in samples:
            pid = int(s.pid)
            if pid not in latest or int(s.timeStamp) >= int(latest[pid].timeStamp):
                latest[pid] = s
        return [
            ProcessUtilization(pid, int(s.smUtil), int(s.memUtil), int(s.encUtil), int(s.decUtil))
            for pid, s in sorted(latest.items())
        ]

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

    # -- topology -----------------------------------------------------------------------
    def _nvlink_remotes(self, h: Any) -> list[str]:
        """Bus ids at the far end of each active NVLink (an NVSwitch counts as `switch`)."""
        remotes = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if int(pynvml.nvmlDeviceGetNvLinkState(h, link)) != NVLINK_ACTIVE:
                    continue
                kind = int(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link))
                if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                    remotes.append("switch")
                    continue
                remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link)
            except pynvml.NVMLError as exc:
                if int(exc.value) in (errors.NotSupported.code, errors.InvalidArgument.code):
                    continue  # no such link on this GPU, or no NVLink at all
                raise errors.error_for_code(int(exc.value), str(exc)) from None
            remotes.append(_bus_key(_text(remote.busId)))
        return remotes

    def topology(self, index: int) -> GpuTopology:
        h = self._handle(index)
        bus = _text(_call(pynvml.nvmlDeviceGetPciInfo, h).busId)
        minor = int(_call(pynvml.nvmlDeviceGetMinorNumber, h))
        remotes = self._nvlink_remotes(h)
        links = []
        for peer in range(self.device_count()):
            if peer == index:
                continue
            ph = self._handle(peer)
            level = TopologyLevel(int(_call(pynvml.nvmlDeviceGetTopologyCommonAncestor, h, ph)))
            peer_bus = _bus_key(_text(_call(pynvml.nvmlDeviceGetPciInfo, ph).busId))
            direct = remotes.count(peer_bus)
            switched = 0
            if "switch" in remotes:  # NVSwitch systems: every switched GPU reaches every other
                switched = min(remotes.count("switch"), self._nvlink_remotes(ph).count("switch"))
            links.append(GpuLink(peer=peer, level=level, nvlinks=direct + switched))
        return GpuTopology(
            index=index, minor_number=minor, numa_node=_numa_node(bus), links=tuple(links)
        )

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

    # -- telemetry (read-only) -------------------------------------------------------------
    def clocks(self, index: int) -> Clocks:
        h = self._handle(index)
        return Clocks(
            int(_call(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)),
            int(_call(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM)),
        )

    def temperature(self, index: int) -> int:
        h = self._handle(index)
        return int(_call(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU))

    def memory_temperature(self, index: int) -> int:
        (value,) = _call(
            pynvml.nvmlDeviceGetFieldValues, self._handle(index), [pynvml.NVML_FI_DEV_MEMORY_TEMP]
        )
        if int(value.nvmlReturn) != 0:
            raise errors.error_for_code(int(value.nvmlReturn), f"GPU {index}: memory temperature")
        return int(_field_number(value))

    def power_usage(self, index: int) -> float:
        return int(_call(pynvml.nvmlDeviceGetPowerUsage, self._handle(index))) / 1000.0

    def total_energy(self, index: int) -> int:
        return int(_call(pynvml.nvmlDeviceGetTotalEnergyConsumption, self._handle(index)))

    def pcie_replay_count(self, index: int) -> int:
        return int(_call(pynvml.nvmlDeviceGetPcieReplayCounter, self._handle(index)))

    def encoder_utilization(self, index: int) -> int:
        return int(_call(pynvml.nvmlDeviceGetEncoderUtilization, self._handle(index))[0])

    def decoder_utilization(self, index: int) -> int:
        return int(_call(pynvml.nvmlDeviceGetDecoderUtilization, self._handle(index))[0])

    def remapped_rows(self, index: int) -> RemappedRows:
        corr, unc, pending, failed = _call(pynvml.nvmlDeviceGetRemappedRows, self._handle(index))
        return RemappedRows(int(corr), int(unc), bool(pending), bool(failed))

    def _active_nvlinks(self, h: Any) -> list[int]:
        active = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if int(pynvml.nvmlDeviceGetNvLinkState(h, link)) == NVLINK_ACTIVE:
                    active.append(link)
            except pynvml.NVMLError as exc:
                if int(exc.value) in (errors.NotSupported.code, errors.InvalidArgument.code):
                    continue  # no such link on this GPU, or no NVLink at all
                raise errors.error_for_code(int(exc.value), str(exc)) from None
        return active

    def nvlink_throughput(self, index: int) -> NvLinkThroughput:
        """The payload counters of each active link (field id, scope = the link), summed."""
        h = self._handle(index)
        links = self._active_nvlinks(h)
        if not links:
            return NvLinkThroughput(0, 0, 0)
        tx_id = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
        rx_id = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
        request = [(field, link) for link in links for field in (tx_id, rx_id)]
        totals = {tx_id: 0, rx_id: 0}
        for value in _call(pynvml.nvmlDeviceGetFieldValues, h, request):
            code = int(value.nvmlReturn)
            if code != 0:
                raise errors.error_for_code(code, f"GPU {index}: NVLink throughput field")
            totals[int(value.fieldId)] += int(_field_number(value))
        return NvLinkThroughput(len(links), totals[tx_id], totals[rx_id])

    def _mig_handle(self, index: int, gpu_instance_id: int) -> Any:
        h = self._handle(index)
        for i in range(int(_call(pynvml.nvmlDeviceGetMaxMigDeviceCount, h))):
            try:
                mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except pynvml.NVMLError as exc:
                if int(exc.value) == errors.NotFound.code:
                    continue
                raise errors.error_for_code(int(exc.value), str(exc)) from None
            if int(_call(pynvml.nvmlDeviceGetGpuInstanceId, mh)) == gpu_instance_id:
                return mh
        raise errors.NotFound(f"GPU {index}: no MIG device in GPU instance {gpu_instance_id}")

    def gpu_instance_memory(self, index: int, gpu_instance_id: int) -> MemoryInfo:
        return self._memory(self._mig_handle(index, gpu_instance_id))

    def activity(self, index: int, gpu_instance_id: int | None = None) -> Activity:
        """GPM metrics between this read and the previous one of the same GPU or instance.

        The first read of each only takes a sample and raises NotSupported.
        """
        h = self._handle(index)
        if index not in self._gpm_supported:
            support = _call(pynvml.nvmlGpmQueryDeviceSupport, h)
            self._gpm_supported[index] = bool(support.isSupportedDevice)
        if not self._gpm_supported[index]:
            raise errors.NotSupported(f"GPU {index}: no GPU performance monitoring (GPM)")
        sample = _call(pynvml.nvmlGpmSampleAlloc)
        try:
            if gpu_instance_id is None:
                _call(pynvml.nvmlGpmSampleGet, h, sample)
            else:
                _call(pynvml.nvmlGpmMigSampleGet, h, gpu_instance_id, sample)
        except BaseException:
            _call(pynvml.nvmlGpmSampleFree, sample)
            raise
        key = (index, gpu_instance_id)
        previous = self._gpm_samples.get(key)
        self._gpm_samples[key] = sample
        if previous is None:
            raise errors.NotSupported(f"GPU {index}: first GPM sample taken, figures follow")
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = previous
        request.sample2 = sample
        for i, (_, metric_id, _) in enumerate(GPM_METRICS):
            request.metrics[i].metricId = metric_id
        try:
            _call(pynvml.nvmlGpmMetricsGet, request)
        finally:
            _call(pynvml.nvmlGpmSampleFree, previous)
        values: dict[str, float] = {}
        for i, (name, _, scale) in enumerate(GPM_METRICS):
            metric = request.metrics[i]
            if int(metric.nvmlReturn) == 0:
                values[name] = float(metric.value) * scale
        return Activity(**values)


def _field_number(value: Any) -> float:
    """The number in an nvmlFieldValue_t, read by its value type."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(value.value, member.get(int(value.valueType), "ullVal")))
