"""A small stand-in for libnvidia-ml behind pynvml, so the real backend runs without a GPU.

It answers the pynvml calls `kubegpu.nvml.real` makes for devices, memory, MIG mode and GPU
and compute instances, from plain data: a list of GPUs, each a catalog model. It behaves
like a driver in the ways the conformance suite looks at (placements from the profile
table, overlaps and max counts refused, instances in use not destroyed, NVML return codes),
and is deliberately simpler elsewhere: it knows nothing of media engines or driver gates.
Install it with `FakeNvmlLibrary(...).install(monkeypatch)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from kubegpu.catalog import GpuInstanceProfile, GpuModel
from kubegpu.catalog.loader import GI_PROFILE_ENUM

MIB = 1024 * 1024


def _fail(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class _HandleArray(type):
    """Stands in for pynvml's ctypes pointer types: `T * n` makes a list of n slots."""

    def __mul__(cls, n: int) -> Any:
        return lambda: [None] * n


class GpuInstanceHandle(metaclass=_HandleArray):
    pass


class ComputeInstanceHandle(metaclass=_HandleArray):
    pass


def _set_count(ref: Any, value: int) -> None:
    ref._obj.value = value  # ctypes.byref(c_uint) keeps the object in _obj


@dataclass
class FakeCi:
    id: int
    profile_id: int
    start: int
    size: int


@dataclass
class FakeGi:
    gpu: FakeGpu
    id: int
    profile: GpuInstanceProfile
    start: int
    cis: list[FakeCi] = field(default_factory=list)


@dataclass
class FakeGpu:
    index: int
    model: GpuModel
    mig_current: bool = False
    gis: list[FakeGi] = field(default_factory=list)
    # active NVLinks (links 0..n-1) and the payload each moved so far, KiB (TX, RX)
    nvlinks: int = 0
    nvlink_kib: tuple[int, int] = (0, 0)
    # running compute processes: (pid, used MiB, SM %)
    processes: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def uuid(self) -> str:
        return f"GPU-00000000-0000-0000-0000-{self.index:012d}"

    @property
    def bus_id(self) -> str:
        return f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"

    def profile_by_id(self, profile_id: int) -> GpuInstanceProfile:
        if self.model.mig is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        for p in self.model.mig.gpu_instance_profiles:
            if p.id == profile_id:
                return p
        raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)


@dataclass(frozen=True)
class MigDeviceHandle:
    gpu: FakeGpu
    gi: FakeGi
    ci: FakeCi


