"""Which GPUs a change repartitions and which of those pods hold: the one judgement the MIG
manager acts on and what-if reports (`kubegpu.mig.holders`, `ConfigPlan.changing`)."""

from __future__ import annotations

from pathlib import Path

from kubegpu.mig.config import parse_config
from kubegpu.mig.holders import busy_gpus, gpu_of_device, held_gpus
from kubegpu.mig.parted import apply_config, plan_config, read_node
from kubegpu.nvml.sim import SimNvml
from kubegpu.sharing.replicas import physical_id, replica_id

LAYOUTS = parse_config(
    "version: v1\nmig-configs:\n"
    "  first-split:\n"
    "    - {devices: [0], mig-enabled: true, mig-devices: {'3g.71gb': 2}}\n"
    "    - {devices: [1, 2], mig-enabled: false}\n"
    "  both-split:\n"
    "    - {devices: [0, 1], mig-enabled: true, mig-devices: {'3g.71gb': 2}}\n"
    "    - {devices: [2], mig-enabled: false}\n"
)


def test_every_id_a_plugin_hands_out_names_its_gpu(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "n.json", "h200-nvl:3")
    apply_config(nvml, "first-split", LAYOUTS.mig_configs["first-split"])
    gpu_of = gpu_of_device(nvml)
    mig = nvml.mig_devices(0)
    assert {gpu_of[m.uuid] for m in mig} == {0}
    assert gpu_of["0:0"] == gpu_of["0:1"] == 0
    assert gpu_of[nvml.device(2).uuid] == gpu_of["2"] == 2
    held = [
        ("ml/a", "nvidia.com/mig-3g.71gb", mig[0].uuid),
        ("ml/b", "nvidia.com/gpu", physical_id(replica_id(nvml.device(1).uuid, 3))),
        ("ml/c", "nvidia.com/gpu", "2"),
        ("ml/d", "example.com/fpga", nvml.device(2).uuid),  # another vendor's: not counted
        ("ml/e", "nvidia.com/gpu", "GPU-not-on-this-node"),
    ]
    assert held_gpus(held, gpu_of) == {"ml/a": {0}, "ml/b": {1}, "ml/c": {2}}


def test_only_the_gpus_a_change_repartitions_are_busy(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "n.json", "h200-nvl:3")
    apply_config(nvml, "first-split", LAYOUTS.mig_configs["first-split"])
    plan = plan_config(nvml, "both-split", LAYOUTS.mig_configs["both-split"])
    changing = plan.changing(read_node(nvml))
    assert changing == [1]  # GPU 0 already has its layout, GPU 2 stays whole
    holders = {"ml/a": {0}, "ml/b": {1}, "ml/c": {1, 2}}
    assert busy_gpus(holders, changing) == {1: {"ml/b", "ml/c"}}
    assert busy_gpus(holders, []) == {}
