"""MPS on the simulated GPU: clients of MPS daemons, and how far a fault reaches.

A CUDA process that connects to an MPS daemon shares that daemon's server context on its
device, so a fatal fault of one client ends every client of the same daemon on that device.
A MIG instance is its own fault domain: a fault inside one never reaches the processes of
another instance, even on the same GPU. kubegpu runs one MPS daemon per MIG instance
(`sharing.mps.migInstances`), so an MPS client's fault stays inside its instance. These rules
are `fault_reach`; `SimMps` is the lab's hands that connect clients and inject the faults.

The clients are the processes the lab connects and the pods' processes the simulated kubelet
records (`SimControls.set_workloads`): a pod whose environment names an MPS pipe directory
is a client of that daemon (`kubegpu.sim.kubelet.gpuload`). A fault ends a pod's process until the
kubelet next records the pods' processes, as a container that crashed is restarted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubegpu.nvml import errors
from kubegpu.nvml.sim import telemetry
from kubegpu.nvml.sim.backend import SimNvml
from kubegpu.nvml.sim.controls import SimControls
from kubegpu.nvml.sim.state import GpuState, NodeState, ProcState
from kubegpu.nvml.types import EventType

XID_MMU_FAULT = 31  # what a client's illegal address raises: an application error XID


@dataclass(frozen=True)
class Fault:
    """What one injected fault did: where it happened and which processes it ended."""

    gpu: int
    gi: int | None
    ci: int | None
    xid: int
    ended: tuple[int, ...]  # pids, the faulting process first


def _device(p: ProcState) -> tuple[int | None, int | None]:
    return (p["gi"], p["ci"])


def _uuids(gpu: GpuState) -> set[str]:
    return {gpu["uuid"]} | {
        c["uuid"] for gi in gpu["gpu_instances"] for c in gi["compute_instances"]
    }


def gpu_processes(state: NodeState, gpu: GpuState) -> list[ProcState]:
    """Every process on the GPU, as NVML lists them: the lab's, then the pods' processes
    the simulated kubelet recorded, each on its device and with the daemon it is a client of."""
    where = {
        c["uuid"]: (gi["id"], c["id"])
        for gi in gpu["gpu_instances"]
        for c in gi["compute_instances"]
    }
    named = state.get("workloads", {})
    out = list(gpu["processes"])
    for p in telemetry.pod_processes(state, gpu, None):
        gi, ci = where.get(p.uuid, (None, None))
        proc = ProcState(
            pid=p.pid,
            used_memory_mib=p.used_memory_mib,
            sm_percent=round(p.sm_percent),
            gi=gi,
            ci=ci,
        )
        server = next((w.get("mps") for w in named.get(p.uuid, []) if w["pid"] == p.pid), None)
        if server is not None:
            proc["mps"] = server
        out.append(proc)
    return out


def client_fault_reach(processes: Sequence[ProcState], pid: int) -> tuple[int, ...]:
    """The pids a fatal fault of process `pid` ends: every client of its MPS daemon on the
    same device (MIG device or whole GPU), or only itself when it is not an MPS client."""
    me = next((p for p in processes if p["pid"] == pid), None)
    if me is None:
        raise errors.NotFound(f"no process {pid}")
    server = me.get("mps")
    if server is None:
        return (pid,)
    others = [
        p["pid"]
        for p in processes
        if p["pid"] != pid and p.get("mps") == server and _device(p) == _device(me)
    ]
    return (pid, *others)


def instance_fault_reach(processes: Sequence[ProcState], gi: int) -> tuple[int, ...]:
    """The pids a fatal fault of MIG GPU instance `gi` ends: its own processes, MPS clients
    or not; the other instances' processes are isolated from it."""
    return tuple(p["pid"] for p in processes if p["gi"] == gi)


