"""One NVML contract, two backends: the simulator and the real backend over pynvml.

Every test here runs against both: `SimNvml` on a state file, and `RealNvml` talking to a
stand-in for libnvidia-ml (fake_pynvml.py), on the same node of an H100 80GB and an L4.
Same calls, same answers, same error kinds; what a driver leaves open (GPU-instance ids,
the order auto-placement picks) is not asserted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_pynvml import FakeNvmlLibrary

from kubegpu.catalog import get_model
from kubegpu.nvml import Activation, MigMode, Nvml, errors
from kubegpu.nvml.real import RealNvml
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.nvml.types import NvLinkThroughput

H100, L4 = get_model("h100-80gb"), get_model("l4")


def _id(profile: str) -> int:
    assert H100.mig
    return H100.mig.profile(profile).id


@pytest.fixture(params=["sim", "real"])
def nvml(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Nvml]:
    """A node with GPU 0 an H100 80GB (MIG off) and GPU 1 an L4."""
    if request.param == "sim":
        backend: Nvml = SimNvml.create(tmp_path / "node.json", "h100-80gb:1,l4:1")
    else:
        FakeNvmlLibrary([H100, L4]).install(monkeypatch)
        backend = RealNvml()
    with backend:
        yield backend


def _mig_on(nvml: Nvml) -> None:
    assert nvml.set_mig_mode(0, True) is Activation.APPLIED


# -- devices and memory ----------------------------------------------------------------------------


def test_devices_are_listed_with_their_identity(nvml: Nvml) -> None:
    assert nvml.device_count() == 2
    h100, l4 = nvml.devices()
    assert (h100.index, h100.name, h100.pci_device_id, h100.model_id) == (
        0,
        "NVIDIA H100 80GB HBM3",
        0x233010DE,
        "h100-80gb",
    )
    assert h100.compute_capability == (9, 0)
    assert (l4.name, l4.model_id) == ("NVIDIA L4", "l4")
    assert h100.uuid.startswith("GPU-") and h100.uuid != l4.uuid
    assert h100.pci_bus_id != l4.pci_bus_id


def test_memory_is_the_models_total(nvml: Nvml) -> None:
    assert nvml.device(0).memory_total_mib == 81559
    assert nvml.memory(0).total_mib == 81559
    assert nvml.memory(1).total_mib == L4.memory_mib


def test_no_such_gpu_is_an_invalid_argument(nvml: Nvml) -> None:
    with pytest.raises(errors.InvalidArgument):
        nvml.device(2)


def test_the_driver_version_is_reported(nvml: Nvml) -> None:
    assert nvml.system().driver_version.split(".")[0].isdigit()


# -- MIG mode ----------------------------------------------------------------------------------------


def test_mig_mode_turns_on_in_place_on_hopper(nvml: Nvml) -> None:
    assert nvml.mig_mode(0) == MigMode(False, False)
    _mig_on(nvml)
    assert nvml.mig_mode(0) == MigMode(True, True)
    assert nvml.mig_devices(0) == []


def test_a_gpu_without_mig_says_not_supported(nvml: Nvml) -> None:
    with pytest.raises(errors.NotSupported):
        nvml.mig_mode(1)
    with pytest.raises(errors.NotSupported):
        nvml.set_mig_mode(1, True)


def test_mig_cannot_be_turned_off_under_instances(nvml: Nvml) -> None:
    _mig_on(nvml)
    nvml.create_gpu_instance(0, _id("1g.10gb"), 0)
    with pytest.raises(errors.InUse):
        nvml.set_mig_mode(0, False)


# -- GPU instances -----------------------------------------------------------------------------------


def test_profiles_carry_enum_and_per_device_id(nvml: Nvml) -> None:
    _mig_on(nvml)
    profiles = {p.name: p for p in nvml.gpu_instance_profiles(0)}
    assert set(profiles) == {p.name for p in H100.mig.gpu_instance_profiles}  # type: ignore[union-attr]
    one = profiles["1g.10gb"]
    assert (one.nvml_enum, one.id, one.slice_count, one.instance_count) == (0, 19, 1, 7)
    whole = profiles["7g.80gb"]
    assert (whole.multiprocessor_count, whole.decoder_count, whole.ofa_count) == (132, 7, 1)
    assert profiles["1g.10gb+me"].ofa_count == 1


def test_placements_come_from_the_profile_table(nvml: Nvml) -> None:
    _mig_on(nvml)
    three = nvml.gpu_instance_possible_placements(0, _id("3g.40gb"))
    assert [(p.start, p.size) for p in three] == [(0, 4), (4, 4)]
    one = nvml.gpu_instance_possible_placements(0, _id("1g.10gb"))
    assert [p.start for p in one] == list(range(7))


def test_instances_are_created_listed_and_destroyed(nvml: Nvml) -> None:
    _mig_on(nvml)
    three = nvml.create_gpu_instance(0, _id("3g.40gb"), 4)
    one = nvml.create_gpu_instance(0, _id("1g.10gb"), 0)
    assert (three.profile_id, three.placement.start, three.placement.size) == (9, 4, 4)
    assert (one.profile_id, one.placement.start, one.placement.size) == (19, 0, 1)
    listed = {(g.id, g.profile_id, g.placement.start) for g in nvml.gpu_instances(0)}
    assert listed == {(three.id, 9, 4), (one.id, 19, 0)}
    assert nvml.gpu_instance_remaining_capacity(0, _id("3g.40gb")) == 0
    nvml.destroy_gpu_instance(0, three.id)
    assert [g.id for g in nvml.gpu_instances(0)] == [one.id]


def test_an_automatic_placement_is_one_of_the_profiles_starts(nvml: Nvml) -> None:
    _mig_on(nvml)
    gi = nvml.create_gpu_instance(0, _id("2g.20gb"))
    assert gi.placement.start in {0, 2, 4} and gi.placement.size == 2


def test_placement_errors(nvml: Nvml) -> None:
    _mig_on(nvml)
    nvml.create_gpu_instance(0, _id("3g.40gb"), 4)
    with pytest.raises(errors.InsufficientResources):
        nvml.create_gpu_instance(0, _id("2g.20gb"), 4)  # overlaps
    with pytest.raises(errors.InvalidArgument):
        nvml.create_gpu_instance(0, _id("3g.40gb"), 2)  # not a start of 3g
    nvml.create_gpu_instance(0, _id("1g.10gb+me"), 0)
    with pytest.raises(errors.InsufficientResources):
        nvml.create_gpu_instance(0, _id("1g.10gb+me"), 1)  # max count 1
    with pytest.raises(errors.NotFound):
        nvml.destroy_gpu_instance(0, 999)


def test_instances_need_mig_mode(nvml: Nvml) -> None:
    with pytest.raises(errors.NotSupported):
        nvml.create_gpu_instance(0, _id("1g.10gb"), 0)


# -- compute instances and MIG devices -------------------------------------------------------------


def test_compute_instances_inside_a_gpu_instance(nvml: Nvml) -> None:
    _mig_on(nvml)
    gi = nvml.create_gpu_instance(0, _id("3g.40gb"), 0)
    profiles = nvml.compute_instance_profiles(0, gi.id)
    assert [(p.name, p.id, p.slice_count) for p in profiles] == [
        ("1c.3g.40gb", 0, 1),
        ("2c.3g.40gb", 1, 2),
        ("3g.40gb", 2, 3),
    ]
    two = nvml.create_compute_instance(0, gi.id, 1)
    one = nvml.create_compute_instance(0, gi.id, 0)
    with pytest.raises(errors.InsufficientResources):
        nvml.create_compute_instance(0, gi.id, 0)  # the 3 slices are taken
    listed = {
        (c.id, c.profile_id, c.placement.start, c.placement.size)
        for c in nvml.compute_instances(0, gi.id)
    }
    assert listed == {(two.id, 1, 0, 2), (one.id, 0, 2, 1)}
    devices = nvml.mig_devices(0)
    assert sorted(d.profile for d in devices) == ["1c.3g.40gb", "2c.3g.40gb"]
    assert {d.gpu_instance_id for d in devices} == {gi.id}
    assert all(d.uuid.startswith("MIG-") and d.memory_mib == 40448 for d in devices)
    assert {(d.placement.start, d.placement.size) for d in devices} == {(0, 4)}


def test_a_gpu_instance_with_compute_instances_is_in_use(nvml: Nvml) -> None:
    _mig_on(nvml)
    gi = nvml.create_gpu_instance(0, _id("1g.10gb"), 3)
    ci = nvml.create_compute_instance(0, gi.id, 0)
    with pytest.raises(errors.InUse):
        nvml.destroy_gpu_instance(0, gi.id)
    with pytest.raises(errors.NotFound):
        nvml.destroy_compute_instance(0, gi.id, ci.id + 5)
    nvml.destroy_compute_instance(0, gi.id, ci.id)
    nvml.destroy_gpu_instance(0, gi.id)
    assert nvml.gpu_instances(0) == []


# -- NVLink ---------------------------------------------------------------------------------------


@pytest.fixture(params=["sim", "real"])
def nvlinked(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Nvml]:
    """Two H100 80GB (SXM: 18 NVLinks each, to each other) and an L4 (PCIe only), idle."""
    if request.param == "sim":
        backend: Nvml = SimNvml.create(tmp_path / "node.json", "h100-80gb:2,l4:1")
    else:
        FakeNvmlLibrary([H100, H100, L4], nvlinks={0: 18, 1: 18}).install(monkeypatch)
        backend = RealNvml()
    with backend:
        yield backend


def test_nvlink_throughput_counts_active_links_and_payload(nvlinked: Nvml) -> None:
    for index in (0, 1):
        assert nvlinked.nvlink_throughput(index) == NvLinkThroughput(18, 0, 0)  # idle
    assert nvlinked.nvlink_throughput(2) == NvLinkThroughput(0, 0, 0)  # no NVLink: nothing moved


def test_the_sample_carries_the_nvlink_counters(nvlinked: Nvml) -> None:
    assert nvlinked.sample(0).nvlink == nvlinked.nvlink_throughput(0)
    assert nvlinked.sample(2).nvlink == NvLinkThroughput(0, 0, 0)


def test_nvlink_of_a_gpu_that_is_not_there(nvlinked: Nvml) -> None:
    with pytest.raises(errors.InvalidArgument):
        nvlinked.nvlink_throughput(7)


# -- processes -------------------------------------------------------------------------------------

StartProcess = Callable[[int, int, int, int], None]  # GPU index, pid, MiB, SM %


@pytest.fixture(params=["sim", "real"])
def with_processes(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Nvml, StartProcess]]:
    """The H100 + L4 node, and a way to start a CUDA process on one of its GPUs."""
    if request.param == "sim":
        sim = SimNvml.create(tmp_path / "node.json", "h100-80gb:1,l4:1")
        lab = SimControls.of(sim)

        def start(index: int, pid: int, mib: int, sm: int) -> None:
            lab.start_process(index, pid, mib, sm_percent=sm)

        backend: Nvml = sim
    else:
        driver = FakeNvmlLibrary([H100, L4])
        driver.install(monkeypatch)

        def start(index: int, pid: int, mib: int, sm: int) -> None:
            driver.gpus[index].processes.append((pid, mib, sm))

        backend = RealNvml()
    with backend:
        yield backend, start


def test_running_processes_are_listed_with_the_memory_they_hold(
    with_processes: tuple[Nvml, StartProcess],
) -> None:
    nvml, start = with_processes
    assert nvml.processes(0) == []
    start(0, 4242, 3072, 35)
    start(0, 4343, 1024, 20)
    assert {(p.pid, p.used_memory_mib, p.gpu_instance_id) for p in nvml.processes(0)} == {
        (4242, 3072, None),
        (4343, 1024, None),
    }
    assert nvml.processes(1) == []


def test_utilisation_samples_name_each_process(with_processes: tuple[Nvml, StartProcess]) -> None:
    nvml, start = with_processes
    assert nvml.process_utilization(0) == []  # nothing ran: no sample, not an error
    start(0, 4242, 3072, 35)
    start(0, 4343, 1024, 20)
    got = {u.pid: u.sm_percent for u in nvml.process_utilization(0)}
    assert got == {4242: 35, 4343: 20}


def test_no_process_utilisation_in_mig_mode(with_processes: tuple[Nvml, StartProcess]) -> None:
    nvml, _ = with_processes
    _mig_on(nvml)
    with pytest.raises(errors.NotSupported):
        nvml.process_utilization(0)
