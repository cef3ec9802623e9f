"""`kubegpu plan --explain` says each planned GPU's isolation in the words the node label,
the pod annotation and the exporter use (`kubegpu.sharing.isolation`)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kubegpu.cli import app
from kubegpu.sharing.isolation import Method, describe

EXAMPLE = Path(__file__).parents[2] / "examples" / "plan" / "seeds-world.yaml"


def test_explain_says_the_isolation_of_every_used_gpu() -> None:
    result = CliRunner().invoke(
        app, ["plan", "-f", str(EXAMPLE), "--explain", "--solver", "heuristic"]
    )
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())  # rich wraps long lines
    assert "Isolation" in out
    for method in (Method.EXCLUSIVE, Method.MIG):
        assert describe(method) in out, method
    assert any(describe(m) in out for m in (Method.MPS, Method.TIME_SLICED))
