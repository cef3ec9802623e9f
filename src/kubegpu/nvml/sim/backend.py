"""The simulated NVML backend: a virtual GPU node built from the catalog.

It enforces what the hardware enforces, with the rules of kubegpu.catalog.placement
(placements, overlaps, max counts, media engines, driver gates) plus instances in use, MIG
mode needing a reset on Ampere and the display-mode prerequisite, and raises the same error
kinds. Auto-placement (create without a start) follows the driver's observed choices: the
placement that removes the fewest other possible placements, lowest start on ties. That
reproduces the MIG guide's known issue: on an A100, creating 1g,1g,2g,3g in that order fails
while 3g,1g,2g,1g works.

Only the NVML interface lives here; faults, reboots and other lab controls are in
kubegpu.nvml.sim.controls.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kubegpu.catalog import (
    ComputeInstanceProfile,
    GpuInstanceProfile,
    GpuModel,
    MigCapability,
    get_model,
)
from kubegpu.catalog.placement import (
    Occupancy,
    PlacedInstance,
    Refusal,
    addition_problem,
    instance_mask,
    mig_driver_problem,
    offered_profiles,
)
from kubegpu.nvml import errors
from kubegpu.nvml.interface import Nvml
from kubegpu.nvml.sim import telemetry, watch
from kubegpu.nvml.sim.access import SimStateAccess, power_cycle
from kubegpu.nvml.sim.spec import NodeSpec, parse_spec
from kubegpu.nvml.sim.state import (
    CiState,
    GiState,
    GpuState,
    NodeState,
    StateFile,
    mig_device_uuid,
)
from kubegpu.nvml.types import (
    Activation,
    Activity,
    Clocks,
    ComputeInstanceInfo,
    ComputeInstanceProfileInfo,
    DeviceInfo,
    DeviceSample,
    EventType,
    GpuEvent,
    GpuInstanceInfo,
    GpuInstanceProfileInfo,
    GpuInstanceSample,
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
# Simulated topology: models built as NVLink-connected boards (telemetry.NVLINKS_BY_MODEL)
# get that many NVLinks between every pair of GPUs of the same model; PCIe cards are joined
# only by PCIe. Either way the node has two CPUs, and the first half of the GPUs hangs off
# CPU 0 (NUMA node 0), the second half off CPU 1.
NVLINKS_BY_MODEL = telemetry.NVLINKS_BY_MODEL


_ERROR_FOR = {
    Refusal.DRIVER: errors.NotSupported,
    Refusal.CAPACITY: errors.InsufficientResources,
    Refusal.PLACEMENT: errors.InvalidArgument,
}


class SimNvml(SimStateAccess, Nvml):
    """NVML over a sim state file. The lab's controls are kubegpu.nvml.sim.SimControls."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(path)
        state = self._read()
        self._seen_event = state["event_seq"]
        self._events: watch.Watch | None = None  # the state file's changes, once waited on
        self._events_read_at: int | None = None  # the change generation events were read at

    @classmethod
    def create(cls, path: Path | str, spec: NodeSpec | str) -> SimNvml:
        """Open the state at `path`, creating it from `spec` when it does not exist yet."""
        store = StateFile(Path(path))
        node = parse_spec(spec) if isinstance(spec, str) else spec
        store.create(node)
        return cls(path)

    def state_file(self) -> Path:
        return self.store.path

    # -- the state file, read as NVML reads hardware ---------------------------------------
    # A state file that is gone, unreadable or corrupt is what a driver that lost its GPUs
    # looks like: callers get an NVML error (Unknown Error) as they would from the hardware,
    # never an OSError or ValueError they do not expect from NVML.
    def _read(self) -> NodeState:
        try:
            return self.store.read()
        except (OSError, ValueError) as exc:
            raise errors.UnknownError(str(exc)) from None

    def _change(self, fn: Callable[[NodeState], T]) -> T:
        try:
            with self.store.transaction() as state:
                telemetry.fold_energy(state, self.clock())
                return fn(state)
        except (OSError, ValueError) as exc:
            raise errors.UnknownError(str(exc)) from None

    # -- helpers ------------------------------------------------------------------------
    @staticmethod
    def _model(gpu: GpuState) -> GpuModel:
        return get_model(gpu["model"])

    def _mig(self, state: NodeState, gpu: GpuState, *, need_enabled: bool = True) -> MigCapability:
        model = self._model(gpu)
        if model.mig is None:
            raise errors.NotSupported(
                f"GPU {gpu['index']} ({model.product_name}) does not support MIG"
            )
        too_old = mig_driver_problem(model.mig, state["driver_version"])
        if too_old:
            raise errors.NotSupported(f"GPU {gpu['index']} ({model.product_name}): {too_old}")
        if need_enabled and not gpu["mig_current"]:
            raise errors.NotSupported(f"GPU {gpu['index']}: MIG mode is not enabled")
        return model.mig

    @staticmethod
    def _profile_by_id(mig: MigCapability, gpu: GpuState, profile_id: int) -> GpuInstanceProfile:
        try:
            return mig.profile_by_id(profile_id)
        except KeyError:
            raise errors.InvalidArgument(
                f"GPU {gpu['index']}: no GPU-instance profile with id {profile_id}"
            ) from None

    @staticmethod
    def _gi(gpu: GpuState, gi_id: int) -> GiState:
        for gi in gpu["gpu_instances"]:
            if gi["id"] == gi_id:
                return gi
        raise errors.NotFound(f"GPU {gpu['index']}: no GPU instance {gi_id}")

    def _placed(self, mig: MigCapability, gpu: GpuState) -> list[PlacedInstance]:
        return [
            PlacedInstance(gi["start"], mig.profile_by_id(gi["profile_id"]))
            for gi in gpu["gpu_instances"]
        ]

    # -- system and devices -------------------------------------------------------------
    def system(self) -> SystemInfo:
        s = self._read()
        return SystemInfo(s["driver_version"], s["cuda_driver_version"], "13.615.71-sim")

    def device_count(self) -> int:
        return len(self._read()["gpus"])

    def device(self, index: int) -> DeviceInfo:
        gpu = self._gpu(self._read(), index)
        model = self._model(gpu)
        major, _, minor = model.compute_capability.partition(".")
        return DeviceInfo(
            index=index,
            uuid=gpu["uuid"],
            name=model.product_name,
            pci_bus_id=gpu["pci_bus_id"],
            pci_device_id=model.pci_device_id,
            memory_total_mib=model.memory_mib,
            compute_capability=(int(major), int(minor)),
            model_id=model.id,
        )

    def memory(self, index: int) -> MemoryInfo:
        memory = self.sample(index).memory  # processes plus busy (pod-allocated) devices
        assert memory is not None
        return memory

    def utilization(self, index: int) -> Utilization:
        util = self.sample(index).utilization
        if util is None:
            raise errors.NotSupported(f"GPU {index}: no utilisation rates while MIG mode is on")
        return util

    def processes(self, index: int) -> list[ProcessInfo]:
        """Processes started through the lab's controls, then the pods' processes the
        simulated kubelet named (`SimControls.set_workloads`), each on its MIG device."""
        state = self._read()
        gpu = self._gpu(state, index)
        out = [
            ProcessInfo(p["pid"], p["used_memory_mib"], p["gi"], p["ci"]) for p in gpu["processes"]
        ]
        where = {
            c["uuid"]: (gi["id"], c["id"])
            for gi in gpu["gpu_instances"]
            for c in gi["compute_instances"]
        }
        for p in telemetry.pod_processes(state, gpu, None):
            gi_id, ci_id = where.get(p.uuid, (None, None))
            out.append(ProcessInfo(p.pid, p.used_memory_mib, gi_id, ci_id))
        return out

    def process_utilization(self, index: int) -> list[ProcessUtilization]:
        """Each process's SM share as it runs now, and its share of the memory bandwidth in
        proportion; NotSupported while MIG mode is on, as NVML."""
        state = self._read()
        gpu = self._gpu(state, index)
        if gpu["mig_current"]:
            raise errors.NotSupported(f"GPU {index}: no per-process utilization in MIG mode")
        now = self.clock()
        sample = telemetry.device_sample(state, gpu, now)
        memory = sample.utilization.memory_percent if sample.utilization else 0
        figures = [(p["pid"], float(p["sm_percent"])) for p in gpu["processes"]]
        figures += [(p.pid, p.sm_percent) for p in telemetry.pod_processes(state, gpu, now)]
        total = sum(sm for _, sm in figures)
        scale = min(1.0, 100.0 / total) if total > 0 else 0.0
        return [
            ProcessUtilization(
                pid, round(sm * scale), round(memory * sm / total) if total > 0 else 0
            )
            for pid, sm in figures
        ]

    # -- MIG mode -----------------------------------------------------------------------
    def mig_mode(self, index: int) -> MigMode:
        state = self._read()
        gpu = self._gpu(state, index)
        self._mig(state, gpu, need_enabled=False)
        return MigMode(gpu["mig_current"], gpu["mig_pending"])

    def set_mig_mode(self, index: int, enabled: bool) -> Activation:
        def change(state: NodeState) -> Activation:
            gpu = self._gpu(state, index)
            mig = self._mig(state, gpu, need_enabled=False)
            if enabled and mig.display_mode_compute_required and gpu["display_mode"] != "compute":
                raise errors.NotSupported(
                    f"GPU {index} ({self._model(gpu).product_name}) is in graphics display mode; "
                    "switch it to compute first (DisplayModeSelector --gpumode=compute)"
                )
            if gpu["mig_current"] == enabled and gpu["mig_pending"] == enabled:
                return Activation.APPLIED
            if gpu["processes"]:
                pids = ", ".join(str(p["pid"]) for p in gpu["processes"])
                raise errors.InUse(f"GPU {index} has running processes ({pids})")
            if not enabled and gpu["gpu_instances"]:
                raise errors.InUse(
                    f"GPU {index} still has {len(gpu['gpu_instances'])} GPU instances"
                )
            gpu["mig_pending"] = enabled
            if mig.mode_change_needs_reset:
                return Activation.RESET_REQUIRED
            gpu["mig_current"] = enabled
            return Activation.APPLIED

        return self._change(change)

    def reset(self, index: int) -> None:
        def change(state: NodeState) -> None:
            gpu = self._gpu(state, index, allow_lost=True)
            if gpu["processes"]:
                pids = ", ".join(str(p["pid"]) for p in gpu["processes"])
                raise errors.InUse(f"GPU {index} cannot be reset: processes {pids} use it")
            power_cycle(gpu)

        self._change(change)

    # -- GPU instances ------------------------------------------------------------------
    def gpu_instance_profiles(self, index: int) -> list[GpuInstanceProfileInfo]:
        state = self._read()
        gpu = self._gpu(state, index)
        mig = self._mig(state, gpu, need_enabled=False)
        return [
            GpuInstanceProfileInfo(
                nvml_enum=p.nvml_enum,
                id=p.id,
                name=p.name,
                slice_count=p.compute_slices,
                instance_count=p.max_count,
                multiprocessor_count=p.sms,
                copy_engine_count=p.engines.ce,
                decoder_count=p.engines.dec,
                encoder_count=p.engines.enc,
                jpeg_count=p.engines.jpg,
                ofa_count=p.engines.ofa,
                memory_size_mib=p.memory_mib,
            )
            for p in offered_profiles(mig, state["driver_version"])
        ]

    def gpu_instance_possible_placements(self, index: int, profile_id: int) -> list[Placement]:
        state = self._read()
        gpu = self._gpu(state, index)
        mig = self._mig(state, gpu)
        p = self._profile_by_id(mig, gpu, profile_id)
        return [Placement(s, p.slices) for s in p.placements]

    def gpu_instance_remaining_capacity(self, index: int, profile_id: int) -> int:
        state = self._read()
        gpu = self._gpu(state, index)
        mig = self._mig(state, gpu)
        profile = self._profile_by_id(mig, gpu, profile_id)
        placed = self._placed(mig, gpu)
        count = 0
        while self._why_not(state, mig, placed, profile, None) is None:
            start = self._auto_start(mig, placed, profile)
            assert start is not None
            placed.append(PlacedInstance(start, profile))
            count += 1
        return count

    def _why_not(
        self,
        state: NodeState,
        mig: MigCapability,
        placed: list[PlacedInstance],
        profile: GpuInstanceProfile,
        start: int | None,
    ) -> errors.NvmlError | None:
        """The error creating `profile` at `start` (None: where the driver would put it)
        next to `placed` would raise, if any."""
        where = start
        if where is None:
            where = self._auto_start(mig, placed, profile)
        problem = addition_problem(
            mig, Occupancy.of(placed), profile, where, state["driver_version"]
        )
        if problem:
            return _ERROR_FOR[problem.kind](problem.message)
        if where is None:
            return errors.InsufficientResources(f"no free placement for {profile.name}")
        return None

    @staticmethod
    def _auto_start(
        mig: MigCapability, placed: list[PlacedInstance], profile: GpuInstanceProfile
    ) -> int | None:
        used = 0
        for pi in placed:
            used |= pi.mask
        all_masks = [
            instance_mask(s, p.slices) for p in mig.gpu_instance_profiles for s in p.placements
        ]
        best: tuple[int, int] | None = None
        for s in profile.placements:
            m = instance_mask(s, profile.slices)
            if used & m:
                continue
            damage = sum(1 for other in all_masks if not used & other and other & m)
            if best is None or damage < best[0]:
                best = (damage, s)
        return best[1] if best else None

    @staticmethod
    def _gi_id(mig: MigCapability, gpu: GpuState, start: int, size: int) -> int:
        units = mig.placement_units
        if units % size == 0 and start % size == 0:
            return units // size - 1 + start // size
        taken = {gi["id"] for gi in gpu["gpu_instances"]}
        return next(i for i in range(2 * units, 4 * units) if i not in taken)

    def create_gpu_instance(
        self, index: int, profile_id: int, start: int | None = None
    ) -> GpuInstanceInfo:
        def change(state: NodeState) -> GpuInstanceInfo:
            gpu = self._gpu(state, index)
            mig = self._mig(state, gpu)
            profile = self._profile_by_id(mig, gpu, profile_id)
            placed = self._placed(mig, gpu)
            problem = self._why_not(state, mig, placed, profile, start)
            if problem:
                raise problem
            where = start if start is not None else self._auto_start(mig, placed, profile)
            assert where is not None
            gi_id = self._gi_id(mig, gpu, where, profile.slices)
            gpu["gpu_instances"].append(
                GiState(id=gi_id, profile_id=profile.id, start=where, compute_instances=[])
            )
            return GpuInstanceInfo(index, gi_id, profile.id, Placement(where, profile.slices))

        return self._change(change)

    def gpu_instances(self, index: int) -> list[GpuInstanceInfo]:
        state = self._read()
        gpu = self._gpu(state, index)
        mig = self._mig(state, gpu)
        return [
            GpuInstanceInfo(
                index,
                gi["id"],
                gi["profile_id"],
                Placement(gi["start"], mig.profile_by_id(gi["profile_id"]).slices),
            )
            for gi in sorted(gpu["gpu_instances"], key=lambda g: g["id"])
        ]

    def destroy_gpu_instance(self, index: int, gi_id: int) -> None:
        def change(state: NodeState) -> None:
            gpu = self._gpu(state, index)
            self._mig(state, gpu)
            gi = self._gi(gpu, gi_id)
            if gi["compute_instances"]:
                raise errors.InUse(
                    f"GPU {index} GI {gi_id} still has {len(gi['compute_instances'])} compute instances"
                )
            if any(p["gi"] == gi_id for p in gpu["processes"]):
                raise errors.InUse(f"GPU {index} GI {gi_id} has running processes")
            gpu["gpu_instances"].remove(gi)

        self._change(change)

    # -- compute instances --------------------------------------------------------------
    def _ci_profiles(
        self, mig: MigCapability, gi: GiState
    ) -> tuple[GpuInstanceProfile, tuple[ComputeInstanceProfile, ...]]:
        gip = mig.profile_by_id(gi["profile_id"])
        return gip, mig.compute_instance_profiles(gip)

    def compute_instance_profiles(self, index: int, gi_id: int) -> list[ComputeInstanceProfileInfo]:
        state = self._read()
        gpu = self._gpu(state, index)
        mig = self._mig(state, gpu)
        gip, cips = self._ci_profiles(mig, self._gi(gpu, gi_id))
        return [
            ComputeInstanceProfileInfo(
                c.nvml_enum, c.name(gip), c.compute_slices, c.max_count, c.sms
            )
            for c in cips
        ]

    def create_compute_instance(
        self, index: int, gi_id: int, profile_id: int
    ) -> ComputeInstanceInfo:
        def change(state: NodeState) -> ComputeInstanceInfo:
            gpu = self._gpu(state, index)
            mig = self._mig(state, gpu)
            gi = self._gi(gpu, gi_id)
            gip, cips = self._ci_profiles(mig, gi)
            cip = next((c for c in cips if c.nvml_enum == profile_id), None)
            if cip is None:
                raise errors.InvalidArgument(
                    f"GPU {index} GI {gi_id} ({gip.name}): no compute-instance profile {profile_id}"
                )
            same = [c for c in gi["compute_instances"] if c["profile_id"] == profile_id]
            if len(same) >= cip.max_count:
                raise errors.InsufficientResources(
                    f"{cip.name(gip)}: max count {cip.max_count} reached"
                )
            used = 0
            for c in gi["compute_instances"]:
                used |= instance_mask(c["start"], c["size"])
            size = cip.compute_slices
            start = next(
                (
                    s
                    for s in range(0, gip.compute_slices - size + 1, size)
                    if not used & instance_mask(s, size)
                ),
                None,
            )
            if start is None:
                raise errors.InsufficientResources(
                    f"GPU {index} GI {gi_id}: no compute slices left for {cip.name(gip)}"
                )
            ci_id = next(
                i for i in range(64) if i not in {c["id"] for c in gi["compute_instances"]}
            )
            gi["compute_instances"].append(
                CiState(
                    id=ci_id,
                    profile_id=profile_id,
                    start=start,
                    size=size,
                    uuid=mig_device_uuid(state, gpu, gi_id, ci_id),
                )
            )
            return ComputeInstanceInfo(index, gi_id, ci_id, profile_id, Placement(start, size))

        return self._change(change)

    def compute_instances(self, index: int, gi_id: int) -> list[ComputeInstanceInfo]:
        state = self._read()
        gpu = self._gpu(state, index)
        self._mig(state, gpu)
        gi = self._gi(gpu, gi_id)
        return [
            ComputeInstanceInfo(
                index, gi_id, c["id"], c["profile_id"], Placement(c["start"], c["size"])
            )
            for c in gi["compute_instances"]
        ]

    def destroy_compute_instance(self, index: int, gi_id: int, ci_id: int) -> None:
        def change(state: NodeState) -> None:
            gpu = self._gpu(state, index)
            self._mig(state, gpu)
            gi = self._gi(gpu, gi_id)
            ci = next((c for c in gi["compute_instances"] if c["id"] == ci_id), None)
            if ci is None:
                raise errors.NotFound(f"GPU {index} GI {gi_id}: no compute instance {ci_id}")
            if any(p["gi"] == gi_id and p["ci"] == ci_id for p in gpu["processes"]):
                raise errors.InUse(f"GPU {index} GI {gi_id} CI {ci_id} has running processes")
            gi["compute_instances"].remove(ci)

        self._change(change)

    def mig_devices(self, index: int) -> list[MigDeviceInfo]:
        state = self._read()
        gpu = self._gpu(state, index)
        if not gpu["mig_current"]:
            return []
        mig = self._mig(state, gpu)
        out: list[MigDeviceInfo] = []
        for gi in sorted(gpu["gpu_instances"], key=lambda g: g["id"]):
            gip, cips = self._ci_profiles(mig, gi)
            for c in sorted(gi["compute_instances"], key=lambda c: c["id"]):
                cip = next(x for x in cips if x.nvml_enum == c["profile_id"])
                out.append(
                    MigDeviceInfo(
                        parent_index=index,
                        index=len(out),
                        uuid=c["uuid"],
                        gpu_instance_id=gi["id"],
                        compute_instance_id=c["id"],
                        gi_profile_id=gip.id,
                        profile=cip.name(gip),
                        memory_mib=gip.memory_mib,
                        multiprocessor_count=cip.sms,
                        placement=Placement(gi["start"], gip.slices),
                    )
                )
        return out

    # -- topology -----------------------------------------------------------------------
    def topology(self, index: int) -> GpuTopology:
        state = self._read()
        gpu = self._gpu(state, index)
        count = len(state["gpus"])
        half = (count + 1) // 2

        def cpu(i: int) -> int:
            return 0 if i < half else 1

        links = []
        for peer in state["gpus"]:
            if peer["index"] == index:
                continue
            same_model = peer["model"] == gpu["model"]
            links.append(
                GpuLink(
                    peer=peer["index"],
                    level=TopologyLevel.NODE
                    if cpu(peer["index"]) == cpu(index)
                    else TopologyLevel.SYSTEM,
                    nvlinks=NVLINKS_BY_MODEL.get(gpu["model"], 0) if same_model else 0,
                )
            )
        return GpuTopology(
            index=index, minor_number=index, numa_node=cpu(index), links=tuple(links)
        )

    # -- events -------------------------------------------------------------------------
    def wait_for_event(self, timeout_s: float) -> GpuEvent | None:
        deadline = time.monotonic() + timeout_s
        if self._events is None:  # kept between calls: an unchanged file is not read again
            self._events = watch.register(self.store.path)
            weakref.finalize(self, self._events.close)
        changes = self._events
        while True:
            seen = changes.generation  # before the read: a write after it wakes us
            if seen != self._events_read_at:
                self._events_read_at = seen
                state = self._read()
                for ev in state["events"]:
                    if ev["seq"] > self._seen_event:
                        self._seen_event = ev["seq"]
                        self._events_read_at = None  # more may wait in this version
                        gpu = state["gpus"][ev["gpu"]]
                        return GpuEvent(
                            ev["gpu"],
                            gpu["uuid"],
                            EventType(ev["type"]),
                            ev["xid"],
                            ev["gi"],
                            ev["ci"],
                        )
                self._seen_event = max(self._seen_event, state["event_seq"])
            left = deadline - time.monotonic()
            if left <= 0 or not changes.wait(seen, left):
                return None

    def close(self) -> None:
        """Stop watching the state file (the watcher thread ends with its last watch); a
        later event wait watches it again."""
        if self._events is not None:
            self._events.close()
            self._events = None
            self._events_read_at = None

    # -- telemetry ------------------------------------------------------------------------
    # One state read computes everything (kubegpu.nvml.sim.telemetry); the single-value
    # reads pick from it.
    def sample(self, index: int) -> DeviceSample:
        state = self._read()
        return telemetry.device_sample(state, self._gpu(state, index), self.clock())

    @staticmethod
    def _need(value: T | None, what: str, index: int) -> T:
        if value is None:
            raise errors.NotSupported(f"GPU {index}: {what} not reported by this model")
        return value

    def clocks(self, index: int) -> Clocks:
        return self._need(self.sample(index).clocks, "clocks", index)

    def temperature(self, index: int) -> int:
        return self._need(self.sample(index).gpu_temp_c, "GPU temperature", index)

    def memory_temperature(self, index: int) -> int:
        return self._need(self.sample(index).memory_temp_c, "memory temperature", index)

    def power_usage(self, index: int) -> float:
        return self._need(self.sample(index).power_w, "power usage", index)

    def total_energy(self, index: int) -> int:
        return self._need(self.sample(index).energy_mj, "total energy", index)

    def pcie_replay_count(self, index: int) -> int:
        return self._need(self.sample(index).pcie_replays, "PCIe replays", index)

    def encoder_utilization(self, index: int) -> int:
        return self._need(self.sample(index).encoder_percent, "encoder utilization", index)

    def decoder_utilization(self, index: int) -> int:
        return self._need(self.sample(index).decoder_percent, "decoder utilization", index)

    def remapped_rows(self, index: int) -> RemappedRows:
        return self._need(self.sample(index).remapped_rows, "remapped rows", index)

    def nvlink_throughput(self, index: int) -> NvLinkThroughput:
        return self._need(self.sample(index).nvlink, "NVLink throughput", index)

    def _instance(self, index: int, gpu_instance_id: int) -> GpuInstanceSample:
        for gi in self.sample(index).gpu_instances:
            if gi.gpu_instance_id == gpu_instance_id:
                return gi
        raise errors.NotFound(f"GPU {index}: no GPU instance {gpu_instance_id}")

    def activity(self, index: int, gpu_instance_id: int | None = None) -> Activity:
        if gpu_instance_id is None:
            return self.sample(index).activity
        return self._instance(index, gpu_instance_id).activity

    def gpu_instance_memory(self, index: int, gpu_instance_id: int) -> MemoryInfo:
        memory = self._instance(index, gpu_instance_id).memory
        return self._need(memory, "GPU-instance memory", index)
