"""The simulated GPU backend behaves like the hardware: same rules, same error kinds."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kubegpu.catalog import get_model
from kubegpu.nvml import (
    Activation,
    BackendError,
    EventType,
    MigMode,
    SpecError,
    errors,
    open_nvml,
    parse_spec,
)
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.nvml.sim.state import StateFile

MakeNode = Callable[[str], SimNvml]


def _id(model: str, profile: str) -> int:
    mig = get_model(model).mig
    assert mig
    return mig.profile(profile).id


def _enable(gpu: SimNvml, index: int = 0) -> None:
    if gpu.set_mig_mode(index, True) is Activation.RESET_REQUIRED:
        gpu.reset(index)


# -- node specs ------------------------------------------------------------------------------


def test_spec_lists_models_counts_and_options() -> None:
    spec = parse_spec("rtx-pro-6000-ws:2,l4:1;driver=575.51.03;display=compute")
    assert [m.id for m in spec.models] == ["rtx-pro-6000-ws", "rtx-pro-6000-ws", "l4"]
    assert spec.driver == "575.51.03"
    assert spec.display == "compute"
    assert str(parse_spec(str(spec))) == str(spec)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no GPUs"),
        ("v100:2", "unknown GPU model 'v100'"),
        ("h200:x", "count 'x' for h200 is not a number"),
        ("h200:0", "must be 1..16"),
        ("h200:2;colour=red", "unknown option 'colour=red'"),
        ("h200:2;driver=new", "driver='new' is not a version"),
        ("h200:2;display=tv", "display='tv'"),
        ("h200:2;driver=575.57.08;driver=1", "option driver= given twice"),  # not the last wins
        # L4 has no MIG: `mig=on` would leave the node running with MIG silently off.
        ("l4:2;mig=on", "mig=on, but no GPU of 'l4:2' is MIG-capable"),
        ("h200:1_6", "count '1_6' for h200 is not a number"),  # int() would read 16
        ("h200:+2", "count '\\+2' for h200 is not a number"),
        ("h200:2;", "unknown option ''"),
    ],
)
def test_bad_specs_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(text)


def test_devices_come_from_the_catalog(sim_node: MakeNode) -> None:
    gpu = sim_node("h200-nvl:2,l4:1")
    devices = gpu.devices()
    assert [d.name for d in devices] == ["NVIDIA H200 NVL", "NVIDIA H200 NVL", "NVIDIA L4"]
    assert devices[0].pci_device_id == 0x233B10DE
    assert devices[0].uuid.startswith("GPU-")
    assert len({d.uuid for d in devices}) == 3
    assert devices[2].model_id == "l4"
    assert gpu.system().driver_version == "580.95.05"
    assert gpu.system().cuda_version == (13, 0)


def test_state_is_shared_between_handles_and_processes(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    one = SimNvml.create(path, "h100-80gb:1")
    _enable(one)
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_create_in_child, args=(str(path),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert [g.profile_id for g in one.gpu_instances(0)] == [_id("h100-80gb", "7g.80gb")]


def _create_in_child(path: str) -> None:
    other = SimNvml(path)
    other.create_gpu_instance(0, _id("h100-80gb", "7g.80gb"))


def test_open_nvml_chooses_the_backend_by_configuration(tmp_path: Path) -> None:
    state = tmp_path / "n.json"
    with pytest.raises(BackendError, match="give --sim-node"):
        open_nvml(f"sim:{state}")
    gpu = open_nvml(f"sim:{state}", "a30:1")
    assert gpu.device(0).name == "NVIDIA A30"
    assert open_nvml(f"sim:{state}").device_count() == 1
    with pytest.raises(BackendError, match="use 'real' or 'sim:<state-file>'"):
        open_nvml("fake")


# -- MIG mode --------------------------------------------------------------------------------


def test_non_mig_gpus_report_not_supported(sim_node: MakeNode) -> None:
    gpu = sim_node("l4:1")
    with pytest.raises(errors.NotSupported):
        gpu.mig_mode(0)
    with pytest.raises(errors.NotSupported):
        gpu.set_mig_mode(0, True)


def test_ampere_mode_change_waits_for_a_reset(sim_node: MakeNode) -> None:
    gpu = sim_node("a100-40gb:1")
    assert gpu.set_mig_mode(0, True) is Activation.RESET_REQUIRED
    assert gpu.mig_mode(0) == MigMode(current=False, pending=True)
    with pytest.raises(errors.NotSupported, match="not enabled"):
        gpu.create_gpu_instance(0, _id("a100-40gb", "1g.5gb"))
    gpu.reset(0)
    assert gpu.mig_mode(0) == MigMode(True, True)


def test_hopper_toggles_without_a_reset(sim_node: MakeNode) -> None:
    gpu = sim_node("h200:1")
    assert gpu.set_mig_mode(0, True) is Activation.APPLIED
    assert gpu.mig_mode(0) == MigMode(True, True)


def test_reboot_applies_pending_modes_and_clears_instances(sim_node: MakeNode) -> None:
    gpu = sim_node("a100-80gb:2")
    _enable(gpu, 0)
    gpu.create_gpu_instance(0, _id("a100-80gb", "3g.40gb"))
    gpu.set_mig_mode(1, True)
    SimControls.of(gpu).reboot()
    assert gpu.mig_mode(1).current
    assert gpu.gpu_instances(0) == []


def test_mode_change_refused_while_processes_run(sim_node: MakeNode) -> None:
    gpu = sim_node("h100-80gb:1")
    SimControls.of(gpu).start_process(0, pid=4242, used_memory_mib=1000)
    with pytest.raises(errors.InUse, match="4242"):
        gpu.set_mig_mode(0, True)
    with pytest.raises(errors.InUse):
        gpu.reset(0)


def test_workstation_cards_need_compute_display_mode(sim_node: MakeNode) -> None:
    gpu = sim_node("rtx-pro-6000-ws:1")
    with pytest.raises(errors.NotSupported, match="graphics display mode"):
        gpu.set_mig_mode(0, True)
    SimControls.of(gpu).set_display_mode(0, "compute")
    assert gpu.set_mig_mode(0, True) is Activation.APPLIED
    server = sim_node("rtx-pro-6000-se:1")
    assert server.set_mig_mode(0, True) is Activation.APPLIED


def test_old_driver_has_no_mig(sim_node: MakeNode) -> None:
    gpu = sim_node("rtx-pro-6000-se:1;driver=570.124.06")
    with pytest.raises(errors.NotSupported, match=r"needs driver 575\.51\.03"):
        gpu.set_mig_mode(0, True)


def test_disabling_mig_with_instances_is_refused(sim_node: MakeNode) -> None:
    gpu = sim_node("h100-80gb:1")
    _enable(gpu)
    gpu.create_gpu_instance(0, _id("h100-80gb", "1g.10gb"))
    with pytest.raises(errors.InUse, match="still has 1 GPU instances"):
        gpu.set_mig_mode(0, False)


# -- GPU instances -----------------------------------------------------------------------------


def test_profiles_report_per_device_ids(sim_node: MakeNode) -> None:
    gpu = sim_node("h100-80gb:1;mig=on")
    profiles = {p.name: p for p in gpu.gpu_instance_profiles(0)}
    assert (profiles["1g.10gb"].nvml_enum, profiles["1g.10gb"].id) == (0, 19)
    assert profiles["7g.80gb"].multiprocessor_count == 132
    placements = gpu.gpu_instance_possible_placements(0, 9)
    assert [(p.start, p.size) for p in placements] == [(0, 4), (4, 4)]


def test_overlapping_placement_is_refused(sim_node: MakeNode) -> None:
    gpu = sim_node("a100-40gb:1;mig=on")
    gpu.create_gpu_instance(0, _id("a100-40gb", "2g.10gb"), start=0)
    with pytest.raises(errors.InsufficientResources, match="overlaps"):
        gpu.create_gpu_instance(0, _id("a100-40gb", "1g.10gb"), start=0)
    with pytest.raises(errors.InvalidArgument, match="cannot start at 1"):
        gpu.create_gpu_instance(0, _id("a100-40gb", "2g.10gb"), start=1)


def test_max_count_and_instance_limit(sim_node: MakeNode) -> None:
    gpu = sim_node("a100-40gb:1;mig=on")
    me = _id("a100-40gb", "1g.5gb+me")
    gpu.create_gpu_instance(0, me)
    with pytest.raises(errors.InsufficientResources, match="max count 1"):
        gpu.create_gpu_instance(0, me)
    for _ in range(6):
        gpu.create_gpu_instance(0, _id("a100-40gb", "1g.5gb"))
    with pytest.raises(errors.InsufficientResources):
        gpu.create_gpu_instance(0, _id("a100-40gb", "1g.5gb"))


def test_unknown_profile_id_is_invalid(sim_node: MakeNode) -> None:
    gpu = sim_node("h200:1;mig=on")
    with pytest.raises(errors.InvalidArgument, match="no GPU-instance profile with id 47"):
        gpu.create_gpu_instance(0, 47)


def test_auto_placement_reproduces_the_documented_order_issue(sim_node: MakeNode) -> None:
    a100 = sim_node("a100-40gb:1;mig=on")
    one, two, three = (_id("a100-40gb", p) for p in ("1g.5gb", "2g.10gb", "3g.20gb"))
    a100.create_gpu_instance(0, one)
    a100.create_gpu_instance(0, one)
    a100.create_gpu_instance(0, two)
    with pytest.raises(errors.InsufficientResources):
        a100.create_gpu_instance(0, three)
    other = sim_node("a100-40gb:1;mig=on")
    for pid in (three, one, two, one):
        other.create_gpu_instance(0, pid)
    assert len(other.gpu_instances(0)) == 4


def test_auto_placement_matches_observed_starts(sim_node: MakeNode) -> None:
    h100 = sim_node("h100-80gb:1;mig=on")
    starts = [h100.create_gpu_instance(0, 19).placement.start for _ in range(7)]
    assert starts == [6, 4, 5, 0, 1, 2, 3]
    rtx = sim_node("rtx-pro-6000-se:1;mig=on")
    gis = [rtx.create_gpu_instance(0, 14) for _ in range(4)]
    assert [(g.placement.start, g.id) for g in gis] == [(0, 3), (3, 4), (6, 5), (9, 6)]


def test_remaining_capacity(sim_node: MakeNode) -> None:
    gpu = sim_node("h100-80gb:1;mig=on")
    assert gpu.gpu_instance_remaining_capacity(0, 9) == 2
    gpu.create_gpu_instance(0, 9, start=4)
    assert gpu.gpu_instance_remaining_capacity(0, 9) == 1
    assert gpu.gpu_instance_remaining_capacity(0, 0) == 0


def test_all_media_engine_rule(sim_node: MakeNode) -> None:
    gpu = sim_node("rtx-pro-6000-se:1;mig=on")
    gpu.create_gpu_instance(0, _id("rtx-pro-6000-se", "1g.24gb+me.all"))
    with pytest.raises(errors.InsufficientResources, match="-me"):
        gpu.create_gpu_instance(0, _id("rtx-pro-6000-se", "1g.24gb"))
    gpu.create_gpu_instance(0, _id("rtx-pro-6000-se", "1g.24gb-me"))


def test_driver_gated_profile(sim_node: MakeNode) -> None:
    gpu = sim_node("a100-40gb:1;mig=on;driver=470.82.01")
    assert "1g.10gb" not in {p.name for p in gpu.gpu_instance_profiles(0)}
    with pytest.raises(errors.NotSupported, match="R525"):
        gpu.create_gpu_instance(0, _id("a100-40gb", "1g.10gb"))


def test_media_engines_are_shared_out_whole(sim_node: MakeNode) -> None:
    """An A30 has one JPEG decoder and one OFA: both media profiles cannot have one each."""
    gpu = sim_node("a30:1;mig=on")
    gpu.create_gpu_instance(0, _id("a30", "2g.12gb+me"), start=0)
    with pytest.raises(errors.InsufficientResources, match=r"NVJPG 2 > 1, OFA 2 > 1"):
        gpu.create_gpu_instance(0, _id("a30", "1g.6gb+me"), start=2)
    gpu.create_gpu_instance(0, _id("a30", "1g.6gb"), start=2)
    assert gpu.gpu_instance_remaining_capacity(0, _id("a30", "1g.6gb+me")) == 0
    assert gpu.gpu_instance_remaining_capacity(0, _id("a30", "1g.6gb")) == 1


def test_driver_gated_combination(sim_node: MakeNode) -> None:
    old = sim_node("a100-40gb:1;mig=on;driver=470.82.01")
    old.create_gpu_instance(0, _id("a100-40gb", "4g.20gb"), start=0)
    with pytest.raises(
        errors.NotSupported, match=r"3g.20gb \+ 4g.20gb on one GPU needs driver R510\+"
    ):
        old.create_gpu_instance(0, _id("a100-40gb", "3g.20gb"), start=4)
    SimControls.of(old).set_driver_version("510.47.03")
    old.create_gpu_instance(0, _id("a100-40gb", "3g.20gb"), start=4)


# -- compute instances and MIG devices -----------------------------------------------------------


def test_destroying_a_gpu_instance_with_compute_instances_is_refused(sim_node: MakeNode) -> None:
    gpu = sim_node("h200:1;mig=on")
    gi = gpu.create_gpu_instance(0, _id("h200", "3g.71gb"))
    ci = gpu.create_compute_instance(0, gi.id, 2)
    with pytest.raises(errors.InUse, match="compute instances"):
        gpu.destroy_gpu_instance(0, gi.id)
    gpu.destroy_compute_instance(0, gi.id, ci.id)
    gpu.destroy_gpu_instance(0, gi.id)
    assert gpu.gpu_instances(0) == []


def test_destroying_an_instance_with_a_running_client_is_refused(sim_node: MakeNode) -> None:
    gpu = sim_node("h200:1;mig=on")
    gi = gpu.create_gpu_instance(0, _id("h200", "1g.18gb"))
    ci = gpu.create_compute_instance(0, gi.id, 0)
    (device,) = gpu.mig_devices(0)
    SimControls.of(gpu).start_process(0, pid=77, used_memory_mib=512, mig_device=device.uuid)
    with pytest.raises(errors.InUse, match="running processes"):
        gpu.destroy_compute_instance(0, gi.id, ci.id)
    SimControls.of(gpu).stop_process(0, 77)
    gpu.destroy_compute_instance(0, gi.id, ci.id)


def test_compute_instances_share_the_gpu_instance(sim_node: MakeNode) -> None:
    gpu = sim_node("a100-40gb:1;mig=on")
    gi = gpu.create_gpu_instance(0, _id("a100-40gb", "3g.20gb"))
    names = [p.name for p in gpu.compute_instance_profiles(0, gi.id)]
    assert names == ["1c.3g.20gb", "2c.3g.20gb", "3g.20gb"]
    gpu.create_compute_instance(0, gi.id, 1)  # 2c
    gpu.create_compute_instance(0, gi.id, 0)  # 1c
    with pytest.raises(errors.InsufficientResources):
        gpu.create_compute_instance(0, gi.id, 0)
    devices = gpu.mig_devices(0)
    assert [d.profile for d in devices] == ["2c.3g.20gb", "1c.3g.20gb"]
    assert all(d.uuid.startswith("MIG-") for d in devices)
    assert {d.memory_mib for d in devices} == {19968}


# -- faults and events -----------------------------------------------------------------------


def test_injected_xid_is_delivered_once(sim_node: MakeNode) -> None:
    gpu = sim_node("h100-80gb:2")
    assert gpu.wait_for_event(0.01) is None
    SimControls.of(gpu).inject_xid(1, 48)
    event = gpu.wait_for_event(1.0)
    assert event is not None
    assert (event.device_index, event.type, event.xid) == (1, EventType.XID, 48)
    assert gpu.wait_for_event(0.05) is None


def _inject_xid_elsewhere(path: str) -> None:
    SimControls.of(SimNvml(Path(path))).inject_xid(0, 43)


def test_a_waiter_sees_events_written_by_this_process_and_by_others(
    sim_node: MakeNode, tmp_path: Path
) -> None:
    gpu = sim_node("h100-80gb:2")
    other = threading.Timer(0.2, lambda: SimControls.of(gpu).inject_xid(1, 94))
    other.start()
    event = gpu.wait_for_event(30.0)  # woken by the write, not by the time running out
    other.join()
    assert event is not None and (event.device_index, event.xid) == (1, 94)
    elsewhere = multiprocessing.get_context("spawn").Process(
        target=_inject_xid_elsewhere, args=(str(gpu.store.path),)
    )
    elsewhere.start()
    event = gpu.wait_for_event(30.0)
    elsewhere.join()
    assert event is not None and (event.device_index, event.xid) == (0, 43)


def test_waiting_for_events_does_not_reread_an_unchanged_state(
    sim_node: MakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thousand in-process nodes wait on their GPUs at once: waiting must cost nothing
    while nothing happens (one read when the handle first waits, none after)."""
    gpu = sim_node("l4:1")
    reads = []
    read = StateFile._read

    def counted(self):  # type: ignore[no-untyped-def]
        reads.append(1)
        return read(self)

    monkeypatch.setattr(StateFile, "_read", counted)
    assert gpu.wait_for_event(0.3) is None
    assert gpu.wait_for_event(0.3) is None  # the device plugin waits again and again
    assert len(reads) == 1
    SimControls.of(gpu).inject_xid(0, 31)
    event = gpu.wait_for_event(0.3)
    assert event is not None and event.xid == 31


