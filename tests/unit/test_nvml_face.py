"""The `nvml` face loads no simulator: a component on a real node never loads the simulated
backend, not even indirectly (the import contract checks the source; this checks what a
fresh interpreter actually loads)."""

from __future__ import annotations

import subprocess
import sys

import pytest

ENTRYPOINTS = [
    "kubegpu.nvml",
    "kubegpu.node.gpus",
    "kubegpu.cli.app",
    "kubegpu.cli.device_plugin",
    "kubegpu.cli.mps",
    "kubegpu.cli.exporter",
    "kubegpu.cli.feature_discovery",
    "kubegpu.cli.node_labeller",
    "kubegpu.cli.mig_manager",
    "kubegpu.cli.dra_plugin",
    "kubegpu.cli.validator",
    "kubegpu.device_plugin.runner",
    "kubegpu.exporter.program",
    "kubegpu.feature_discovery.program",
    "kubegpu.mig_manager.program",
    "kubegpu.dra.program",
    "kubegpu.validator.program",
]

PROBE = """
import importlib, sys
importlib.import_module(sys.argv[1])
loaded = sorted(m for m in sys.modules if m == "kubegpu.nvml.sim" or m.startswith("kubegpu.nvml.sim."))
print(",".join(loaded))
"""


@pytest.mark.parametrize("module", ENTRYPOINTS)
def test_importing_a_component_loads_no_simulator(module: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "", f"{module} loads {out.stdout.strip()}"


def test_the_simulated_node_spec_is_still_reachable_from_the_face() -> None:
    from kubegpu import nvml

    spec = nvml.parse_spec("h200-nvl:2")
    assert [(model.id, count) for model, count in spec.gpus] == [("h200-nvl", 2)]
    with pytest.raises(nvml.SpecError):
        nvml.parse_spec("no-such-gpu:1")