class FakeNvmlLibrary:
    """The driver's view of a node of `models`; `driver` is what the system reports."""

    def __init__(
        self,
        models: list[GpuModel],
        driver: str = "580.95.05",
        nvlinks: dict[int, int] | None = None,
    ) -> None:
        """`nvlinks`: GPU index -> its active NVLinks (none by default)."""
        self.gpus = [FakeGpu(i, m, nvlinks=(nvlinks or {}).get(i, 0)) for i, m in enumerate(models)]
        self.driver = driver

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))
        monkeypatch.setattr(pynvml, "c_nvmlGpuInstance_t", GpuInstanceHandle)
        monkeypatch.setattr(pynvml, "c_nvmlComputeInstance_t", ComputeInstanceHandle)

    # -- system and devices ------------------------------------------------------------------
    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13000

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "13.615.71"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        return SimpleNamespace(busId=h.bus_id, pciDeviceId=h.model.pci_device_id)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu, version: int | None = None) -> Any:
        total = h.model.memory_mib * MIB
        if version is not None:
            return SimpleNamespace(total=total, used=0, reserved=0)
        return SimpleNamespace(total=total, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        major, _, minor = h.model.compute_capability.partition(".")
        return int(major), int(minor)

    def nvmlDeviceGetUUID(self, h: FakeGpu | MigDeviceHandle) -> str:
        if isinstance(h, MigDeviceHandle):
            return f"MIG-{h.gpu.index:08d}-0000-0000-0000-{h.gi.id:06d}{h.ci.id:06d}"
        return h.uuid

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return h.model.product_name

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        no_id = 0xFFFFFFFF
        return [
            SimpleNamespace(
                pid=pid, usedGpuMemory=mib * MIB, gpuInstanceId=no_id, computeInstanceId=no_id
            )
            for pid, mib, _ in h.processes
        ]

    def nvmlDeviceGetProcessUtilization(self, h: FakeGpu, since: int) -> list[Any]:
        """Two buffered samples per process, the older one stale: the newest must win."""
        if h.mig_current:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not h.processes:
            raise _fail(pynvml.NVML_ERROR_NOT_FOUND)
        return [
            SimpleNamespace(
                pid=pid, timeStamp=stamp, smUtil=sm if stamp else 0, memUtil=0, encUtil=0, decUtil=0
            )
            for stamp in (2, 0)
            for pid, _, sm in h.processes
        ]

    # -- MIG mode ------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> tuple[int, int]:
        if h.model.mig is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(h.mig_current), int(h.mig_current)

    def nvmlDeviceSetMigMode(self, h: FakeGpu, mode: int) -> int:
        if h.model.mig is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not mode and h.gis:
            raise _fail(pynvml.NVML_ERROR_IN_USE)
        h.mig_current = bool(mode)
        return pynvml.NVML_SUCCESS

    def _mig_on(self, h: FakeGpu) -> None:
        if h.model.mig is None or not h.mig_current:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)

    # -- GPU instances ---------------------------------------------------------------------------
    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: FakeGpu, enum: int) -> Any:
        if h.model.mig is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        for p in h.model.mig.gpu_instance_profiles:
            if GI_PROFILE_ENUM[p.nvml] == enum:
                e = p.engines
                return SimpleNamespace(
                    id=p.id,
                    sliceCount=p.compute_slices,
                    instanceCount=p.max_count,
                    multiprocessorCount=p.sms,
                    copyEngineCount=e.ce,
                    decoderCount=e.dec,
                    encoderCount=e.enc,
                    jpegCount=e.jpg,
                    ofaCount=e.ofa,
                    memorySizeMB=p.memory_mib,
                )
        raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, h: FakeGpu, profile_id: int, array: Any, count: Any
    ) -> None:
        self._mig_on(h)
        p = h.profile_by_id(profile_id)
        _set_count(count, len(p.placements))
        if array is not None:
            for i, start in enumerate(p.placements):
                array[i].start, array[i].size = start, p.slices

    def _used(self, h: FakeGpu) -> int:
        used = 0
        for gi in h.gis:
            used |= ((1 << gi.profile.slices) - 1) << gi.start
        return used

    def _free_starts(self, h: FakeGpu, p: GpuInstanceProfile) -> list[int]:
        used = self._used(h)
        return [s for s in p.placements if not used & (((1 << p.slices) - 1) << s)]

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, h: FakeGpu, profile_id: int) -> int:
        self._mig_on(h)
        p = h.profile_by_id(profile_id)
        left = p.max_count - sum(1 for gi in h.gis if gi.profile == p)
        free, used = 0, self._used(h)
        for s in p.placements:
            mask = ((1 << p.slices) - 1) << s
            if not used & mask:
                used |= mask
                free += 1
        return max(0, min(left, free))

    def _create(self, h: FakeGpu, p: GpuInstanceProfile, start: int) -> FakeGi:
        assert h.model.mig
        if sum(1 for gi in h.gis if gi.profile == p) >= p.max_count:
            raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        if len(h.gis) >= h.model.mig.max_gpu_instances:
            raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        if start not in self._free_starts(h, p):
            raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = FakeGi(h, 1 + max((g.id for g in h.gis), default=0), p, start)
        h.gis.append(gi)
        return gi

    def nvmlDeviceCreateGpuInstance(self, h: FakeGpu, profile_id: int) -> FakeGi:
        self._mig_on(h)
        p = h.profile_by_id(profile_id)
        free = self._free_starts(h, p)
        if not free:
            raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        return self._create(h, p, free[0])

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, h: FakeGpu, profile_id: int, placement: Any
    ) -> FakeGi:
        self._mig_on(h)
        p = h.profile_by_id(profile_id)
        where = placement._obj
        if where.start not in p.placements or where.size != p.slices:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._create(h, p, where.start)

    def nvmlGpuInstanceGetInfo(self, gi: FakeGi) -> Any:
        return SimpleNamespace(
            id=gi.id,
            profileId=gi.profile.id,
            placement=SimpleNamespace(start=gi.start, size=gi.profile.slices),
        )

    def nvmlDeviceGetGpuInstances(
        self, h: FakeGpu, profile_id: int, array: list[Any], count: Any
    ) -> None:
        self._mig_on(h)
        mine = [gi for gi in h.gis if gi.profile.id == profile_id]
        for i, gi in enumerate(mine):
            array[i] = gi
        _set_count(count, len(mine))

    def nvmlDeviceGetGpuInstanceById(self, h: FakeGpu, gi_id: int) -> FakeGi:
        self._mig_on(h)
        for gi in h.gis:
            if gi.id == gi_id:
                return gi
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceDestroy(self, gi: FakeGi) -> None:
        if gi.cis:
            raise _fail(pynvml.NVML_ERROR_IN_USE)
        gi.gpu.gis.remove(gi)

    # -- compute instances -------------------------------------------------------------------------
    def _ci_profiles(self, gi: FakeGi) -> Any:
        assert gi.gpu.model.mig
        return gi.gpu.model.mig.compute_instance_profiles(gi.profile)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: FakeGi, enum: int, engine: int
    ) -> Any:
        for c in self._ci_profiles(gi):
            if c.nvml_enum == enum:
                return SimpleNamespace(
                    id=c.nvml_enum,
                    sliceCount=c.compute_slices,
                    instanceCount=c.max_count,
                    multiprocessorCount=c.sms,
                )
        raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlGpuInstanceCreateComputeInstance(self, gi: FakeGi, profile_id: int) -> FakeCi:
        c = next((c for c in self._ci_profiles(gi) if c.nvml_enum == profile_id), None)
        if c is None:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if sum(1 for x in gi.cis if x.profile_id == profile_id) >= c.max_count:
            raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        used = 0
        for x in gi.cis:
            used |= ((1 << x.size) - 1) << x.start
        size = c.compute_slices
        for start in range(0, gi.profile.compute_slices - size + 1, size):
            if not used & (((1 << size) - 1) << start):
                ci = FakeCi(1 + max((x.id for x in gi.cis), default=-1), profile_id, start, size)
                gi.cis.append(ci)
                return ci
        raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)

    def nvmlComputeInstanceGetInfo(self, ci: FakeCi) -> Any:
        return SimpleNamespace(
            id=ci.id,
            profileId=ci.profile_id,
            placement=SimpleNamespace(start=ci.start, size=ci.size),
        )

    def nvmlGpuInstanceGetComputeInstances(
        self, gi: FakeGi, profile_id: int, array: list[Any], count: Any
    ) -> None:
        mine = [ci for ci in gi.cis if ci.profile_id == profile_id]
        for i, ci in enumerate(mine):
            array[i] = ci
        _set_count(count, len(mine))

    def nvmlGpuInstanceGetComputeInstanceById(self, gi: FakeGi, ci_id: int) -> FakeCi:
        for ci in gi.cis:
            if ci.id == ci_id:
                return ci
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlComputeInstanceDestroy(self, ci: FakeCi) -> None:
        for gpu in self.gpus:
            for gi in gpu.gis:
                if ci in gi.cis:
                    gi.cis.remove(ci)

    # -- MIG devices -------------------------------------------------------------------------------
    def _mig_devices(self, h: FakeGpu) -> list[MigDeviceHandle]:
        return [
            MigDeviceHandle(h, gi, ci)
            for gi in sorted(h.gis, key=lambda g: g.id)
            for ci in sorted(gi.cis, key=lambda c: c.id)
        ]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        return h.model.mig.max_gpu_instances if h.model.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, i: int) -> MigDeviceHandle:
        devices = self._mig_devices(h)
        if i >= len(devices):
            raise _fail(pynvml.NVML_ERROR_NOT_FOUND)
        return devices[i]

    def nvmlDeviceGetGpuInstanceId(self, mh: MigDeviceHandle) -> int:
        return mh.gi.id

    def nvmlDeviceGetComputeInstanceId(self, mh: MigDeviceHandle) -> int:
        return mh.ci.id

    # -- NVLink ---------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        if not 0 <= link < pynvml.NVML_NVLINK_MAX_LINKS:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if h.nvlinks == 0:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a GPU without NVLink
        return 1 if link < h.nvlinks else 0

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, field_ids: list[Any]) -> list[Any]:
        """Per-link NVLink payload counters (each active link's share of the GPU's total);
        any other field is not supported here."""
        out = []
        for requested in field_ids:
            fid, link = requested if isinstance(requested, tuple) else (requested, 0)
            ret, value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0
            direction = {
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 0,
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 1,
            }.get(fid)
            if direction is not None and 0 <= link < h.nvlinks:
                total = h.nvlink_kib[direction]
                ret = pynvml.NVML_SUCCESS
                value = total // h.nvlinks + (1 if link < total % h.nvlinks else 0)
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    scopeId=link,
                    nvmlReturn=ret,
                    valueType=3,  # unsigned long long
                    value=SimpleNamespace(ullVal=value),
                )
            )
        return out

    def nvmlDeviceGetAttributes_v2(self, mh: MigDeviceHandle) -> Any:
        assert mh.gpu.model.mig
        cip = next(c for c in self._ci_profiles(mh.gi) if c.nvml_enum == mh.ci.profile_id)
        return SimpleNamespace(
            computeInstanceSliceCount=cip.compute_slices,
            memorySizeMB=mh.gi.profile.memory_mib,
            multiprocessorCount=cip.sms,
        )