def test_a_handle_only_sees_events_after_it_opened(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    first = SimNvml.create(path, "l4:1")
    SimControls.of(first).inject_xid(0, 31)
    late = SimNvml(path)
    assert late.wait_for_event(0.05) is None


def test_lost_gpu_raises_until_reset(sim_node: MakeNode) -> None:
    gpu = sim_node("l40s:2")
    SimControls.of(gpu).lose_gpu(0)
    event = gpu.wait_for_event(1.0)
    assert event is not None
    assert (event.type, event.xid) == (EventType.GPU_LOST, 79)
    with pytest.raises(errors.GpuIsLost):
        gpu.device(0)
    assert gpu.device(1).name == "NVIDIA L40S"
    gpu.reset(0)
    assert gpu.device(0).name == "NVIDIA L40S"


def test_memory_and_utilisation_follow_processes(sim_node: MakeNode) -> None:
    gpu = sim_node("l4:1")
    assert gpu.memory(0).used_mib == 0
    SimControls.of(gpu).start_process(0, pid=1, used_memory_mib=2048, sm_percent=40)
    assert gpu.memory(0).used_mib == 2048
    assert gpu.utilization(0).gpu_percent == 40
    assert [p.pid for p in gpu.processes(0)] == [1]


def test_lab_controls_are_apart_from_the_nvml_interface(tmp_path: Path) -> None:
    import kubegpu.nvml

    controls = ("inject_xid", "lose_gpu", "set_display_mode", "start_process", "reboot", "set_busy")
    assert not any(hasattr(SimNvml, name) for name in controls)
    assert all(hasattr(SimControls, name) for name in controls)
    assert not hasattr(kubegpu.nvml, "SimNvml")
    gpu = SimNvml.create(tmp_path / "n.json", "l4:1")
    lab = SimControls(tmp_path / "n.json")  # a separate handle on the same node
    lab.start_process(0, pid=3, used_memory_mib=100)
    assert [p.pid for p in gpu.processes(0)] == [3]


def test_controls_book_changes_at_their_nvml_handles_clock(tmp_path: Path) -> None:
    gpu = SimNvml.create(tmp_path / "n.json", "l4:1")
    lab = SimControls.of(gpu)
    gpu.clock = lambda: 1234.5
    assert lab.clock() == 1234.5


def test_corrupt_state_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(errors.UnknownError, match="not valid JSON"):
        SimNvml(path)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.unlink(),
        lambda p: p.write_text("{not json"),
        lambda p: p.write_bytes(b"\xff\xfe{}"),
        lambda p: p.write_text("[]"),
        lambda p: p.write_text('{"version": 99}'),
    ],
    ids=["deleted", "not-json", "not-utf8", "not-an-object", "other-version"],
)
def test_a_lost_or_corrupt_state_file_raises_nvml_errors_only(
    tmp_path: Path, damage: Callable[[Path], object]
) -> None:
    """What reads and changes see once the node's state is gone: NVML's Unknown Error, as
    from a driver that lost its GPUs, never an OSError or ValueError."""
    path = tmp_path / "n.json"
    gpu = SimNvml.create(path, "l4:1")
    damage(path)
    calls: list[Callable[[], object]] = [
        gpu.device_count,
        lambda: gpu.device(0),
        lambda: gpu.sample(0),
        lambda: gpu.wait_for_event(0.01),
        lambda: gpu.set_mig_mode(0, True),
    ]
    for call in calls:
        with pytest.raises(errors.UnknownError, match=r"sim GPU state .*n\.json"):
            call()
