"""Which pod a GPU process belongs to, and what each pod uses on a shared device.

NVML lists a GPU's running compute processes by host pid, with the framebuffer each holds,
and samples each process's utilisation. A pid is matched to its pod the way a node agent
does it on a real node: `/proc/<pid>/cgroup` names the container's cgroup, and the kubelet
puts the pod UID in it (`kubepods-besteffort-pod<uid>.slice` under the systemd driver,
`kubepods/besteffort/pod<uid>` under cgroupfs). The exporter reads that file under
`--proc-root` (the host's `/proc`, mounted into its pod); a simulated node writes the same
files under its root (`kubegpu.sim.kubelet.gpuload`), so one code path serves both.

`usage_by_pod` then sums, per series entity (a GPU, or a MIG GPU instance) and per pod,
the memory its processes hold and their utilisation samples: what the exporter reports
with `attribution="process"`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kubegpu.exporter.pods import EntityKey
from kubegpu.nvml.types import ProcessInfo, ProcessUtilization

log = logging.getLogger(__name__)

_HEX = "[0-9a-fA-F]"
_POD_UID = re.compile(
    rf"pod({_HEX}{{8}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{12}})"
)
MAX_CGROUP_BYTES = 64 * 1024

PodKey = tuple[str, str]  # (namespace, pod name)


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in a `/proc/<pid>/cgroup` file (either cgroup driver, v1 or v2); None
    for a process outside any pod."""
    for line in text.splitlines():
        path = line.rsplit(":", 1)[-1]
        if "kubepods" not in path:
            continue
        found = _POD_UID.findall(path)
        if found:
            return str(found[-1]).replace("_", "-").lower()
    return None


class ProcessOwners(Protocol):
    """The seam: a host pid -> the UID of the pod it runs in (None: not a pod's)."""

    def pod_uid(self, pid: int) -> str | None: ...


class ProcCgroups:
    """Pod UIDs from `<proc_root>/<pid>/cgroup` (the host's /proc, or a simulated node's)."""

    def __init__(self, proc_root: Path) -> None:
        self.proc_root = proc_root

    def pod_uid(self, pid: int) -> str | None:
        try:
            with open(self.proc_root / str(pid) / "cgroup", "rb") as f:
                data = f.read(MAX_CGROUP_BYTES)
        except OSError:  # the process ended, or is not visible from here
            return None
        return pod_uid_from_cgroup(data.decode("utf-8", "replace"))


@dataclass(frozen=True)
class Usage:
    """What one pod's processes use on one entity. A utilisation is None where the GPU gives
    no per-process samples (MIG instances, older GPUs): only the GPU's value exists."""

    memory_mib: int = 0
    sm_percent: int | None = None
    memory_percent: int | None = None
    encoder_percent: int | None = None
    decoder_percent: int | None = None


@dataclass(frozen=True)
class GpuProcesses:
    """One GPU's processes and, when the GPU gives them, their utilisation samples."""

    index: int
    processes: tuple[ProcessInfo, ...]
    samples: tuple[ProcessUtilization, ...] | None  # None: not supported on this GPU


@dataclass(frozen=True)
class EntityUsage:
    pods: dict[PodKey, Usage]
    sampled: bool  # the entity has per-process utilisation samples

    def of(self, pod: PodKey) -> Usage:
        """A pod's usage; a pod holding the device with no process there uses nothing."""
        zero = 0 if self.sampled else None
        return self.pods.get(pod, Usage(0, zero, zero, zero, zero))


def _add(a: int | None, b: int) -> int:
    return (a or 0) + b


def usage_by_pod(
    gpus: Sequence[GpuProcesses],
    entities: frozenset[EntityKey],
    owner: Callable[[int], str | None],
    pods_by_uid: Mapping[str, PodKey],
) -> dict[EntityKey, EntityUsage]:
    """Per entity, each pod's processes summed; processes of no known pod are left out."""
    out: dict[EntityKey, EntityUsage] = {}
    for gpu in gpus:
        by_pid = {s.pid: s for s in gpu.samples or ()}
        gpu_key: EntityKey = ("gpu", gpu.index)
        if gpu_key in entities:
            out[gpu_key] = EntityUsage({}, gpu.samples is not None)
        for p in gpu.processes:
            key: EntityKey = (
                ("gi", gpu.index, p.gpu_instance_id) if p.gpu_instance_id is not None else gpu_key
            )
            if key not in entities:
                continue
            entity = out.setdefault(key, EntityUsage({}, False))
            uid = owner(p.pid)
            pod = pods_by_uid.get(uid) if uid is not None else None
            if pod is None:
                continue
            u = entity.pods.get(pod, Usage())
            sample = by_pid.get(p.pid) if entity.sampled else None
            entity.pods[pod] = Usage(
                u.memory_mib + p.used_memory_mib,
                _add(u.sm_percent, sample.sm_percent if sample else 0) if entity.sampled else None,
                _add(u.memory_percent, sample.memory_percent if sample else 0)
                if entity.sampled
                else None,
                _add(u.encoder_percent, sample.encoder_percent if sample else 0)
                if entity.sampled
                else None,
                _add(u.decoder_percent, sample.decoder_percent if sample else 0)
                if entity.sampled
                else None,
            )
    return out
