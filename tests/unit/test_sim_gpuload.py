"""What pods run on a simulated node's GPUs: one simulated CUDA process per container and
allocated device, listed by the simulated GPU with its memory, and traceable to its pod
through `<root>/proc/<pid>/cgroup`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubegpu.exporter.processes import ProcCgroups
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.nvml.sim.controls import SimWorkload
from kubegpu.nvml.sim.mps import SimMps
from kubegpu.sim.kubelet.devicemanager import ContainerAllocation
from kubegpu.sim.kubelet.gpuload import (
    ENV_MEMORY,
    ENV_SM,
    PID_BASE,
    assign_pids,
    cgroup_qos,
    container_loads,
    mps_daemon,
    workloads,
    write_proc,
)


def pod(uid: str, env: dict[str, str] | None = None, **resources: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                    "resources": resources,
                }
            ]
        },
    }


def held(*ids: str) -> ContainerAllocation:
    return ContainerAllocation(devices={"nvidia.com/gpu": list(ids)})


def test_each_container_runs_one_process_per_device_with_the_figures_it_asks_for() -> None:
    pods = {
        "u1": pod("u1", {ENV_MEMORY: "2048", ENV_SM: "30"}),
        "u2": pod("u2", {ENV_MEMORY: "lots"}),  # not a number: the synthetic size
        "u3": pod("u3"),
    }
    allocations = {
        ("u1", "main"): held("GPU-a::0"),
        ("u2", "main"): held("GPU-a::1", "GPU-b::0"),
        ("u3", "main"): ContainerAllocation(),  # no GPU: no process
        ("gone", "main"): held("GPU-c"),  # a pod the node no longer runs
    }
    loads = container_loads(allocations, pods)
    assert [(x.pod_uid, x.devices, x.memory_mib, x.sm_percent) for x in loads] == [
        ("u1", ("GPU-a",), 2048, 30),
        ("u2", ("GPU-a", "GPU-b"), None, None),
    ]
    pids = assign_pids(loads)
    assert pids == assign_pids(loads)  # stable while the pods run
    assert len(set(pids.values())) == 2 and min(pids.values()) >= PID_BASE
    by_device = workloads(loads, pids)
    assert by_device["GPU-a"] == [
        SimWorkload(pids[("u1", "main")], 2048, 30),
        SimWorkload(pids[("u2", "main")], None, None),
    ]
    assert by_device["GPU-b"] == [SimWorkload(pids[("u2", "main")], None, None)]


def test_a_container_whose_env_names_an_mps_pipe_is_a_client_of_that_daemon() -> None:
    pipe = "/mps/nvidia.com/gpu/pipe"
    mps = ContainerAllocation(
        devices={"nvidia.com/gpu": ["GPU-a::0"]},
        envs={"CUDA_MPS_PIPE_DIRECTORY": pipe},
        mounts=[(pipe, "/run/nvidia/mps/nvidia.com/gpu/pipe", False), ("/dev/shm", "/s", False)],
    )
    allocations = {("u1", "main"): mps, ("u2", "main"): held("GPU-a::1")}
    loads = container_loads(allocations, {"u1": pod("u1"), "u2": pod("u2")})
    # the daemon is named by its pipe directory on the node, seen through the mounts
    assert [x.mps for x in loads] == ["/run/nvidia/mps/nvidia.com/gpu/pipe", None]
    pids = assign_pids(loads)
    assert workloads(loads, pids)["GPU-a"] == [
        SimWorkload(pids[("u1", "main")], mps="/run/nvidia/mps/nvidia.com/gpu/pipe"),
        SimWorkload(pids[("u2", "main")]),
    ]


def test_whole_gpu_mps_clients_among_the_pods_fall_together(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "node.json", "l4:1")
    uuid = nvml.device(0).uuid
    lab = SimMps.of(nvml)
    pipe = "/run/nvidia/mps/nvidia.com/gpu/pipe"
    lab.set_workloads({uuid: [SimWorkload(1, mps=pipe), SimWorkload(2), SimWorkload(3, mps=pipe)]})
    assert lab.clients(0, pipe) == [1, 3]
    assert lab.client_fault(0, 3).ended == (3, 1)  # one daemon's clients share its faults
    assert [p.pid for p in nvml.processes(0)] == [2]  # the pod that is no client runs on


def test_the_mps_pipe_resolves_through_the_deepest_mount_else_as_named() -> None:
    env = {"CUDA_MPS_PIPE_DIRECTORY": "/mps/r/MIG-1/pipe/"}
    mounts = [("/mps", "/host", False), ("/mps/r/MIG-1", "/run/mps/r/MIG-1/", False)]
    assert mps_daemon({}, ContainerAllocation(envs=env, mounts=mounts)) == "/run/mps/r/MIG-1/pipe"
    assert mps_daemon({}, ContainerAllocation(envs=env)) == "/mps/r/MIG-1/pipe"
    # no mount prefix by mere spelling: /mpsx is not under /mps
    other = ContainerAllocation(envs={"CUDA_MPS_PIPE_DIRECTORY": "/mpsx/p"}, mounts=mounts)
    assert mps_daemon({}, other) == "/mpsx/p"
    # the pod's own env names a daemon when the plugin named none; the plugin's value wins
    spec = pod("u", {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/pipe"})["spec"]["containers"][0]
    assert mps_daemon(spec, ContainerAllocation()) == "/tmp/pipe"
    assert mps_daemon(spec, ContainerAllocation(envs=env)) == "/mps/r/MIG-1/pipe"
    assert mps_daemon(pod("u")["spec"]["containers"][0], ContainerAllocation()) is None


def test_qos_classes_name_the_cgroup_as_the_kubelet_does() -> None:
    assert cgroup_qos(pod("u")) == "besteffort"
    assert cgroup_qos(pod("u", requests={"cpu": "1"})) == "burstable"
    both = {"cpu": "1", "memory": "1Gi"}
    assert cgroup_qos(pod("u", limits=both)) == "guaranteed"
    assert cgroup_qos(pod("u", limits=both, requests={"cpu": "500m"})) == "burstable"


def test_proc_files_follow_the_processes(tmp_path: Path) -> None:
    uid = "0f3c1d2e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
    allocations = {(uid, "main"): held("GPU-a")}
    loads = container_loads(allocations, {uid: pod(uid)})
    pids = assign_pids(loads)
    write_proc(tmp_path, loads, pids)
    pid = pids[(uid, "main")]
    assert ProcCgroups(tmp_path / "proc").pod_uid(pid) == uid
    write_proc(tmp_path, [], {})  # the pod went
    assert not (tmp_path / "proc" / str(pid)).exists()


def test_the_simulated_gpu_lists_pod_processes_with_their_memory(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "node.json", "l4:1;seed=gpuload")
    lab = SimControls.of(nvml)
    uuid = nvml.device(0).uuid
    lab.set_workloads({uuid: [SimWorkload(9000001, 3000, 25), SimWorkload(9000002)]})
    procs = {p.pid: p.used_memory_mib for p in nvml.processes(0)}
    assert procs[9000001] == 3000
    assert 0 < procs[9000002] < nvml.device(0).memory_total_mib  # the synthetic size
    assert nvml.memory(0).used_mib == sum(procs.values())
    samples = {u.pid: u.sm_percent for u in nvml.process_utilization(0)}
    # the synthetic process's share wobbles over time; with it the GPU may be oversubscribed
    assert 0 < samples[9000001] <= 25 and samples[9000002] > 0
    assert sum(samples.values()) <= 101  # 100% shared out, each share rounded
    lab.set_workloads({uuid: [SimWorkload(9000001, 3000, 25), SimWorkload(9000002, 100, 30)]})
    samples = {u.pid: u.sm_percent for u in nvml.process_utilization(0)}
    assert samples == {9000001: 25, 9000002: 30}  # room for both: the figures as given
    lab.set_workloads({uuid: [SimWorkload(9000001, 3000, 70), SimWorkload(9000002, 100, 80)]})
    samples = {u.pid: u.sm_percent for u in nvml.process_utilization(0)}
    assert samples == {9000001: 47, 9000002: 53}  # 150% asked for: scaled down in proportion
    lab.set_busy({uuid: 1})  # anonymous load: no process to name
    assert nvml.processes(0) == []
    lab.set_workloads({})
    assert nvml.memory(0).used_mib == 0 and nvml.process_utilization(0) == []
