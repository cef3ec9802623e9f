"""After a crash, the next run sees the GPUs as they really are and repairs them.

An apply killed between creating a GPU instance and its compute instance leaves a GPU
instance that is no MIG device. `show`, `assert` and `export` must report it, and the
next `apply` must replace it, whatever point the previous one died at.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubegpu.cli import app
from kubegpu.mig.config import parse_config
from kubegpu.mig.parted import (
    NodeStateError,
    apply_config,
    assert_config,
    describe_node,
    export_config,
    read_node,
)
from kubegpu.nvml.sim import SimNvml

MakeNode = Callable[[str], SimNvml]
runner = CliRunner()
CONFIGS = """version: v1
mig-configs:
  six:
    - devices: all
      mig-enabled: true
      mig-devices: {1g.18gb: 6}
  seven:
    - devices: all
      mig-enabled: true
      mig-devices: {1g.18gb: 7}
  balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}
"""
CFG = parse_config(CONFIGS)


def _orphan_one(node: SimNvml, index: int = 0) -> str:
    """Leave one GPU instance of GPU `index` without its compute instance, as a crash does."""
    gi = node.gpu_instances(index)[-1]
    for ci in node.compute_instances(index, gi.id):
        node.destroy_compute_instance(index, gi.id, ci.id)
    return f"1g.18gb@{gi.placement.start}"


def test_a_gpu_instance_without_compute_instance_is_seen_and_repaired(
    sim_node: MakeNode,
) -> None:
    node = sim_node("h200:1")
    apply_config(node, "seven", CFG.mig_configs["seven"])
    where = _orphan_one(node)
    # six MIG devices remain, exactly what config 'six' asks for: only the leftover differs
    six = CFG.mig_configs["six"]
    state = read_node(node)[0]
    assert state.empty_instances == (where,)
    assert f"GPU instances without a compute instance: {where}" in describe_node(node)
    problems = assert_config(node, "six", six)
    assert len(problems) == 1
    assert problems[0].startswith("GPU 0 (h200): MIG enabled, 1g.18gbx6; GPU instances without")
    with pytest.raises(
        NodeStateError, match=rf"GPU 0 has GPU instances without a compute instance \({where}\)"
    ):
        export_config(node)
    result = apply_config(node, "six", six)
    assert not result.already_applied
    assert 0 in result.changed
    assert assert_config(node, "six", six) == []
    assert read_node(node)[0].empty_instances == ()
    assert len(node.gpu_instances(0)) == 6


def test_the_cli_reports_and_repairs_the_leftover(tmp_path: Path) -> None:
    state = tmp_path / "node.json"
    configs = tmp_path / "c.yaml"
    configs.write_text(CONFIGS)
    nvml = ["--nvml", f"sim:{state}", "--sim-node", "h200:1"]
    assert (
        runner.invoke(app, ["mig", "apply", "-f", str(configs), "-c", "seven", *nvml]).exit_code
        == 0
    )
    where = _orphan_one(SimNvml(state))
    show = runner.invoke(app, ["mig", "show", *nvml])
    assert f"GPU instances without a compute instance: {where}" in show.stdout
    export = runner.invoke(app, ["mig", "export", *nvml])
    assert export.exit_code == 1
    assert "left by an interrupted change; `kubegpu mig apply` replaces them" in export.stderr
    check = ["mig", "assert", "-f", str(configs), "-c", "six", *nvml]
    assert runner.invoke(app, check).exit_code == 1
    apply = runner.invoke(app, ["mig", "apply", "-f", str(configs), "-c", "six", *nvml])
    assert apply.exit_code == 0, apply.stderr
    assert "config 'six' applied\n" in apply.stdout
    assert runner.invoke(app, check).exit_code == 0


def test_stray_temporary_state_files_are_removed_by_the_next_write(sim_node: MakeNode) -> None:
    node = sim_node("h200:1")
    state = node.state_file()
    assert state is not None
    stray = state.with_name(state.name + ".k1ll3d.tmp")
    stray.write_text("{half a state")
    apply_config(node, "six", CFG.mig_configs["six"])
    assert list(state.parent.glob(state.name + ".*.tmp")) == []


def _serial(state: Path) -> int:
    """How many changes the sim node has seen (state writes are atomic renames)."""
    return int(json.loads(state.read_text())["serial"])


@pytest.mark.parametrize("round_", range(3))
def test_an_apply_killed_at_a_random_point_converges_on_the_next_run(
    tmp_path: Path, round_: int
) -> None:
    base = int(os.environ.get("KUBEGPU_CHAOS_SEED", time.time_ns() % 1_000_000))
    seed = base + round_
    print(f"seed {seed} (replay the set with KUBEGPU_CHAOS_SEED={base})")
    rng = random.Random(seed)
    state = tmp_path / "node.json"
    configs = tmp_path / "c.yaml"
    configs.write_text(CONFIGS)
    node = SimNvml.create(state, "h200:4")
    apply_config(node, "balanced", CFG.mig_configs["balanced"])
    # balanced -> seven on 4 GPUs: 8 destroys and 14 creations per GPU
    kill_after = rng.randint(1, 4 * 22 - 1)
    before = _serial(state)
    argv = [sys.executable, "-m", "kubegpu", "mig", "apply", "-f", str(configs), "-c", "seven"]
    victim = subprocess.Popen(
        [*argv, "--nvml", f"sim:{state}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while victim.poll() is None and time.monotonic() < deadline:
        if _serial(state) - before >= kill_after:
            break
        time.sleep(0.0005)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    print(f"killed after {_serial(state) - before} changes (aimed at {kill_after}); GPUs then:")
    print(describe_node(node))
    seven = CFG.mig_configs["seven"]
    apply_config(node, "seven", seven)
    assert assert_config(node, "seven", seven) == []
    assert all(s.empty_instances == () for s in read_node(node))
    assert list(tmp_path.glob("node.json.*.tmp")) == []
