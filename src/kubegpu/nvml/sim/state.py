"""The simulated node's GPU state: one JSON file, changed only under its lock.

Every process of one simulated node (device plugin, MIG manager, exporter...) opens the
same file, so they all see one set of GPUs, as processes on a real node share hardware.
Writes go to a temporary file and are renamed into place, so a crash mid-write never
leaves a torn state.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from filelock import FileLock

from kubegpu.base.loader import excerpt
from kubegpu.nvml.sim import watch
from kubegpu.nvml.sim.spec import NodeSpec

STATE_VERSION = 1


class CiState(TypedDict):
    id: int
    profile_id: int
    start: int
    size: int
    uuid: str


class GiState(TypedDict):
    id: int
    profile_id: int
    start: int
    compute_instances: list[CiState]


class ProcState(TypedDict):
    pid: int
    used_memory_mib: int
    sm_percent: int
    gi: int | None
    ci: int | None
    mps: NotRequired[str]  # the MPS daemon (its pipe directory) the process is a client of


class WorkloadState(TypedDict):
    """A pod's simulated CUDA process on a device it was allocated (set by the sim kubelet):
    its pid on the node and, when the pod says, its memory and SM use (None: the synthetic
    workload's own figures)."""

    pid: int
    used_memory_mib: int | None
    sm_percent: int | None
    mps: NotRequired[str]  # the MPS daemon (its pipe directory) the process is a client of


class GpuState(TypedDict):
    index: int
    model: str
    uuid: str
    pci_bus_id: str
    mig_current: bool
    mig_pending: bool
    display_mode: str
    lost: bool
    gpu_instances: list[GiState]
    processes: list[ProcState]
    # telemetry bookkeeping (absent in older files): energy and NVLink traffic booked up
    # to `energy_at`
    energy_mj: NotRequired[float]
    energy_at: NotRequired[float]
    nvlink_tx_kib: NotRequired[float]
    nvlink_rx_kib: NotRequired[float]


class EventState(TypedDict):
    seq: int
    gpu: int
    type: str
    xid: int
    gi: int | None
    ci: int | None


class NodeState(TypedDict):
    version: int
    spec: str
    driver_version: str
    cuda_driver_version: int
    boot_id: int
    serial: int  # bumped on every change; makes MIG device UUIDs unique per creation
    event_seq: int
    events: list[EventState]
    gpus: list[GpuState]
    # GPU or MIG device UUID -> how many pod allocations hold it (set by the sim kubelet)
    busy: NotRequired[dict[str, int]]
    # GPU or MIG device UUID -> the pod processes behind its busy marks, in replica order
    workloads: NotRequired[dict[str, list[WorkloadState]]]


MAX_EVENTS = 256
# How often a waiting reader retries the lock. Holders keep it for well under a
# millisecond, so filelock's default (50 ms) would turn every collision into a stall.
LOCK_POLL_S = 0.001


def _uuid(seed: str, *parts: object) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, "kubegpu-sim:" + seed + ":" + ":".join(map(str, parts)))


def new_state(spec: NodeSpec, seed: str) -> NodeState:
    gpus: list[GpuState] = []
    for i, model in enumerate(spec.models):
        needs_switch = bool(model.mig and model.mig.display_mode_compute_required)
        display = spec.display or ("graphics" if needs_switch else "compute")
        gpus.append(
            GpuState(
                index=i,
                model=model.id,
                uuid=f"GPU-{_uuid(seed, 'gpu', i)}",
                pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                mig_current=spec.mig and model.mig_capable,
                mig_pending=spec.mig and model.mig_capable,
                display_mode=display,
                lost=False,
                gpu_instances=[],
                processes=[],
                energy_mj=0.0,
                energy_at=time.time(),
            )
        )
    major, _, minor = spec.cuda.partition(".")
    return NodeState(
        version=STATE_VERSION,
        spec=str(spec),
        driver_version=spec.driver,
        cuda_driver_version=int(major) * 1000 + int(minor) * 10,
        boot_id=1,
        serial=0,
        event_seq=0,
        events=[],
        gpus=gpus,
    )


def mig_device_uuid(state: NodeState, gpu: GpuState, gi: int, ci: int) -> str:
    return f"MIG-{_uuid(gpu['uuid'], state['boot_id'], state['serial'], gi, ci)}"


class StateFile:
    """A state file plus its lock. `transaction()` yields the state for reading or changing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path) + ".lock")

    def exists(self) -> bool:
        return self.path.exists()

    def create(self, spec: NodeSpec) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if not self.path.exists():
                seed = spec.seed or str(self.path.resolve())
                self._write(new_state(spec, seed))

    def read(self) -> NodeState:
        """The state as last written. No lock: writers replace the file by rename, so a
        reader sees one whole version or the next, never a torn one."""
        return self._read()

    @contextmanager
    def transaction(self) -> Iterator[NodeState]:
        """Hold the lock; write the state back if the block finishes without an exception."""
        with self._lock.acquire(poll_interval=LOCK_POLL_S):
            state = self._read()
            yield state
            state["serial"] += 1
            self._write(state)

    def _read(self) -> NodeState:
        try:
            data: Any = json.loads(self.path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"sim GPU state {self.path} does not exist") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"sim GPU state {self.path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"sim GPU state {self.path}: expected a JSON object, got {excerpt(data)}"
            )
        if data.get("version") != STATE_VERSION:
            raise ValueError(
                f"sim GPU state {self.path}: unsupported format "
                f"(version {excerpt(data.get('version'))})"
            )
        state: NodeState = data  # type: ignore[assignment]
        return state

    def _write(self, state: NodeState) -> None:
        # Only a lock holder writes, so any temporary file still here belongs to a writer
        # that was killed between creating and renaming it: remove it.
        for stray in self.path.parent.glob(glob.escape(self.path.name) + ".*.tmp"):
            stray.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                # compact: the C encoder (an indent would take the pure-Python one, 10x slower)
                f.write(json.dumps(state, separators=(",", ":")))
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        watch.changed(self.path)
