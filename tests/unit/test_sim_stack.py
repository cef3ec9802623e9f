"""The simulated stack's pure parts: where the Helm chart is found, and the demo's plan for
a cluster (which node is sliced how, what it then advertises, how many pods it runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.sim.cluster import ClusterSpec, NodeEntry
from kubegpu.sim.stack import (
    CHART_ENV,
    ChartNotFoundError,
    find_chart,
    plan_demo,
    simulated_values,
)

ROOT = Path(__file__).parents[2]
CHART = ROOT / "deploy" / "helm" / "kubegpu"


def _chart(at: Path) -> Path:
    at.mkdir(parents=True)
    (at / "Chart.yaml").write_text("apiVersion: v2\nname: kubegpu\nversion: 0.1.0\n")
    return at


def test_the_chart_is_found_in_the_source_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHART_ENV, raising=False)
    assert find_chart() == CHART


def test_a_named_chart_wins_over_the_environment_and_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CHART_ENV, str(_chart(tmp_path / "from-env")))
    assert find_chart() == tmp_path / "from-env"
    assert find_chart(_chart(tmp_path / "named")) == tmp_path / "named"


def test_a_named_path_without_a_chart_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ChartNotFoundError, match=rf"--chart {tmp_path}: not a Helm chart"):
        find_chart(tmp_path)
    monkeypatch.setenv(CHART_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ChartNotFoundError, match=rf"\${CHART_ENV} {tmp_path}/nowhere"):
        find_chart()


def test_outside_a_checkout_the_error_says_how_to_name_the_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CHART_ENV, raising=False)
    installed = tmp_path / "site-packages" / "kubegpu" / "sim"
    installed.mkdir(parents=True)
    with pytest.raises(ChartNotFoundError, match=rf"pass --chart or set \${CHART_ENV}"):
        find_chart(search=[installed])
    # a checkout further up is found from anywhere below it
    _chart(tmp_path / "deploy" / "helm" / "kubegpu")
    assert find_chart(search=[installed]) == tmp_path / "deploy" / "helm" / "kubegpu"


def test_simulated_values_keep_what_the_simulation_needs_under_extra_values() -> None:
    values = simulated_values(4321, {"operator": {"logLevel": "DEBUG"}, "gfd": {"enabled": False}})
    assert values["operator"] == {"healthPort": 4321, "resources": None, "logLevel": "DEBUG"}
    assert values["gfd"] == {"enabled": False}
    assert {"name": "DCGM_EXPORTER_LISTEN", "value": "127.0.0.1:0"} in values["dcgmExporter"]["env"]


def test_the_demo_slices_the_mig_node_and_shares_the_others() -> None:
    spec = ClusterSpec(
        nodes=[
            NodeEntry(name="gpu-h200", gpus="h200-nvl:8"),
            NodeEntry(name="gpu-rtx", gpus="rtx-pro-6000-ws:2;display=compute"),
            NodeEntry(name="gpu-l4", gpus="l4:4"),
            NodeEntry(name="cpu-1"),
        ]
    )
    plan = plan_demo(spec)
    assert (plan.mig_node, plan.mig_config) == ("gpu-h200", "all-1g.18gb")
    # the first node without MIG is time-sliced; a MIG-capable card that is not the MIG node
    # is MPS-shared
    assert plan.shared == {"gpu-rtx": "mps", "gpu-l4": "time-sliced"}
    assert plan.expect == {"gpu-h200": 7 * 8, "gpu-rtx": 4 * 2, "gpu-l4": 4 * 4}
    assert plan.pods == {"gpu-h200": 3, "gpu-rtx": 2, "gpu-l4": 3}
    assert plan.layouts["gpu-l4"] == "time-sliced, 4 replicas per GPU"
    assert plan.gpus["gpu-l4"] == {"NVIDIA L4": 4}
    assert "cpu-1" not in plan.gpus


def test_without_a_mig_capable_node_the_first_is_time_sliced_and_the_rest_mps() -> None:
    spec = ClusterSpec(nodes=[NodeEntry(name="a", gpus="l4:1"), NodeEntry(name="b", gpus="l4:2")])
    plan = plan_demo(spec)
    assert (plan.mig_node, plan.mig_config) == (None, None)
    assert plan.shared == {"a": "time-sliced", "b": "mps"}
    assert plan.expect == {"a": 4, "b": 8}
    assert plan.pods == {"a": 3, "b": 2}
