"""Per-pod attribution of GPU processes: a pid's pod from its cgroup, each pod's processes
summed per series entity, and the isolation annotation exported as metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.exporter.isolation import render
from kubegpu.exporter.poddirectory import PodMeta
from kubegpu.exporter.pods import EntityKey
from kubegpu.exporter.processes import (
    GpuProcesses,
    ProcCgroups,
    Usage,
    pod_uid_from_cgroup,
    usage_by_pod,
)
from kubegpu.nvml.types import ProcessInfo, ProcessUtilization
from kubegpu.sharing.isolation import Isolation, Method
from kubegpu.sim.kubelet.gpuload import ContainerLoad, cgroup_path

UID = "0f3c1d2e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v2, systemd driver (containerd, CRI-O)
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        "0f3c1d2e_5a6b_4c7d_8e9f_0a1b2c3d4e5f.slice/cri-containerd-abc.scope\n",
        # guaranteed pods sit right under kubepods
        "0::/kubepods.slice/kubepods-pod0f3c1d2e_5a6b_4c7d_8e9f_0a1b2c3d4e5f.slice/crio-1.scope",
        # cgroup v1, cgroupfs driver: the pod directory on every hierarchy
        "12:memory:/kubepods/burstable/pod0f3c1d2e-5a6b-4c7d-8e9f-0a1b2c3d4e5f/3f2a\n"
        "11:cpu,cpuacct:/kubepods/burstable/pod0f3c1d2e-5a6b-4c7d-8e9f-0a1b2c3d4e5f/3f2a\n",
    ],
)
def test_the_pod_uid_is_read_from_either_cgroup_driver(text: str) -> None:
    assert pod_uid_from_cgroup(text) == UID


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/containerd.service\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "0::/\n",
        "",
    ],
)
def test_a_process_outside_any_pod_has_no_pod(text: str) -> None:
    assert pod_uid_from_cgroup(text) is None


def test_the_simulated_kubelet_leaves_what_a_real_node_would(tmp_path: Path) -> None:
    for qos in ("besteffort", "burstable", "guaranteed"):
        load = ContainerLoad(UID, "main", qos, ("GPU-1",), None, None)
        assert pod_uid_from_cgroup(f"0::{cgroup_path(load)}\n") == UID
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").write_text(f"0::{cgroup_path(load)}\n")
    owners = ProcCgroups(tmp_path)
    assert owners.pod_uid(77) == UID
    assert owners.pod_uid(78) is None  # gone, or not visible from here


ENTITIES: frozenset[EntityKey] = frozenset({("gpu", 0), ("gi", 1, 3), ("gi", 1, 5)})
OWNERS = {10: "uid-a", 11: "uid-a", 20: "uid-b", 30: None, 40: "uid-c"}
PODS = {"uid-a": ("ns", "a"), "uid-b": ("ns", "b"), "uid-c": ("ns", "c")}


def test_each_pod_gets_its_own_processes_summed_per_entity() -> None:
    shared = GpuProcesses(
        0,
        (ProcessInfo(10, 1000), ProcessInfo(11, 500), ProcessInfo(20, 4000), ProcessInfo(30, 99)),
        (
            ProcessUtilization(10, 10, 4),
            ProcessUtilization(11, 5, 1),
            ProcessUtilization(20, 40, 9),
        ),
    )
    mig = GpuProcesses(1, (ProcessInfo(40, 2048, 3, 0),), None)
    usage = usage_by_pod([shared, mig], ENTITIES, OWNERS.get, PODS)
    assert usage[("gpu", 0)].of(("ns", "a")) == Usage(1500, 15, 5, 0, 0)
    assert usage[("gpu", 0)].of(("ns", "b")) == Usage(4000, 40, 9, 0, 0)
    # a pod holding the device with no process there uses nothing
    assert usage[("gpu", 0)].of(("ns", "idle")) == Usage(0, 0, 0, 0, 0)
    # MIG: memory per instance, and no per-process utilisation (NVML gives none)
    assert usage[("gi", 1, 3)].of(("ns", "c")) == Usage(2048, None, None, None, None)
    assert ("gi", 1, 5) not in usage


def test_a_process_without_a_sample_lately_used_no_sm() -> None:
    gpu = GpuProcesses(0, (ProcessInfo(10, 700),), ())
    usage = usage_by_pod([gpu], ENTITIES, OWNERS.get, PODS)
    assert usage[("gpu", 0)].of(("ns", "a")) == Usage(700, 0, 0, 0, 0)


def test_isolation_annotations_become_metrics() -> None:
    pods = [
        PodMeta(
            "u1",
            "ml",
            "client",
            {"main": [Isolation("GPU-1::0", "GPU-1", Method.MPS, 27186, False, 33)]},
        ),
        PodMeta(
            "u2", "ml", "slice", {"main": [Isolation("MIG-1", "MIG-1", Method.MIG, 9984, True)]}
        ),
        PodMeta("u3", "ml", "plain"),
    ]
    text = render(pods, "node-a")
    assert (
        'kubegpu_pod_isolation{UUID="GPU-1",Hostname="node-a",container="main",'
        'device="GPU-1::0",fault_isolated="false",method="mps",namespace="ml",pod="client"} 1'
    ) in text
    assert 'kubegpu_pod_guaranteed_memory_mib{UUID="MIG-1"' in text
    lines = text.splitlines()
    threads = [line for line in lines if line.startswith("kubegpu_pod_mps_active_thread")]
    assert len(threads) == 1 and threads[0].endswith(" 33")
    pinned = [line for line in lines if line.startswith("kubegpu_pod_mps_pinned_memory_mib")]
    assert len(pinned) == 1 and pinned[0].endswith(" 27186")
    assert "plain" not in text
    assert render([pods[2]], None) == ""
