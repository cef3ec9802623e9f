"""The lab's hands on a simulated node: what a person can do to real GPUs that NVML cannot.

Inject XID errors, make a GPU fall off the bus, flip the display mode, change the driver,
start and stop CUDA processes, mark devices busy, reboot the node. Kept apart from
`SimNvml`, which is only the NVML interface, so node components never reach for these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubegpu.nvml import errors
from kubegpu.nvml.sim.access import SimStateAccess, power_cycle
from kubegpu.nvml.sim.backend import SimNvml
from kubegpu.nvml.sim.state import MAX_EVENTS, EventState, NodeState, ProcState, WorkloadState
from kubegpu.nvml.types import EventType

XID_FALLEN_OFF_BUS = 79


@dataclass(frozen=True)
class SimWorkload:
    """A pod's simulated CUDA process on one allocated device (`SimControls.set_workloads`)."""

    pid: int
    used_memory_mib: int | None = None  # None: the synthetic workload's size
    sm_percent: int | None = None
    mps: str | None = None  # the MPS daemon (its pipe directory) it is a client of

    def state(self) -> WorkloadState:
        out = WorkloadState(
            pid=self.pid, used_memory_mib=self.used_memory_mib, sm_percent=self.sm_percent
        )
        if self.mps is not None:
            out["mps"] = self.mps
        return out


class SimControls(SimStateAccess):
    """Faults, display mode, driver, processes, busy devices and reboots of one sim node."""

    def __init__(self, path: Path | str, clock: Callable[[], float] | None = None) -> None:
        super().__init__(path, clock)

    @classmethod
    def of(cls, nvml: SimNvml) -> SimControls:
        """Controls for the node `nvml` opens, booking changes at that handle's clock."""
        # late-bound: a test may pin nvml.clock after making the controls
        return cls(nvml.store.path, clock=lambda: nvml.clock())  # noqa: PLW0108

    @staticmethod
    def _emit(
        state: NodeState, gpu: int, kind: EventType, xid: int, gi: int | None, ci: int | None
    ) -> None:
        state["event_seq"] += 1
        state["events"].append(
            EventState(seq=state["event_seq"], gpu=gpu, type=kind.value, xid=xid, gi=gi, ci=ci)
        )
        del state["events"][:-MAX_EVENTS]

    def raw_state(self) -> NodeState:
        return self.store.read()

    def inject_xid(
        self, index: int, xid: int, gi: int | None = None, ci: int | None = None
    ) -> None:
        def change(state: NodeState) -> None:
            self._gpu(state, index, allow_lost=True)
            self._emit(state, index, EventType.XID, xid, gi, ci)

        self._change(change)

    def lose_gpu(self, index: int) -> None:
        """The GPU falls off the bus: Xid 79, then every call on it raises GpuIsLost."""

        def change(state: NodeState) -> None:
            gpu = self._gpu(state, index, allow_lost=True)
            gpu["lost"] = True
            self._emit(state, index, EventType.GPU_LOST, XID_FALLEN_OFF_BUS, None, None)

        self._change(change)

    def set_display_mode(self, index: int, mode: str) -> None:
        if mode not in {"graphics", "compute"}:
            raise errors.InvalidArgument(f"display mode {mode!r} (use graphics or compute)")

        def change(state: NodeState) -> None:
            gpu = self._gpu(state, index)
            if gpu["mig_current"] and mode == "graphics":
                raise errors.InUse(f"GPU {index}: disable MIG before switching to graphics mode")
            gpu["display_mode"] = mode

        self._change(change)

    def set_driver_version(self, version: str) -> None:
        def change(state: NodeState) -> None:
            state["driver_version"] = version

        self._change(change)

    def start_process(
        self,
        index: int,
        pid: int,
        used_memory_mib: int,
        *,
        sm_percent: int = 50,
        mig_device: str | None = None,
    ) -> None:
        """A CUDA process starts on a GPU or on the MIG device with UUID `mig_device`."""

        def change(state: NodeState) -> None:
            gpu = self._gpu(state, index)
            gi_id = ci_id = None
            if mig_device is not None:
                for gi in gpu["gpu_instances"]:
                    for c in gi["compute_instances"]:
                        if c["uuid"] == mig_device:
                            gi_id, ci_id = gi["id"], c["id"]
                if gi_id is None:
                    raise errors.NotFound(f"GPU {index}: no MIG device {mig_device}")
            gpu["processes"].append(
                ProcState(
                    pid=pid,
                    used_memory_mib=used_memory_mib,
                    sm_percent=sm_percent,
                    gi=gi_id,
                    ci=ci_id,
                )
            )

        self._change(change)

    def stop_process(self, index: int, pid: int) -> None:
        def change(state: NodeState) -> None:
            gpu = self._gpu(state, index, allow_lost=True)
            gpu["processes"] = [p for p in gpu["processes"] if p["pid"] != pid]

        self._change(change)

    def reboot(self) -> None:
        """Node reboot: pending MIG modes take effect; instances, processes and faults clear."""

        def change(state: NodeState) -> None:
            state["boot_id"] += 1
            for gpu in state["gpus"]:
                power_cycle(gpu)

        self._change(change)

    def set_busy(self, devices: Mapping[str, int]) -> None:
        """The devices (GPU or MIG UUIDs) allocated to pods, and how many allocations hold
        each; set by the simulated kubelet. A busy device runs a synthetic workload."""
        marks = {uuid: int(n) for uuid, n in sorted(devices.items()) if n > 0}

        def change(state: NodeState) -> None:
            state["busy"] = marks
            state.pop("workloads", None)

        current = self.store.read()
        if current.get("busy", {}) != marks or current.get("workloads"):
            self._change(change)

    def set_workloads(self, devices: Mapping[str, Sequence[SimWorkload]]) -> None:
        """Like `set_busy`, naming the pod process behind each allocation: NVML lists it as
        a running compute process holding its memory (the pod's own figures, or the
        synthetic workload's), which is what lets a monitor tell pods on one GPU apart. A
        process naming an MPS daemon is its client (`kubegpu.nvml.sim.mps`)."""
        marks = {uuid: len(ws) for uuid, ws in sorted(devices.items()) if ws}
        named = {uuid: [w.state() for w in ws] for uuid, ws in sorted(devices.items()) if ws}

        def change(state: NodeState) -> None:
            state["busy"] = marks
            state["workloads"] = named

        current = self.store.read()
        if current.get("busy", {}) != marks or current.get("workloads", {}) != named:
            self._change(change)
