"""A snapshot read back into the twin it describes: GPUs from feature discovery's labels,
the user's labels and configs kept, what kubegpu regenerates left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kubegpu.catalog import nvidia
from kubegpu.cli.app import app
from kubegpu.doctor.snapshot import ConfigMapInfo, CustomObject, NodeInfo, PodInfo, Snapshot
from kubegpu.nvml import parse_spec
from kubegpu.whatif import command
from kubegpu.whatif.twin_spec import (
    TwinSpecError,
    copied_labels,
    node_gpus,
    simulated_spec,
    twin_spec,
)

H100 = "NVIDIA-H100-80GB-HBM3"
LAYOUTS = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  half:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [1, 2]
      mig-enabled: false
"""


def gpu_node(name: str = "gpu-1", **labels: str) -> NodeInfo:
    base = {
        nvidia.GPU_PRESENT: "true",
        nvidia.GPU_PRODUCT: H100,
        nvidia.GPU_COUNT: "2",
        nvidia.CUDA_DRIVER_VERSION: "580.95.05",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }
    return NodeInfo(name=name, labels={**base, **labels})


def snapshot(*nodes: NodeInfo, layouts: str | None = None, **more: object) -> Snapshot:
    maps = []
    policies = []
    if layouts is not None:
        maps.append(
            ConfigMapInfo(namespace="gpu-operator", name="layouts", data={"config.yaml": layouts})
        )
        policies.append(
            CustomObject(
                kind="ClusterPolicy",
                name="cluster-policy",
                spec={"migManager": {"config": {"name": "layouts"}}},
            )
        )
    return Snapshot(
        nodes=nodes,
        config_maps=tuple(maps) + tuple(more.get("config_maps", ())),  # type: ignore[arg-type]
        cluster_policies=tuple(policies),
        pods=tuple(more.get("pods", ())),  # type: ignore[arg-type]
    )


def test_whole_gpus_are_the_product_and_count_labels_with_the_driver() -> None:
    node = gpu_node()
    assert node_gpus(node, snapshot(node)) == "h100-80gb:2;driver=580.95.05"
    parse_spec(node_gpus(node, snapshot(node)) or "")  # a spec the simulator takes


@pytest.mark.parametrize("mode", ["graphics", "compute"])
def test_workstation_cards_keep_the_display_mode_feature_discovery_reports(mode: str) -> None:
    node = gpu_node(
        **{
            nvidia.GPU_PRODUCT: "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
            nvidia.GPU_MODE: mode,
        }
    )
    assert node_gpus(node, snapshot(node)) == f"rtx-pro-6000-ws:2;driver=580.95.05;display={mode}"


def test_a_node_without_gpu_labels_is_a_cpu_node() -> None:
    node = NodeInfo(name="cpu-1", labels={"node-role.kubernetes.io/control-plane": ""})
    assert node_gpus(node, snapshot(node)) is None


def test_a_gpu_node_feature_discovery_never_labelled_is_an_error_naming_it() -> None:
    node = NodeInfo(name="gpu-9", labels={nvidia.GPU_PRESENT: "true"})
    with pytest.raises(TwinSpecError, match=r"node gpu-9: .*nvidia.com/gpu.product"):
        node_gpus(node, snapshot(node))


def test_an_unknown_product_is_an_error_naming_the_label_value() -> None:
    node = gpu_node(**{nvidia.GPU_PRODUCT: "NVIDIA-Quantum-9000"})
    with pytest.raises(TwinSpecError, match="NVIDIA-Quantum-9000"):
        node_gpus(node, snapshot(node))


def test_mixed_strategy_mig_devices_start_the_gpus_in_mig_mode() -> None:
    node = gpu_node(**{"nvidia.com/mig-1g.10gb.count": "14", nvidia.MIG_STRATEGY: "mixed"})
    assert node_gpus(node, snapshot(node)) == "h100-80gb:2;driver=580.95.05;mig=on"


