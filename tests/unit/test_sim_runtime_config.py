"""The simulated runtime's config: what each runtime loads and the words it refuses with."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.sim.cluster import ClusterFileError, SimCluster, load_cluster
from kubegpu.sim.runtime.config import (
    Runtime,
    RuntimeConfigError,
    RuntimeOptions,
    effective_config,
    handler_error,
    handlers,
    host_path,
    sandbox_event_message,
    sandbox_id,
    write_toml,
)

CONTAINERD = RuntimeOptions("containerd", "2.0.5")
CRIO = RuntimeOptions("cri-o", "1.31.3")


def test_the_node_reports_its_runtime_and_version() -> None:
    assert CONTAINERD.container_runtime_version == "containerd://2.0.5"
    assert CRIO.container_runtime_version == "cri-o://1.31.3"
    assert RuntimeOptions().container_runtime_version.startswith("containerd://")


def test_an_unknown_runtime_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'docker' is not a runtime"):
        RuntimeOptions("docker")  # type: ignore[arg-type]


def test_a_fresh_containerd_defines_runc_only_and_imports_conf_d(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    assert (tmp_path / "etc/containerd/config.toml").is_file()
    assert (tmp_path / "etc/containerd/conf.d").is_dir()
    assert rt.loaded.names == ("runc",)
    assert rt.loaded.default == "runc"


def test_a_fresh_crio_defines_crun_and_runc(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CRIO)
    rt.start()
    assert (tmp_path / "etc/crio/crio.conf").is_file()
    assert rt.loaded.names == ("crun", "runc")
    assert rt.loaded.default == "crun"


def test_containerd_reads_only_the_files_its_imports_name(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    nvidia = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "x"}}
    plugin = {"containerd": {"runtimes": {"runc": {}, "nvidia": nvidia}}}
    drop = {"version": 3, "plugins": {"io.containerd.cri.v1.runtime": plugin}}
    write_toml(tmp_path / "etc/containerd/elsewhere/99-nvidia.toml", drop)
    assert "nvidia" not in handlers(effective_config(tmp_path, CONTAINERD), CONTAINERD).names
    write_toml(tmp_path / "etc/containerd/conf.d/99-nvidia.toml", drop)
    assert "nvidia" in handlers(effective_config(tmp_path, CONTAINERD), CONTAINERD).names


def test_containerd_replaces_a_plugins_table_whole_on_import(tmp_path: Path) -> None:
    """Before 2.1 containerd merges `plugins` by plugin key only: an import's CRI table
    replaces the top-level one, runtimes and all."""
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    only = {"containerd": {"runtimes": {"nvidia": {"options": {"BinaryName": "x"}}}}}
    drop = {"version": 3, "plugins": {"io.containerd.cri.v1.runtime": only}}
    write_toml(tmp_path / "etc/containerd/conf.d/50.toml", drop)
    assert handlers(effective_config(tmp_path, CONTAINERD), CONTAINERD).names == ("nvidia",)


def test_crio_reads_every_drop_in_in_lexical_order(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CRIO)
    rt.start()
    d = tmp_path / "etc/crio/crio.conf.d"
    write_toml(d / "10-a.conf", {"crio": {"runtime": {"default_runtime": "a"}}})
    write_toml(d / "20-b", {"crio": {"runtime": {"default_runtime": "b", "runtimes": {"b": {}}}}})
    loaded = handlers(effective_config(tmp_path, CRIO), CRIO)
    assert loaded.default == "b"
    assert loaded.names == ("b", "crun", "runc")


def test_edits_take_effect_only_when_the_runtime_restarts(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CRIO)
    rt.start()
    write_toml(
        tmp_path / "etc/crio/crio.conf.d/99-nvidia.toml",
        {"crio": {"runtime": {"runtimes": {"nvidia": {"runtime_path": "/x"}}}}},
    )
    assert rt.sandbox_error("nvidia", "uid") is not None
    rt.restart()
    assert rt.sandbox_error("nvidia", "uid") is None


def test_a_config_that_does_not_parse_names_its_file(tmp_path: Path) -> None:
    path = host_path(tmp_path, "/etc/containerd/config.toml")
    path.parent.mkdir(parents=True)
    path.write_text("version = [\n")
    with pytest.raises(RuntimeConfigError, match=r"config\.toml"):
        effective_config(tmp_path, CONTAINERD)


def test_containerd_2_refuses_an_unknown_handler_in_its_own_words(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    assert rt.sandbox_error("nvidia", "pod-1") == (
        f'unable to get OCI runtime for sandbox "{sandbox_id("pod-1")}": '
        'no runtime for "nvidia" is configured'
    )
    assert rt.sandbox_error(None, "pod-1") is None  # no handler: the default runtime


def test_containerd_1_7_and_crio_refuse_in_theirs(tmp_path: Path) -> None:
    old = RuntimeOptions("containerd", "1.7.34")
    loaded = handlers({}, old)
    assert handler_error(loaded, "nvidia", old, "u") == (
        'failed to get sandbox runtime: no runtime for "nvidia" is configured'
    )
    rt = Runtime(tmp_path, CRIO)
    rt.start()
    error = rt.sandbox_error("nvidia", "u")
    assert error is not None
    assert error.startswith("failed to find runtime handler nvidia from runtime list map[crun:0xc")
    assert " runc:0xc" in error


def test_the_kubelet_event_wraps_the_runtime_error() -> None:
    assert sandbox_event_message("boom") == (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = boom"
    )


def test_a_cluster_file_chooses_each_nodes_runtime(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "name: c\n"
        "nodes:\n"
        "- name: a\n"
        "  gpus: h100-80gb:1\n"
        "- name: b\n"
        "  runtime: {name: cri-o, version: 1.30.2, strict: true}\n"
    )
    configs = SimCluster(load_cluster(path), tmp_path / "work").node_configs()
    assert [c.runtime for c in configs] == [
        RuntimeOptions("containerd", "", False),
        RuntimeOptions("cri-o", "1.30.2", True),
    ]


def test_a_cluster_file_with_an_unknown_runtime_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("name: c\nnodes:\n- name: a\n  runtime: {name: docker}\n")
    with pytest.raises(ClusterFileError) as err:
        load_cluster(path)
    assert "cluster.yaml" in str(err.value) and "runtime" in str(err.value)
    assert "docker" in str(err.value)
