"""The rendered operands meet a real GPU node's container-runtime contract as NVIDIA's
manifests do (node-runtime.md §1.8, §4-§6): the toolkit is told the node's runtime and
where its config and socket are, the env the runtime needs is in the manifests themselves,
driver-root mounts propagate, the MPS daemon and its clients share /dev/shm."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from kubegpu.kube.policy import ClusterPolicySpec, parse_policy_spec
from kubegpu.operator import node_facts
from kubegpu.operator.render import ClusterFacts, Owner, Rendered, render

FACTS = ClusterFacts(owner=Owner("cluster-policy", "uid"), gpu_nodes=1, os_tag="ubuntu24.04")
BASE: dict[str, Any] = {
    "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
    "toolkit": {
        "repository": "nvcr.io/nvidia/k8s",
        "image": "container-toolkit",
        "version": "v1.20.0",
    },
    "dcgm": {"enabled": False},
}


def spec(**changes: Any) -> ClusterPolicySpec:
    data = {k: dict(v) for k, v in BASE.items()}
    for key, value in changes.items():
        data[key] = {**data.get(key, {}), **value}
    return parse_policy_spec(data)


def rendered(**changes: Any) -> Rendered:
    return render(spec(**changes), FACTS)


def pod(r: Rendered, ds: str) -> dict[str, Any]:
    p: dict[str, Any] = r.daemonset(ds)["spec"]["template"]["spec"]
    return p


def main(r: Rendered, ds: str) -> dict[str, Any]:
    c: dict[str, Any] = pod(r, ds)["containers"][0]
    return c


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


TOOLKIT = "nvidia-container-toolkit-daemonset"


def mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def host_path(p: dict[str, Any], volume: str) -> str:
    (v,) = [v for v in p["volumes"] if v["name"] == volume]
    path: str = v["hostPath"]["path"]
    return path


def toolkit(runtime: str, **changes: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    r = render(spec(**changes), replace(FACTS, runtime=runtime))
    return pod(r, TOOLKIT), main(r, TOOLKIT)


def test_the_toolkit_is_told_where_containerds_config_drop_in_and_socket_are() -> None:
    p, c = toolkit("containerd")
    e = env(c)
    assert e["RUNTIME"] == "containerd"
    assert e["RUNTIME_CONFIG"] == e["CONTAINERD_CONFIG"] == "/runtime/config-dir/config.toml"
    assert e["RUNTIME_DROP_IN_CONFIG"] == "/runtime/config-dir.d/99-nvidia.toml"
    assert e["RUNTIME_DROP_IN_CONFIG_HOST_PATH"] == "/etc/containerd/conf.d/99-nvidia.toml"
    assert e["RUNTIME_SOCKET"] == e["CONTAINERD_SOCKET"] == "/runtime/sock-dir/containerd.sock"
    assert e["CONTAINERD_RUNTIME_CLASS"] == "nvidia"
    assert "RUNTIME_CLASS" not in e  # the installer reads no such variable
    m = mounts(c)
    assert host_path(p, m["/runtime/config-dir/"]["name"]) == "/etc/containerd"
    assert host_path(p, m["/runtime/config-dir.d/"]["name"]) == "/etc/containerd/conf.d"
    assert host_path(p, m["/runtime/sock-dir/"]["name"]) == "/run/containerd"


def test_on_cri_o_the_toolkit_gets_cri_os_paths_and_no_socket() -> None:
    p, c = toolkit("crio")
    e = env(c)
    assert e["RUNTIME"] == "crio"
    assert e["RUNTIME_CONFIG"] == e["CRIO_CONFIG"] == "/runtime/config-dir/config.toml"
    assert e["RUNTIME_DROP_IN_CONFIG"] == "/runtime/config-dir.d/99-nvidia.conf"
    assert e["RUNTIME_DROP_IN_CONFIG_HOST_PATH"] == "/etc/crio/crio.conf.d/99-nvidia.conf"
    assert "RUNTIME_SOCKET" not in e and "CONTAINERD_SOCKET" not in e
    assert e["CRIO_CONFIG_MODE"] == "config"  # CDI is on by default
    m = mounts(c)
    assert host_path(p, m["/runtime/config-dir/"]["name"]) == "/etc/crio"
    assert host_path(p, m["/runtime/config-dir.d/"]["name"]) == "/etc/crio/crio.conf.d"
    assert "/runtime/sock-dir/" not in m


def test_a_users_toolkit_env_moves_the_host_paths_not_the_container_paths() -> None:
    p, c = toolkit(
        "containerd",
        toolkit={"env": [{"name": "CONTAINERD_CONFIG", "value": "/var/lib/rke2/config.toml"}]},
    )
    e = env(c)
    assert e["CONTAINERD_CONFIG"] == "/runtime/config-dir/config.toml"
    assert host_path(p, mounts(c)["/runtime/config-dir/"]["name"]) == "/var/lib/rke2"


def test_cdi_on_keeps_nvidia_off_the_default_runtime_and_cdi_off_makes_it_the_default() -> None:
    _, on = toolkit("containerd")
    assert env(on)["NVIDIA_RUNTIME_SET_AS_DEFAULT"] == "false"
    assert env(on)["NVIDIA_CONTAINER_RUNTIME_MODE"] == "cdi"
    _, off = toolkit("containerd", cdi={"enabled": False})
    assert "NVIDIA_RUNTIME_SET_AS_DEFAULT" not in env(off)
    _, crio_off = toolkit("crio", cdi={"enabled": False})
    assert env(crio_off)["CRIO_CONFIG_MODE"] == "hook"


def test_the_toolkits_pid_file_is_named_as_the_installer_requires() -> None:
    p, c = toolkit("containerd")
    assert env(c)["TOOLKIT_PID_FILE"] == "/run/nvidia/toolkit/toolkit.pid"
    assert host_path(p, mounts(c)["/run/nvidia/toolkit"]["name"]) == "/run/nvidia/toolkit"


def node(runtime_version: str, labels: dict[str, str] | None = None, os_image: str = "") -> Any:
    return {
        "metadata": {"labels": labels or {}},
        "status": {"nodeInfo": {"containerRuntimeVersion": runtime_version, "osImage": os_image}},
    }


def test_the_runtime_is_detected_from_the_nodes_and_containerd_wins() -> None:
    assert node_facts.cluster_runtime([node("cri-o://1.30.2")]) == "crio"
    assert node_facts.cluster_runtime([node("cri-o://1.30.2"), node("containerd://2.0.1")]) == (
        "containerd"
    )
    assert node_facts.cluster_runtime([node("kubegpu-sim://0.1.0")]) == "containerd"
    assert node_facts.cluster_runtime([]) == "containerd"


def test_a_runtime_the_installer_does_not_know_is_a_render_error() -> None:
    r = render(spec(), replace(FACTS, runtime="podman"))
    assert "podman" in (r.state("state-container-toolkit").error or "")


@pytest.mark.parametrize(
    ("os_image", "tag"),
    [
        ("Ubuntu 22.04.4 LTS", "ubuntu22.04"),
        ("Red Hat Enterprise Linux 9.4 (Plow)", "rhel9"),
        ("Rocky Linux 8.10 (Green Obsidian)", "rocky8"),
        ("Something Else 1", None),
    ],
)
def test_the_driver_os_suffix_comes_from_the_nodes_os_image_without_nfd(
    os_image: str, tag: str | None
) -> None:
    assert node_facts.os_tag(node("containerd://2.0", os_image=os_image)) == tag


def test_nfd_os_labels_win_over_the_os_image() -> None:
    labels = {
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04",
    }
    assert node_facts.os_tag(node("containerd://2", labels, "Ubuntu 22.04.4 LTS")) == "ubuntu24.04"


@pytest.mark.parametrize(
    ("ds", "container", "visible", "caps"),
    [
        ("nvidia-device-plugin-daemonset", None, "all", "all"),
        ("nvidia-device-plugin-mps-control-daemon", None, "all", "compute,utility"),
        ("nvidia-mig-manager", None, "all", "compute,utility"),
        ("nvidia-operator-validator", "toolkit-validation", "all", None),
    ],
)
def test_the_env_the_runtime_needs_is_in_the_manifest_itself(
    ds: str, container: str | None, visible: str, caps: str | None
) -> None:
    r = rendered(devicePlugin={"mps": {"root": "/run/nvidia/mps"}})
    p = pod(r, ds)
    c = (
        next(c for c in p.get("initContainers", []) if c["name"] == container)
        if container
        else p["containers"][0]
    )
    assert env(c)["NVIDIA_VISIBLE_DEVICES"] == visible
    if caps:
        assert env(c)["NVIDIA_DRIVER_CAPABILITIES"] == caps


@pytest.mark.parametrize(
    ("ds", "container"),
    [
        (TOOLKIT, None),
        (TOOLKIT, "driver-validation"),
        ("nvidia-device-plugin-daemonset", None),
        ("nvidia-mig-manager", None),
        ("gpu-feature-discovery", None),
        ("nvidia-operator-validator", "driver-validation"),
    ],
)
def test_driver_root_mounts_see_a_driver_mounted_later(ds: str, container: str | None) -> None:
    p = pod(rendered(), ds)
    c = (
        next(c for c in p.get("initContainers", []) if c["name"] == container)
        if container
        else p["containers"][0]
    )
    assert mounts(c)["/driver-root"]["mountPropagation"] == "HostToContainer"


def test_the_driver_container_shares_run_nvidia_bidirectionally_and_has_nvidias_mounts() -> None:
    r = rendered()
    p = pod(r, "nvidia-driver-daemonset")
    m = mounts(main(r, "nvidia-driver-daemonset"))
    assert m["/run/nvidia"]["mountPropagation"] == "Bidirectional"
    for path, host in {
        "/run/nvidia-fabricmanager": "/run/nvidia-fabricmanager",
        "/run/nvidia-topologyd": "/run/nvidia-topologyd",
        "/sys/devices/system": "/sys/devices/system",
        "/sys/module/firmware_class/parameters/path": "/sys/module/firmware_class/parameters/path",
        "/lib/firmware": "/run/nvidia/driver/lib/firmware",
    }.items():
        assert host_path(p, m[path]["name"]) == host, path


def test_the_mps_daemon_and_the_plugin_share_the_shm_clients_get() -> None:
    r = rendered()
    for ds in ("nvidia-device-plugin-mps-control-daemon", "nvidia-device-plugin-daemonset"):
        p = pod(r, ds)
        shm = mounts(p["containers"][0])["/dev/shm"]
        assert host_path(p, shm["name"]) == "/run/nvidia/mps/shm", ds


def test_with_cdi_the_device_plugin_lists_devices_through_cdi_not_the_env_var() -> None:
    on = env(main(rendered(), "nvidia-device-plugin-daemonset"))
    assert on["DEVICE_LIST_STRATEGY"] == "cdi-annotations,cdi-cri"
    assert on["CDI_ANNOTATION_PREFIX"] == "cdi.k8s.io/"
    off = env(main(rendered(cdi={"enabled": False}), "nvidia-device-plugin-daemonset"))
    assert "DEVICE_LIST_STRATEGY" not in off


def test_the_exporter_has_liveness_and_readiness_probes_on_health() -> None:
    c = main(rendered(), "nvidia-dcgm-exporter")
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": 9400}


def test_the_driver_validation_checks_a_host_driver_through_the_host_root() -> None:
    r = rendered(driver={"enabled": False})
    p = pod(r, "nvidia-operator-validator")
    (check,) = [c for c in p["initContainers"] if c["name"] == "driver-validation"]
    assert env(check)["NVIDIA_DRIVER_ROOT"] == "/"
    assert env(check)["HOST_ROOT_MOUNT"] == "/host"
    host = mounts(check)["/host"]
    assert host["mountPropagation"] == "HostToContainer"
    assert host_path(p, host["name"]) == "/"


def test_facts_default_to_containerd() -> None:
    assert ClusterFacts().runtime == "containerd"


def test_the_device_plugin_honours_the_rendered_cdi_strategy_in_allocate() -> None:
    """The manifest's DEVICE_LIST_STRATEGY, read as the plugin reads its env, makes Allocate
    name the devices through CDI only: the env-var list is voided."""
    from kubegpu.sharing.allocate import container_response, settings_for
    from kubegpu.sharing.config import ENV_OVERRIDES, parse_config, with_overrides
    from kubegpu.sharing.devices import GpuFacts, advertise

    e = env(main(rendered(), "nvidia-device-plugin-daemonset"))
    config = with_overrides(parse_config(""), {k: v for k, v in e.items() if k in ENV_OVERRIDES})
    gpus = [
        GpuFacts(
            index=0,
            uuid="GPU-0",
            product="NVIDIA L4",
            memory_mib=23034,
            compute_capability=(8, 9),
            mig_capable=False,
            mig_enabled=False,
        )
    ]
    devices = {d.id: d for d in advertise(gpus, config).resources["nvidia.com/gpu"]}
    r = container_response(["GPU-0"], devices, settings_for(config, "nvidia.com/gpu"), "rid-0")
    assert r.cdi_devices == ["k8s.device-plugin.nvidia.com/gpu=GPU-0"]
    assert r.envs == {"NVIDIA_VISIBLE_DEVICES": "void"}
