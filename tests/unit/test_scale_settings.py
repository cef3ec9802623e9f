"""Settings for size: the cluster file's node pools, component mode and control-plane size
profile, the in-process translation of a pod's paths and addresses, and the operator's
node-label plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.cli.app import root_command
from kubegpu.kube.policy import parse_policy_spec
from kubegpu.operator import labels
from kubegpu.sim import inprocess
from kubegpu.sim.cluster import ClusterFileError, SimCluster, load_cluster
from kubegpu.sim.controlplane.plane import SIZE_PROFILES, ControlPlaneSize
from kubegpu.sim.inprocess import PathMap, in_process_command, listen_address, translate


def _load(tmp_path: Path, text: str):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return load_cluster(path)


def test_a_small_cluster_keeps_every_components_defaults() -> None:
    small = SIZE_PROFILES["small"]
    assert small.client_args() == []
    assert small.apiserver_args() == []
    assert small == ControlPlaneSize()


def test_the_large_profile_sets_client_rates_inflight_limits_and_etcd_quota() -> None:
    large = SIZE_PROFILES["large"]
    assert large.client_args() == ["--kube-api-qps=100", "--kube-api-burst=200"]
    assert large.apiserver_args() == [
        "--max-requests-inflight=1000",
        "--max-mutating-requests-inflight=500",
    ]
    assert large.etcd_quota_bytes == 4 * 1024**3


def test_a_cluster_file_picks_a_size_and_overrides_one_flag(tmp_path: Path) -> None:
    spec = _load(
        tmp_path,
        "nodes: [{name: a}]\ncontrolPlane: {size: large, kubeApiQps: 300}\n",
    )
    size = spec.controlPlane.resolved()
    assert size.kube_api_qps == 300
    assert size.kube_api_burst == SIZE_PROFILES["large"].kube_api_burst
    assert _load(tmp_path, "nodes: [{name: a}]\n").controlPlane.resolved() == ControlPlaneSize()


def test_a_node_pool_expands_to_numbered_nodes_with_the_clusters_component_mode(
    tmp_path: Path,
) -> None:
    spec = _load(
        tmp_path,
        "components: inprocess\nnodes:\n"
        "  - {name: gpu, count: 12, gpus: 'h100-80gb:8'}\n"
        "  - {name: iso, gpus: 'l4:1', components: process}\n",
    )
    configs = SimCluster(spec, tmp_path, root_command=lambda: None).node_configs()
    assert [c.name for c in configs][:3] == ["gpu-00", "gpu-01", "gpu-02"]
    assert configs[11].name == "gpu-11"
    assert {c.components for c in configs[:12]} == {"inprocess"}
    assert (configs[12].name, configs[12].components) == ("iso", "process")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: [{name: a, count: 0}]", "field nodes.0.count, value 0"),
        ("nodes: [{name: a, components: threads}]", "field nodes.0.components"),
        ("nodes: [{name: a}]\ncontrolPlane: {size: huge}", "field controlPlane.size"),
        ("nodes: [{name: a}]\ncontrolPlane: {kubeApiQps: 0}", "field controlPlane.kubeApiQps"),
        ("nodes: [{name: a, count: 3}, {name: a-1}]", "node name 'a-1' appears twice"),
    ],
)
def test_bad_size_settings_name_field_and_value(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ClusterFileError) as err:
        _load(tmp_path, text)
    assert message in str(err.value)


async def test_in_process_nodes_need_the_root_command(tmp_path: Path) -> None:
    spec = _load(tmp_path, "components: inprocess\nnodes: [{name: a}]\n")
    with pytest.raises(ValueError, match="root command"):
        await SimCluster(spec, tmp_path).start()


def test_container_paths_under_a_mount_become_the_volumes_source_on_the_node() -> None:
    paths = PathMap.of(
        [
            ("/n1/var/lib/kubelet", "/var/lib/kubelet", False),
            ("/n1/var/lib/kubelet/device-plugins", "/var/lib/kubelet/device-plugins", False),
            ("/n1/host", "/", True),
        ]
    )
    assert translate("/var/lib/kubelet/device-plugins/kubelet.sock", paths, "10.0.0.1") == (
        "/n1/var/lib/kubelet/device-plugins/kubelet.sock"
    )
    assert translate(Path("/var/lib/kubelet/pods"), paths, "10.0.0.1") == Path(
        "/n1/var/lib/kubelet/pods"
    )
    assert translate("/var/lib/kubeletx", paths, "x") == "/var/lib/kubeletx"  # not a prefix
    assert translate("/etc/passwd", paths, "x") == "/etc/passwd"  # a / mount never captures
    assert translate([Path("/var/run/cdi"), 3], paths, "x") == [Path("/var/run/cdi"), 3]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0.0.0.0", "10.1.2.3"),
        (":9400", "10.1.2.3:9400"),
        ("0.0.0.0:8000", "10.1.2.3:8000"),
        ("[::]:9400", "10.1.2.3:9400"),
        ("127.0.0.1:0", "127.0.0.1:0"),
        ("single", "single"),
    ],
)
def test_a_wildcard_listen_address_moves_to_the_nodes_own(value: str, expected: str) -> None:
    assert listen_address(value, "10.1.2.3") == expected


def test_only_kubegpus_node_components_run_in_process() -> None:
    assert in_process_command(["kubegpu", "device-plugin", "--x"])
    assert in_process_command(["/usr/bin/kubegpu", "validator", "wait"])
    assert not in_process_command(["kubegpu", "mps-control-daemon"])
    assert not in_process_command(["kubegpu", "dra-plugin"])
    assert not in_process_command(["nvidia-smi"])


def test_the_label_plan_lists_only_the_nodes_that_change() -> None:
    spec = parse_policy_spec({})
    gpu = {"feature.node.kubernetes.io/pci-10de.present": "true"}
    plan = labels.node_patches(
        {"gpu-a": gpu, "cpu-b": {}, "gpu-c": {**gpu, **labels.label_changes(gpu, spec)}},  # type: ignore[dict-item]
        lambda node: labels.label_changes(node, spec),
    )
    assert list(plan) == ["gpu-a"]
    assert plan["gpu-a"][labels.GPU_PRESENT] == "true"


def test_a_command_built_once_parses_every_containers_arguments_afresh() -> None:
    """A thousand nodes start the same device plugin: its command is built once, and each
    container's arguments are parsed from the start (parsing must not eat the shared list)."""
    argv = ("device-plugin", "--mig-strategy", "mixed")
    seen = []
    for _ in range(3):
        command, args, names = inprocess._command(root_command, argv)
        ctx = command.make_context(" ".join(names), list(args))
        seen.append((id(command), ctx.params["mig_strategy"]))
    assert len({c for c, _ in seen}) == 1
    assert [s for _, s in seen] == ["mixed"] * 3