class SimMps(SimControls):
    """MPS clients on a simulated node, and faults of a client or of a MIG instance."""

    @classmethod
    def of(cls, nvml: SimNvml) -> SimMps:
        """MPS controls for the node `nvml` opens, booking changes at that handle's clock."""
        return cls(nvml.store.path, clock=lambda: nvml.clock())  # noqa: PLW0108

    @staticmethod
    def _device_of(
        gpu: GpuState, index: int, mig_device: str | None
    ) -> tuple[int | None, int | None]:
        if mig_device is None:
            return (None, None)
        for gi in gpu["gpu_instances"]:
            for ci in gi["compute_instances"]:
                if ci["uuid"] == mig_device:
                    return (gi["id"], ci["id"])
        raise errors.NotFound(f"GPU {index}: no MIG device {mig_device}")

    def connect(
        self,
        index: int,
        pid: int,
        server: str,
        used_memory_mib: int,
        *,
        mig_device: str | None = None,
        sm_percent: int = 10,
    ) -> None:
        """Process `pid` starts as a client of the MPS daemon `server` (its pipe directory)
        on GPU `index`, or on its MIG device `mig_device`. A daemon serves one device: a
        client of the same daemon on another device is refused."""

        def change(state: NodeState) -> None:
            gpu = self._gpu(state, index)
            gi, ci = self._device_of(gpu, index, mig_device)
            for p in gpu_processes(state, gpu):
                if p.get("mps") == server and _device(p) != (gi, ci):
                    raise errors.InvalidArgument(
                        f"MPS daemon {server} serves GPU {index} instance {p['gi']}/{p['ci']}, "
                        f"not {gi}/{ci}"
                    )
            gpu["processes"].append(
                ProcState(
                    pid=pid, used_memory_mib=used_memory_mib, sm_percent=sm_percent, gi=gi, ci=ci
                )
            )
            gpu["processes"][-1]["mps"] = server

        self._change(change)

    def clients(self, index: int, server: str | None = None) -> list[int]:
        """The pids of the MPS clients on GPU `index` (of daemon `server` when given), the
        lab's and the pods'."""
        state = self.store.read()
        gpu = self._gpu(state, index, allow_lost=True)
        return [
            p["pid"]
            for p in gpu_processes(state, gpu)
            if p.get("mps") is not None and server in (None, p.get("mps"))
        ]

    def client_fault(self, index: int, pid: int, xid: int = XID_MMU_FAULT) -> Fault:
        """Process `pid` hits a fatal fault: it and the clients `client_fault_reach` names
        end, and NVML reports the XID on its device."""

        def change(state: NodeState) -> Fault:
            gpu = self._gpu(state, index)
            processes = gpu_processes(state, gpu)
            ended = client_fault_reach(processes, pid)
            me = next(p for p in processes if p["pid"] == pid)
            gi, ci = _device(me)
            return self._end(state, gpu, Fault(index, gi, ci, xid, ended))

        return self._change(change)

    def instance_fault(self, index: int, gi: int, xid: int = XID_MMU_FAULT) -> Fault:
        """MIG GPU instance `gi` of GPU `index` hits a fatal fault: its processes end."""

        def change(state: NodeState) -> Fault:
            gpu = self._gpu(state, index)
            if not any(g["id"] == gi for g in gpu["gpu_instances"]):
                raise errors.NotFound(f"GPU {index}: no GPU instance {gi}")
            ended = instance_fault_reach(gpu_processes(state, gpu), gi)
            return self._end(state, gpu, Fault(index, gi, None, xid, ended))

        return self._change(change)

    def _end(self, state: NodeState, gpu: GpuState, fault: Fault) -> Fault:
        gpu["processes"] = [p for p in gpu["processes"] if p["pid"] not in fault.ended]
        # a pod's process ends with its allocation's load; the allocation itself stays
        busy = state.get("busy", {})
        named = state.get("workloads", {})
        for uuid in _uuids(gpu) & set(named):
            left = [w for w in named[uuid] if w["pid"] not in fault.ended]
            gone = len(named[uuid]) - len(left)
            if gone:
                named[uuid] = left
                busy[uuid] = busy.get(uuid, 0) - gone
                if busy[uuid] <= 0:
                    del busy[uuid]
                if not left:
                    del named[uuid]
        self._emit(state, fault.gpu, EventType.XID, fault.xid, fault.gi, fault.ci)
        return fault
