"""The simulated GPUs' telemetry: plausible, driven by what runs, deterministic under a seed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kubegpu.nvml import errors
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.nvml.sim.telemetry import BUCKET_S, FIGURES

T0 = 1_800_000_000.0  # a fixed moment; the clock is pinned so values can be compared

MakeNode = Callable[[str], SimNvml]


def pinned(node: SimNvml, at: float = T0) -> SimNvml:
    node.clock = lambda: at
    return node


def test_the_same_seed_and_moment_give_the_same_readings(tmp_path: Path) -> None:
    a = pinned(SimNvml.create(tmp_path / "a.json", "h200:2;seed=lab"))
    b = pinned(SimNvml.create(tmp_path / "b.json", "h200:2;seed=lab"))
    other = pinned(SimNvml.create(tmp_path / "c.json", "h200:2;seed=elsewhere"))
    for node in (a, b, other):
        SimControls.of(node).set_busy({node.device(1).uuid: 1})
    for index in (0, 1):
        sa, sb = a.sample(index), b.sample(index)
        assert (sa.power_w, sa.gpu_temp_c, sa.utilization, sa.activity) == (
            sb.power_w,
            sb.gpu_temp_c,
            sb.utilization,
            sb.activity,
        )
    assert a.sample(1).activity != other.sample(1).activity  # another seed, another workload


def test_an_idle_gpu_is_quiet_but_not_frozen(sim_node: MakeNode) -> None:
    node = pinned(sim_node("h100-80gb:1;seed=idle"))
    figures = FIGURES["h100-80gb"]
    s = node.sample(0)
    assert s.utilization is not None and s.utilization.gpu_percent == 0
    assert s.memory is not None and s.memory.used_mib == 0
    assert s.clocks is not None and s.clocks.sm_mhz == figures.sm_idle_mhz
    assert s.power_w == pytest.approx(figures.idle_power_w, abs=0.01 * figures.board_power_w)
    assert s.activity.graphics_active == 0
    readings = set()
    for bucket in range(8):  # power wanders a little from one time bucket to the next

        def at(b: int = bucket) -> float:
            return T0 + b * BUCKET_S

        node.clock = at
        readings.add(node.sample(0).power_w)
    assert len(readings) > 1


def test_an_allocated_gpu_runs_a_plausible_load(sim_node: MakeNode) -> None:
    node = pinned(sim_node("h100-80gb:2;seed=busy"))
    idle, _ = node.sample(0), None
    SimControls.of(node).set_busy({node.device(1).uuid: 1})
    busy = node.sample(1)
    figures = FIGURES["h100-80gb"]
    assert busy.utilization is not None and 32 <= busy.utilization.gpu_percent <= 100
    assert busy.memory is not None and busy.memory.used_mib >= 0.3 * busy.memory.total_mib
    assert busy.clocks is not None and busy.clocks.sm_mhz > 0.9 * figures.sm_max_mhz
    assert idle.power_w is not None and busy.power_w is not None
    assert idle.power_w < busy.power_w <= figures.board_power_w * 1.01
    assert idle.gpu_temp_c is not None and busy.gpu_temp_c is not None
    assert busy.gpu_temp_c > idle.gpu_temp_c
    assert busy.memory_temp_c is not None and busy.gpu_temp_c is not None
    assert busy.memory_temp_c > busy.gpu_temp_c
    ratios = busy.activity
    assert ratios.graphics_active == pytest.approx(busy.utilization.gpu_percent / 100, abs=0.01)
    assert ratios.tensor_active is not None and ratios.graphics_active is not None
    assert 0 < ratios.tensor_active < ratios.graphics_active
    assert ratios.pcie_rx_bytes_per_s is not None and ratios.pcie_rx_bytes_per_s > 0
    # memory() and utilization() agree with the sample
    assert node.memory(1).used_mib == busy.memory.used_mib
    assert node.utilization(1) == busy.utilization


def test_more_pods_sharing_a_gpu_load_it_more(sim_node: MakeNode) -> None:
    node = pinned(sim_node("l40s:1;seed=shared"))
    uuid = node.device(0).uuid
    SimControls.of(node).set_busy({uuid: 1})
    one = node.sample(0)
    SimControls.of(node).set_busy({uuid: 3})
    three = node.sample(0)
    assert one.memory is not None and three.memory is not None
    assert three.memory.used_mib > one.memory.used_mib
    assert three.memory.used_mib <= 0.95 * three.memory.total_mib
    assert one.utilization is not None and three.utilization is not None
    assert three.utilization.gpu_percent >= one.utilization.gpu_percent


def test_processes_count_exactly_and_add_to_pod_load(sim_node: MakeNode) -> None:
    node = pinned(sim_node("l4:1;seed=procs"))
    SimControls.of(node).start_process(0, pid=1, used_memory_mib=2048, sm_percent=40)
    s = node.sample(0)
    assert s.utilization is not None and s.utilization.gpu_percent == 40
    assert s.memory is not None and s.memory.used_mib == 2048
    assert s.memory_temp_c is None  # GDDR: no memory temperature sensor
    with pytest.raises(errors.NotSupported):
        node.memory_temperature(0)


def test_mig_instances_carry_their_own_load(sim_node: MakeNode) -> None:
    node = pinned(sim_node("a100-40gb:1;seed=mig"))
    node.set_mig_mode(0, True)
    node.reset(0)  # Ampere: MIG mode applies after a reset
    for profile_id in (19, 19, 9):  # two 1g.5gb and a 3g.20gb
        gi = node.create_gpu_instance(0, profile_id)
        node.create_compute_instance(0, gi.id, 0 if profile_id == 19 else 2)
    devices = node.mig_devices(0)
    busy = next(d for d in devices if d.profile == "1g.5gb")
    SimControls.of(node).set_busy({busy.uuid: 1})
    s = node.sample(0)
    assert s.mig_enabled and s.utilization is None  # NVML: no utilisation rates under MIG
    with pytest.raises(errors.NotSupported):
        node.utilization(0)
    by_id = {gi.gpu_instance_id: gi for gi in s.gpu_instances}
    loaded = by_id[busy.gpu_instance_id]
    assert loaded.profile == "1g.5gb"
    assert loaded.mig_device_uuids == (busy.uuid,)
    assert loaded.activity.graphics_active is not None and loaded.activity.graphics_active > 0.3
    assert loaded.memory is not None and loaded.memory.used_mib > 0
    assert loaded.memory.total_mib == 4864
    others = [gi for gi in s.gpu_instances if gi is not loaded]
    assert [gi.activity.graphics_active for gi in others] == [0.0, 0.0]
    # the GPU as a whole: the instance's load weighted by its share of the compute slices
    assert s.activity.graphics_active == pytest.approx(loaded.activity.graphics_active / 7)
    assert node.activity(0, busy.gpu_instance_id) == loaded.activity
    assert node.gpu_instance_memory(0, busy.gpu_instance_id) == loaded.memory


def test_energy_is_a_counter_that_follows_power(sim_node: MakeNode) -> None:
    node = pinned(sim_node("h200:1;seed=energy"))
    figures = FIGURES["h200"]
    start = node.total_energy(0)
    node.clock = lambda: T0 + 100
    idle_100s = node.total_energy(0) - start
    assert idle_100s == pytest.approx(figures.idle_power_w * 100 * 1000, rel=0.01)
    SimControls.of(node).set_busy({node.device(0).uuid: 1})  # booked up to now at idle power
    node.clock = lambda: T0 + 200
    busy_100s = node.total_energy(0) - start - idle_100s
    assert busy_100s > 3 * idle_100s
    SimControls.of(node).set_busy({})
    node.clock = lambda: T0 + 201
    assert node.total_energy(0) > start + idle_100s + busy_100s  # never goes back


def test_a_lost_gpu_reports_nothing(sim_node: MakeNode) -> None:
    node = sim_node("l4:2;seed=lost")
    SimControls.of(node).lose_gpu(1)
    with pytest.raises(errors.GpuIsLost):
        node.sample(1)
    assert node.sample(0).power_w is not None