def test_time_sliced_gpus_keep_their_count_under_the_shared_product_name() -> None:
    node = gpu_node(**{nvidia.GPU_PRODUCT: H100 + "-SHARED", nvidia.GPU_COUNT: "3"})
    assert node_gpus(node, snapshot(node)) == "h100-80gb:3;driver=580.95.05"


def test_single_strategy_counts_mig_devices_so_the_layout_says_how_many_gpus() -> None:
    node = gpu_node(
        **{
            nvidia.GPU_PRODUCT: H100 + "-MIG-1g.10gb",
            nvidia.GPU_COUNT: "28",
            nvidia.MIG_CONFIG: "all-1g.10gb",
        }
    )
    gpus = node_gpus(node, snapshot(node, layouts=LAYOUTS))
    assert gpus is not None and gpus.startswith("h100-80gb:4;")


def test_single_strategy_with_device_lists_counts_the_listed_gpus() -> None:
    node = gpu_node(
        **{
            nvidia.GPU_PRODUCT: H100 + "-MIG-1g.10gb",
            nvidia.GPU_COUNT: "7",
            nvidia.MIG_CONFIG: "half",
        }
    )
    gpus = node_gpus(node, snapshot(node, layouts=LAYOUTS))
    assert gpus is not None and gpus.startswith("h100-80gb:3;")


def test_single_strategy_without_its_layout_in_the_snapshot_is_an_error() -> None:
    node = gpu_node(
        **{nvidia.GPU_PRODUCT: H100 + "-MIG-1g.10gb", nvidia.GPU_COUNT: "7", nvidia.MIG_CONFIG: "x"}
    )
    with pytest.raises(TwinSpecError, match="layout 'x' is not in the snapshot"):
        node_gpus(node, snapshot(node))


def test_the_generated_layouts_of_the_mig_manager_count_too() -> None:
    node = gpu_node(
        **{
            nvidia.GPU_PRODUCT: H100 + "-MIG-1g.10gb",
            nvidia.GPU_COUNT: "14",
            nvidia.MIG_CONFIG: "all-1g.10gb",
        }
    )
    generated = ConfigMapInfo(
        namespace="gpu-operator", name="gpu-1-mig-config", data={"config.yaml": LAYOUTS}
    )
    gpus = node_gpus(node, snapshot(node, config_maps=[generated]))
    assert gpus is not None and gpus.startswith("h100-80gb:2;")


def test_copied_labels_keep_the_users_and_the_config_selectors_only() -> None:
    labels = {
        "team": "vision",
        "node-role.kubernetes.io/control-plane": "",
        "kubernetes.io/hostname": "gpu-1",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        nvidia.GPU_PRODUCT: H100,
        nvidia.MIG_CONFIG: "all-1g.10gb",
        nvidia.MIG_CONFIG_STATE: "success",
        nvidia.DEVICE_PLUGIN_CONFIG: "time-sliced",
        nvidia.DEPLOY_PREFIX + "dcgm-exporter": "false",
        nvidia.DEPLOY_PREFIX + "device-plugin": "paused-for-mig-change",
    }
    assert copied_labels(labels) == {
        "team": "vision",
        "node-role.kubernetes.io/control-plane": "",
        nvidia.MIG_CONFIG: "all-1g.10gb",
        nvidia.DEVICE_PLUGIN_CONFIG: "time-sliced",
        nvidia.DEPLOY_PREFIX + "dcgm-exporter": "false",
    }


def test_the_simulated_exporter_listens_on_no_fixed_port_and_the_rest_is_kept() -> None:
    spec: dict[str, Any] = {
        "mig": {"strategy": "single"},
        "dcgmExporter": {"env": [{"name": "DCGM_EXPORTER_LISTEN", "value": ":9400"}]},
    }
    out = simulated_spec(spec)
    assert out["mig"] == {"strategy": "single"}
    assert out["dcgmExporter"]["env"] == [{"name": "DCGM_EXPORTER_LISTEN", "value": "127.0.0.1:0"}]
    assert spec["dcgmExporter"]["env"][0]["value"] == ":9400"  # the snapshot is not touched


