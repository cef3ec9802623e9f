"""The files README's first steps hand to `kubectl` (examples/walkthrough/): each loads as the
component that reads it will load it, and the MPS config shows why the walkthrough drops the
ClusterPolicy's mig.strategy before using it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubegpu.sharing.config import SharingConfigError, parse_config
from kubegpu.sim.cluster import load_cluster

WALKTHROUGH = Path(__file__).parents[2] / "examples" / "walkthrough"
INFERENCE_MIX = Path(__file__).parents[2] / "examples" / "mig-configs" / "inference-mix.yaml"


def configs() -> dict[str, str]:
    doc = yaml.safe_load((WALKTHROUGH / "device-plugin-config.yaml").read_text())
    assert doc["kind"] == "ConfigMap"
    data: dict[str, str] = doc["data"]
    return data


def test_the_walkthrough_cluster_has_the_four_h200s_inference_mix_names() -> None:
    spec = load_cluster(WALKTHROUGH / "cluster.yaml")
    (h200,) = [n for n in spec.nodes if n.name == "gpu-h200"]
    layout = yaml.safe_load(INFERENCE_MIX.read_text())["mig-configs"]["inference-mix"]
    named = sorted(i for entry in layout for i in entry["devices"])
    assert h200.gpus == f"h200-nvl:{len(named)}" and named == list(range(len(named)))


@pytest.mark.parametrize(
    ("name", "strategy", "sharing"),
    [
        ("mig-mixed", "mixed", "none"),
        ("time-sliced", "none", "time-slicing"),
        ("mps", "none", "mps"),
    ],
)
def test_each_device_plugin_config_loads(name: str, strategy: str, sharing: str) -> None:
    config = parse_config(configs()[name], name)
    assert (config.flags.mig_strategy, config.sharing_strategy) == (strategy, sharing)
    if sharing != "none":
        replicated = config.replicated
        assert replicated is not None and replicated.rename_by_default
        assert [r.replicas for r in replicated.resources] == [4]
        assert config.fail_requests_greater_than_one


def test_mps_is_refused_under_a_cluster_wide_mixed_strategy() -> None:
    """The operator passes mig.strategy as MIG_STRATEGY, which outranks the file."""
    with pytest.raises(SharingConfigError, match="mixed is not supported with MPS"):
        parse_config(configs()["mps"], "mps", overrides={"MIG_STRATEGY": "mixed"})
