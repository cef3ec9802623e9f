"""MPS inside MIG instances (kubegpu's `sharing.mps.migInstances`): refused by default as
upstream refuses it; when enabled, one daemon per MIG instance with limits derived from the
instance, advertised as `nvidia.com/mig-<profile>.shared`, labelled by GFD, and a fault in
one instance never reaching another instance's MPS clients on the simulated GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubegpu.exporter.pods import DeviceIndex, HeldDevice, attribute
from kubegpu.mig.config import MigConfigEntry
from kubegpu.mig.parted import apply_config
from kubegpu.node.mps import LIMITS_FILE, RecordingMps, commands
from kubegpu.nvml import errors
from kubegpu.nvml.sim import SimNvml
from kubegpu.nvml.sim.controls import SimWorkload
from kubegpu.nvml.sim.mps import SimMps
from kubegpu.sharing.allocate import AllocationError, container_response, settings_for
from kubegpu.sharing.config import SharingConfigError, parse_config
from kubegpu.sharing.devices import GpuFacts, StrategyError, advertise
from kubegpu.sharing.facts import read_gpus
from kubegpu.sharing.labels import LabelError, SystemFacts, compute_labels
from kubegpu.sharing.mps import mps_resources

SOURCE = "dp.yaml"
H200_MEMORY_MIB = 143771
SYSTEM = SystemFacts("580.95.05", (13, 0))


def cfg(strategy: str, *, mig_instances: bool | None, rename: bool = True, body: str = "") -> str:
    flag = "" if mig_instances is None else f"    migInstances: {str(mig_instances).lower()}\n"
    resources = (
        body or "    - {name: mig-1g.18gb, replicas: 4}\n    - {name: mig-3g.71gb, replicas: 2}\n"
    )
    return (
        f"flags: {{migStrategy: {strategy}, mpsRoot: /run/nvidia/mps}}\n"
        f"sharing:\n  mps:\n{flag}    renameByDefault: {str(rename).lower()}\n"
        f"    resources:\n{resources}"
    )


@pytest.fixture
def node(tmp_path: Path) -> SimNvml:
    """One H200 NVL with MIG on: 3g.71gb, 2g.35gb and two 1g.18gb instances."""
    nvml = SimNvml.create(tmp_path / "gpus.json", "h200-nvl:1")
    layout = {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}
    entry = MigConfigEntry.model_validate(
        {"devices": "all", "mig-enabled": True, "mig-devices": layout}
    )
    apply_config(nvml, "mixed-layout", [entry])
    return nvml


@pytest.fixture
def gpus(node: SimNvml) -> list[GpuFacts]:
    return read_gpus(node)


# -- the config flag -----------------------------------------------------------------------


@pytest.mark.parametrize("flag", [None, False])
def test_by_default_mixed_mps_is_refused_naming_the_file_field_value_and_the_flag(
    flag: bool | None,
) -> None:
    with pytest.raises(SharingConfigError) as err:
        parse_config(cfg("mixed", mig_instances=flag), SOURCE)
    assert str(err.value) == (
        "dp.yaml: field flags.migStrategy, value 'mixed': using --mig-strategy=mixed is not "
        "supported with MPS (kubegpu shares MIG instances through MPS only with "
        "sharing.mps.migInstances: true)"
    )


def test_by_default_mps_on_single_strategy_mig_devices_is_refused_naming_the_entry(
    gpus: list[GpuFacts], tmp_path: Path
) -> None:
    single = SimNvml.create(tmp_path / "single.json", "h200-nvl:1")
    entry = MigConfigEntry.model_validate(
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}
    )
    apply_config(single, "all-1g", [entry])
    body = "    - {name: gpu, replicas: 2}\n"
    config = parse_config(cfg("single", mig_instances=None, body=body), SOURCE)
    with pytest.raises(StrategyError) as err:
        advertise(read_gpus(single), config)
    assert str(err.value) == (
        "field sharing.mps.resources.0.name, value 'nvidia.com/gpu': sharing using MPS is not "
        "supported for MIG devices (kubegpu shares MIG instances through MPS only with "
        "sharing.mps.migInstances: true)"
    )


def test_the_flag_must_be_a_boolean_and_belongs_to_mps_only() -> None:
    with pytest.raises(SharingConfigError, match=r"sharing\.mps\.migInstances"):
        parse_config(
            cfg("mixed", mig_instances=None).replace(
                "    renameByDefault", "    migInstances: 'true'\n    renameByDefault"
            ),
            SOURCE,
        )
    ts = "sharing:\n  timeSlicing:\n    migInstances: true\n    resources:\n    - {name: gpu, replicas: 2}\n"
    with pytest.raises(SharingConfigError, match=r"sharing\.timeSlicing\.migInstances"):
        parse_config(ts, SOURCE)


def test_enabled_the_config_is_accepted_and_round_trips() -> None:
    config = parse_config(cfg("mixed", mig_instances=True), SOURCE)
    assert config.mps_on_mig and config.sharing_strategy == "mps"
    assert parse_config(config.to_yaml(), "again") == config
    gpu = "    - {name: gpu, replicas: 2}\n"
    assert not parse_config(cfg("single", mig_instances=None, body=gpu), SOURCE).mps_on_mig


def test_a_mig_enabled_gpu_shared_whole_is_still_refused_with_the_flag(
    gpus: list[GpuFacts],
) -> None:
    body = "    - {name: gpu, replicas: 2}\n"
    config = parse_config(cfg("none", mig_instances=True, body=body), SOURCE)
    with pytest.raises(StrategyError, match="MPS shares MIG instances under migStrategy single"):
        advertise(gpus, config)
    with pytest.raises(LabelError, match="MPS is not supported with MIG enabled"):
        compute_labels(gpus, config, SYSTEM)


# -- resource naming -----------------------------------------------------------------------


def test_mixed_replicas_are_advertised_as_the_profile_dot_shared(gpus: list[GpuFacts]) -> None:
    config = parse_config(cfg("mixed", mig_instances=True), SOURCE)
    assert advertise(gpus, config).counts() == {
        "nvidia.com/mig-1g.18gb.shared": 8,  # two instances x 4 replicas
        "nvidia.com/mig-2g.35gb": 1,  # not shared: stays whole
        "nvidia.com/mig-3g.71gb.shared": 2,
    }
    unrenamed = parse_config(cfg("mixed", mig_instances=True, rename=False), SOURCE)
    assert advertise(gpus, unrenamed).counts()["nvidia.com/mig-1g.18gb"] == 8


def test_single_strategy_replicas_are_gpu_dot_shared(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "g.json", "h200-nvl:2")
    entry = MigConfigEntry.model_validate(
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}
    )
    apply_config(nvml, "all-1g", [entry])
    config = parse_config(
        cfg("single", mig_instances=True, body="    - {name: gpu, replicas: 3}\n"), SOURCE
    )
    assert advertise(read_gpus(nvml), config).counts() == {"nvidia.com/gpu.shared": 42}
    labels = compute_labels(read_gpus(nvml), config, SYSTEM)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-NVL-MIG-1g.18gb"
    assert labels["nvidia.com/gpu.count"] == "14"
    assert labels["nvidia.com/gpu.replicas"] == "3"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"


def test_replicas_per_instance_are_bounded_like_a_gpus(gpus: list[GpuFacts]) -> None:
    body = "    - {name: mig-1g.18gb, replicas: 49}\n"
    config = parse_config(cfg("mixed", mig_instances=True, body=body), SOURCE)
    with pytest.raises(
        StrategyError, match=r"on MIG device 0:\d+: maximum allowed replicas exceeded \(48\)"
    ):
        advertise(gpus, config)


# -- limits --------------------------------------------------------------------------------


def test_one_daemon_per_instance_with_limits_from_the_instance_not_the_card(
    gpus: list[GpuFacts],
) -> None:
    config = parse_config(cfg("mixed", mig_instances=True), SOURCE)
    daemons = mps_resources(gpus, config, advertise(gpus, config))
    migs = {m.uuid: m for m in gpus[0].mig_devices}
    assert [(d.resource, migs[d.instance or ""].profile) for d in daemons] == [
        ("nvidia.com/mig-1g.18gb.shared", "1g.18gb"),
        ("nvidia.com/mig-1g.18gb.shared", "1g.18gb"),
        ("nvidia.com/mig-3g.71gb.shared", "3g.71gb"),
    ]
    for d in daemons:
        (limit,) = d.limits
        m = migs[limit.uuid]
        assert d.instance == m.uuid and d.key == f"{d.resource}/{m.uuid}"
        replicas = 4 if m.profile == "1g.18gb" else 2
        assert limit.replicas == replicas
        assert limit.pinned_memory_mib == m.memory_mib // replicas
        assert limit.pinned_memory_mib < H200_MEMORY_MIB // replicas // 2  # not the card's
        assert limit.active_thread_percentage == 100 // replicas
        assert limit.multiprocessors == m.multiprocessors
        assert limit.client_multiprocessors == m.multiprocessors * (100 // replicas) // 100
        # the daemon sees its instance only: the limit is set on its device 0
        assert commands(d) == [
            f"set_default_device_pinned_mem_limit 0 {limit.pinned_memory_mib}M",
            f"set_default_active_thread_percentage {100 // replicas}",
        ]


def test_the_simulated_daemon_records_the_instance_limits(
    gpus: list[GpuFacts], tmp_path: Path
) -> None:
    config = parse_config(cfg("mixed", mig_instances=True), SOURCE)
    daemon = mps_resources(gpus, config, advertise(gpus, config))[0]
    RecordingMps().start(daemon, tmp_path)
    record = json.loads((tmp_path / LIMITS_FILE).read_text())
    assert record["migInstance"] == daemon.instance
    assert record["computeMode"] == "DEFAULT"  # the GPU's mode is left to the other instances
    (device,) = record["devices"]
    assert device["uuid"] == daemon.instance and device["migProfile"] == "1g.18gb"
    assert device["pinnedDeviceMemoryLimitMiB"] == daemon.limits[0].pinned_memory_mib


# -- allocation ----------------------------------------------------------------------------


def test_a_client_gets_its_instances_pipe_and_limits(gpus: list[GpuFacts]) -> None:
    config = parse_config(cfg("mixed", mig_instances=True), SOURCE)
    resource = "nvidia.com/mig-1g.18gb.shared"
    devices = {d.id: d for d in advertise(gpus, config).resources[resource]}
    first = next(iter(devices.values()))
    r = container_response([first.id], devices, settings_for(config, resource), "rid")
    pipe = f"/mps/{resource}/{first.uuid}/pipe"
    assert r.envs == {
        "CUDA_MPS_PIPE_DIRECTORY": pipe,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={16384 // 4}M",
        "NVIDIA_VISIBLE_DEVICES": first.uuid,
    }
    assert (pipe, f"/run/nvidia/mps/{resource}/{first.uuid}/pipe") in [
        (m.container_path, m.host_path) for m in r.mounts
    ]


def test_one_container_cannot_be_a_client_of_two_instances(gpus: list[GpuFacts]) -> None:
    body = "    - {name: mig-1g.18gb, replicas: 4}\n"
    text = cfg("mixed", mig_instances=True, body=body).replace(
        "renameByDefault", "failRequestsGreaterThanOne: false\n    renameByDefault"
    )
    config = parse_config(text, SOURCE)
    resource = "nvidia.com/mig-1g.18gb.shared"
    devices = {d.id: d for d in advertise(gpus, config).resources[resource]}
    a, b = sorted({d.uuid for d in devices.values()})
    with pytest.raises(AllocationError, match="more than one MIG instance"):
        container_response([f"{a}::0", f"{b}::0"], devices, settings_for(config, resource), "r")
    same = container_response([f"{a}::0", f"{a}::1"], devices, settings_for(config, resource), "r")
    assert same.envs["CUDA_MPS_PIPE_DIRECTORY"] == f"/mps/{resource}/{a}/pipe"


# -- GPU feature discovery -----------------------------------------------------------------


def test_gfd_labels_the_mig_resource_as_mps_shared(gpus: list[GpuFacts]) -> None:
    labels = compute_labels(gpus, parse_config(cfg("mixed", mig_instances=True), SOURCE), SYSTEM)
    assert labels["nvidia.com/mps.capable"] == "true"
    assert labels["nvidia.com/mig-1g.18gb.replicas"] == "4"
    assert labels["nvidia.com/mig-1g.18gb.sharing-strategy"] == "mps"
    assert labels["nvidia.com/mig-1g.18gb.product"] == "NVIDIA-H200-NVL-MIG-1g.18gb"  # renamed
    assert labels["nvidia.com/mig-3g.71gb.replicas"] == "2"
    assert labels["nvidia.com/mig-2g.35gb.sharing-strategy"] == "none"


# -- fault domains on the simulated GPU ----------------------------------------------------


def test_a_client_fault_ends_its_daemons_clients_and_no_other_instances(node: SimNvml) -> None:
    small = [m for m in node.mig_devices(0) if m.profile == "1g.18gb"]
    a, b = small[0], small[1]
    lab = SimMps.of(node)
    pipe_a, pipe_b = f"/mps/r/{a.uuid}/pipe", f"/mps/r/{b.uuid}/pipe"
    lab.connect(0, 101, pipe_a, 1000, mig_device=a.uuid)
    lab.connect(0, 102, pipe_a, 1000, mig_device=a.uuid)
    lab.connect(0, 201, pipe_b, 1000, mig_device=b.uuid)
    lab.start_process(0, 301, 500, mig_device=b.uuid)  # not an MPS client, same instance as b
    fault = lab.client_fault(0, 102)
    assert fault.ended == (102, 101)  # the same daemon's clients go down together
    assert (fault.gi, fault.ci) == (a.gpu_instance_id, a.compute_instance_id)
    assert sorted(p.pid for p in node.processes(0)) == [201, 301]  # instance b untouched
    assert lab.clients(0) == [201]
    # a fault of the plain process reaches only itself, not the MPS client beside it
    assert lab.client_fault(0, 301).ended == (301,)
    assert lab.clients(0, pipe_b) == [201]


def test_an_instance_fault_ends_that_instance_only(node: SimNvml) -> None:
    a, b = [m for m in node.mig_devices(0) if m.profile == "1g.18gb"]
    lab = SimMps.of(node)
    lab.connect(0, 1, "/p/a", 10, mig_device=a.uuid)
    lab.connect(0, 2, "/p/b", 10, mig_device=b.uuid)
    assert lab.instance_fault(0, a.gpu_instance_id).ended == (1,)
    assert [p.pid for p in node.processes(0)] == [2]
    events = lab.raw_state()["events"]
    assert events[-1]["gi"] == a.gpu_instance_id and events[-1]["xid"] == 31


def test_pod_processes_naming_a_daemon_are_its_clients_and_share_its_faults(
    node: SimNvml,
) -> None:
    a, b = [m for m in node.mig_devices(0) if m.profile == "1g.18gb"]
    lab = SimMps.of(node)
    pipe_a, pipe_b = f"/run/mps/r/{a.uuid}/pipe", f"/run/mps/r/{b.uuid}/pipe"
    # what the simulated kubelet records for the pods' containers (kubegpu.sim.kubelet.gpuload)
    lab.set_workloads(
        {
            a.uuid: [SimWorkload(11, 100, mps=pipe_a), SimWorkload(12, 100, mps=pipe_a)],
            b.uuid: [SimWorkload(21, 100, mps=pipe_b), SimWorkload(22, 100)],
        }
    )
    assert sorted(lab.clients(0)) == [11, 12, 21]
    assert lab.clients(0, pipe_b) == [21]
    fault = lab.client_fault(0, 12)
    assert fault.ended == (12, 11)
    assert sorted(p.pid for p in node.processes(0)) == [21, 22]  # instance b untouched
    assert lab.raw_state()["busy"] == {b.uuid: 2}  # instance a no longer carries their load
    # a lab client of b's daemon shares b's faults with the pod's process
    lab.connect(0, 31, pipe_b, 10, mig_device=b.uuid)
    assert lab.client_fault(0, 31).ended == (31, 21)
    assert lab.instance_fault(0, b.gpu_instance_id).ended == (22,)
    assert node.processes(0) == []
    # a daemon that serves a pod's process on b serves no client on a
    lab.set_workloads({b.uuid: [SimWorkload(41, 1, mps=pipe_b)]})
    with pytest.raises(errors.InvalidArgument, match="serves GPU 0 instance"):
        lab.connect(0, 42, pipe_b, 10, mig_device=a.uuid)


def test_one_daemon_serves_one_device(node: SimNvml) -> None:
    a, b = [m for m in node.mig_devices(0) if m.profile == "1g.18gb"]
    lab = SimMps.of(node)
    lab.connect(0, 1, "/p/a", 10, mig_device=a.uuid)
    with pytest.raises(errors.InvalidArgument, match="serves GPU 0 instance"):
        lab.connect(0, 2, "/p/a", 10, mig_device=b.uuid)
    with pytest.raises(errors.NotFound):
        lab.client_fault(0, 99)


# -- the exporter --------------------------------------------------------------------------


def test_the_exporter_attributes_mps_clients_to_their_own_instance() -> None:
    index = DeviceIndex(
        gpu_by_uuid={"GPU-0": 0},
        gi_by_mig_uuid={"MIG-a": (0, 9), "MIG-b": (0, 10)},
        entities=frozenset({("gpu", 0), ("gi", 0, 9), ("gi", 0, 10)}),
    )
    resource = "nvidia.com/mig-1g.18gb.shared"
    held = [
        HeldDevice("ns", "p1", "c", resource, "MIG-a::0"),
        HeldDevice("ns", "p2", "c", resource, "MIG-a::3"),
        HeldDevice("ns", "p3", "c", resource, "MIG-b::1"),
    ]
    pods = attribute(held, index, virtual_gpus=True)
    assert {k: [(p.pod, p.vgpu) for p in v] for k, v in pods.items()} == {
        ("gi", 0, 9): [("p1", "0"), ("p2", "3")],
        ("gi", 0, 10): [("p3", "1")],
    }