def test_the_twin_recreates_running_and_pending_gpu_pods_but_not_generated_configmaps() -> None:
    node = gpu_node()
    pods = [
        PodInfo(namespace="ml", name="train", node="gpu-1", phase="Running",
                limits={"nvidia.com/gpu": "1"}),
        PodInfo(namespace="ml", name="waiting", phase="Pending", limits={"nvidia.com/gpu": "4"}),
        PodInfo(namespace="ml", name="done", node="gpu-1", phase="Succeeded",
                limits={"nvidia.com/gpu": "1"}),
        PodInfo(namespace="ml", name="dra", node="gpu-1", phase="Running", claims=("gpu",)),
        PodInfo(namespace="ml", name="web", node="gpu-1", phase="Running"),
    ]  # fmt: skip
    maps = [
        ConfigMapInfo(namespace="gpu-operator", name="plugin-configs", data={"a": "b"}),
        ConfigMapInfo(namespace="gpu-operator", name="kube-root-ca.crt", data={"ca.crt": "x"}),
        ConfigMapInfo(
            namespace="gpu-operator",
            name="gpu-1-mig-config",
            labels={"app.kubernetes.io/managed-by": "kubegpu-mig-manager"},
        ),
    ]
    spec = twin_spec(snapshot(node, pods=pods, config_maps=maps))
    assert [(p.key, p.node, p.resources) for p in spec.pods] == [
        ("ml/train", "gpu-1", {"nvidia.com/gpu": "1"}),
        ("ml/waiting", "", {"nvidia.com/gpu": "4"}),
    ]
    assert [c.name for c in spec.config_maps] == ["plugin-configs"]
    assert spec.skipped == ("pod ml/dra: holds resource claims (DRA), not recreated",)


def test_an_empty_snapshot_has_no_twin() -> None:
    with pytest.raises(TwinSpecError, match="no nodes"):
        twin_spec(Snapshot())


@pytest.mark.parametrize(
    "node",
    [
        NodeInfo(name="cpu-1", labels={"kubernetes.io/os": "linux"}),
        # NFD saw an NVIDIA card, but nothing says which GPUs: the twin cannot start them
        NodeInfo(name="gpu-1", labels={nvidia.NFD_PCI_NVIDIA: "true"}),
    ],
)
def test_a_snapshot_without_a_gpu_node_has_no_twin(node: NodeInfo) -> None:
    cpu_only = Snapshot(source="kubeconfig:other", nodes=(node,))
    with pytest.raises(TwinSpecError, match=r"\(taken from kubeconfig:other\) has no GPU node"):
        twin_spec(cpu_only)


def test_one_gpu_node_among_cpu_nodes_makes_a_twin() -> None:
    cpu = NodeInfo(name="cpu-1", labels={"kubernetes.io/os": "linux"})
    spec = twin_spec(snapshot(cpu, gpu_node()))
    assert [(n.name, n.gpus) for n in spec.nodes] == [
        ("cpu-1", None),
        ("gpu-1", "h100-80gb:2;driver=580.95.05"),
    ]


def test_what_if_run_refuses_a_snapshot_without_a_gpu_node_before_building_a_twin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_twin(*_: object, **__: object) -> None:
        raise AssertionError("a twin was started")

    monkeypatch.setattr(command, "run", no_twin)
    path = tmp_path / "cluster.json"
    path.write_text(Snapshot(nodes=(NodeInfo(name="cpu-1"),)).to_json())
    result = CliRunner().invoke(app, ["what-if", "run", str(path), "--mig-config", "cpu-1=x"])
    assert result.exit_code == 3, result.output
    assert f"{path}: the snapshot has no GPU node" in " ".join(result.output.split())
    assert "Doctor on the result" not in result.output
