"""scripts/gpu-readonly-check compares NVML's answers with the catalog and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubegpu.nvml.sim import SimNvml

SCRIPT = Path(__file__).parents[2] / "scripts" / "gpu-readonly-check"


def test_a_simulated_node_matches_the_catalog(tmp_path: Path) -> None:
    state = tmp_path / "n.json"
    node = SimNvml.create(state, "h100-80gb:1,l4:1;mig=on")
    before = state.read_text()
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--nvml", f"sim:{state}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-> h100-80gb" in out
    assert "1g.10gb          id  19 enum  0" in out
    assert "starts [0, 1, 2, 3, 4, 5, 6]" in out
    assert "MIG: not supported (catalog: no MIG)" in out
    assert out.strip().endswith("0 difference(s) from the catalog")
    assert node.mig_mode(0).current
    assert state.read_text() == before  # read-only
