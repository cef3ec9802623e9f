"""What the pods of a simulated node run on their GPUs, and the trace it leaves on the node.

Every container that was allocated GPUs or MIG devices runs one simulated CUDA process on
each of them: the simulated GPU lists it among its running compute processes (NVML's
view) holding its memory and SMs. A container says how much through its environment
(`KUBEGPU_SIM_GPU_MEMORY_MIB`, `KUBEGPU_SIM_GPU_SM_PERCENT`, per allocated device); without
them the device's synthetic workload sizes apply. A container whose environment names an
MPS pipe directory (`CUDA_MPS_PIPE_DIRECTORY`, which the device plugin sets for an MPS
replica) runs its process as a client of that daemon, as CUDA connects to the daemon it
finds there: the daemon is named by its pipe directory on the node, through the container's
mounts, so a fatal fault reaches its fellow clients only (`kubegpu.nvml.sim.mps`).

The process needs a pid, and a monitor matches a pid to its pod the way it would on a real
node: `/proc/<pid>/cgroup` names the pod's cgroup, which carries the pod UID. The simulated
kubelet writes that file under the node's root (`<root>/proc/<pid>/cgroup`, what a hostPath
`/proc` volume shows a pod on this node), with the path the systemd cgroup driver gives a
container. The pids lie above Linux's largest pid, so they never name a host process.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.nvml.sim.controls import SimWorkload
from kubegpu.sharing.replicas import physical_id
from kubegpu.sim.kubelet.devicemanager import ContainerAllocation
from kubegpu.sim.kubelet.qos import qos_class

log = logging.getLogger(__name__)

ENV_MEMORY = "KUBEGPU_SIM_GPU_MEMORY_MIB"
ENV_SM = "KUBEGPU_SIM_GPU_SM_PERCENT"
PID_BASE = 1 << 23  # above pid_max's ceiling (2**22): never a real process on the host
PID_SPAN = 1 << 20
Json = dict[str, Any]


@dataclass(frozen=True)
class ContainerLoad:
    """One container's simulated CUDA process: the devices it runs on and what it uses."""

    pod_uid: str
    container: str
    qos: str  # the pod's QoS class, as it names the cgroup
    devices: tuple[str, ...]  # GPU / MIG UUIDs (a shared replica's physical device)
    memory_mib: int | None
    sm_percent: int | None
    mps: str | None = None  # the MPS daemon it is a client of: its pipe directory on the node


def _env_int(container: Json, name: str, lo: int, hi: int) -> int | None:
    for var in container.get("env") or []:
        if var.get("name") == name and "value" in var:
            try:
                value = int(str(var["value"]))
            except ValueError:
                log.warning("%s=%r is not a number; using the synthetic figure", name, var["value"])
                return None
            return min(max(value, lo), hi)
    return None


def mps_daemon(container: Json, allocation: ContainerAllocation) -> str | None:
    """The pipe directory, on the node, of the MPS daemon the container's CUDA process
    connects to: the one its environment names (the device plugin's value wins over the
    pod's, as the kubelet merges them), seen through the allocation's mounts; None when
    its environment names none."""
    pipe = allocation.envs.get(nvidia.CUDA_MPS_PIPE_DIRECTORY)
    if pipe is None:
        pipe = next(
            (
                str(var["value"])
                for var in container.get("env") or []
                if var.get("name") == nvidia.CUDA_MPS_PIPE_DIRECTORY and "value" in var
            ),
            None,
        )
    if not pipe:
        return None
    pipe = pipe.rstrip("/") or "/"
    best: tuple[str, str] | None = None
    for container_path, host_path, _ in allocation.mounts:
        inside = container_path.rstrip("/")
        if (pipe == inside or pipe.startswith(inside + "/")) and (
            best is None or len(inside) > len(best[0])
        ):
            best = (inside, host_path.rstrip("/"))
    return pipe if best is None else best[1] + pipe[len(best[0]) :]


def cgroup_qos(pod: Json) -> str:
    """The pod's QoS class as its cgroup is named: `qos.qos_class`, lower-cased."""
    return qos_class(pod.get("spec") or {}).lower()


def container_loads(
    allocations: Mapping[tuple[str, str], ContainerAllocation], pods: Mapping[str, Json]
) -> list[ContainerLoad]:
    """A load per container holding GPUs, in a stable order; pods not known are skipped."""
    out: list[ContainerLoad] = []
    for (uid, name), allocation in sorted(allocations.items()):
        pod = pods.get(uid)
        if pod is None:
            continue
        devices = tuple(
            dict.fromkeys(
                physical_id(d)
                for ids in allocation.devices.values()
                for d in ids
                if d.startswith(("GPU-", "MIG-"))
            )
        )
        if not devices:
            continue
        spec: Json = next(
            (c for c in pod.get("spec", {}).get("containers") or [] if c.get("name") == name), {}
        )
        out.append(
            ContainerLoad(
                uid,
                name,
                cgroup_qos(pod),
                devices,
                _env_int(spec, ENV_MEMORY, 0, 1 << 24),
                _env_int(spec, ENV_SM, 0, 100),
                mps_daemon(spec, allocation),
            )
        )
    return out


def assign_pids(loads: list[ContainerLoad]) -> dict[tuple[str, str], int]:
    """A pid per container, from a hash of its pod UID and name (stable while it runs),
    moved to the next free one on a collision."""
    taken: set[int] = set()
    out: dict[tuple[str, str], int] = {}
    for load in loads:
        digest = hashlib.blake2b(f"{load.pod_uid}/{load.container}".encode(), digest_size=8)
        pid = PID_BASE + int.from_bytes(digest.digest(), "big") % PID_SPAN
        while pid in taken:
            pid = PID_BASE + (pid - PID_BASE + 1) % PID_SPAN
        taken.add(pid)
        out[(load.pod_uid, load.container)] = pid
    return out


def workloads(
    loads: list[ContainerLoad], pids: Mapping[tuple[str, str], int]
) -> dict[str, list[SimWorkload]]:
    """Device UUID -> the processes running on it (`SimControls.set_workloads`)."""
    out: dict[str, list[SimWorkload]] = {}
    for load in loads:
        pid = pids[(load.pod_uid, load.container)]
        for device in load.devices:
            out.setdefault(device, []).append(
                SimWorkload(pid, load.memory_mib, load.sm_percent, load.mps)
            )
    return out


def container_id(pod_uid: str, container: str) -> str:
    return hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()


def cgroup_path(load: ContainerLoad) -> str:
    """The container's cgroup (v2) under the systemd driver, as containerd places it."""
    uid = load.pod_uid.replace("-", "_")
    if load.qos == "guaranteed":
        pod = f"kubepods-pod{uid}.slice"
        parent = "kubepods.slice"
    else:
        pod = f"kubepods-{load.qos}-pod{uid}.slice"
        parent = f"kubepods.slice/kubepods-{load.qos}.slice"
    scope = f"cri-containerd-{container_id(load.pod_uid, load.container)}.scope"
    return f"/{parent}/{pod}/{scope}"


def write_proc(root: Path, loads: list[ContainerLoad], pids: Mapping[tuple[str, str], int]) -> None:
    """`<root>/proc/<pid>/cgroup` for every process, and no directory for a process gone."""
    proc = root / "proc"
    want = {pids[(x.pod_uid, x.container)]: x for x in loads}
    if proc.is_dir():
        for entry in proc.iterdir():
            if entry.name.isdigit() and int(entry.name) >= PID_BASE and int(entry.name) not in want:
                shutil.rmtree(entry, ignore_errors=True)
    for pid, load in want.items():
        path = proc / str(pid) / "cgroup"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = f"0::{cgroup_path(load)}\n"
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
