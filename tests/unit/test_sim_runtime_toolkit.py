"""NVIDIA's toolkit installer as the simulator stands in for it: only the env and mounts
its pod gives it reach the node's runtime."""

from __future__ import annotations

from pathlib import Path

from kubegpu.sim.runtime.config import Runtime, RuntimeOptions, effective_config, handlers
from kubegpu.sim.runtime.toolkit import ContainerFs, is_toolkit_image, run_cleanup, run_installer

CONTAINERD = RuntimeOptions("containerd", "2.0.5", strict=True)
CRIO = RuntimeOptions("cri-o", "1.31.3", strict=True)


def containerd_pod(root: Path) -> tuple[dict[str, str], ContainerFs]:
    """The env and mounts GPU operator renders for containerd (gpu-operator.md §1.8)."""
    env = {
        "RUNTIME": "containerd",
        "RUNTIME_CONFIG": "/runtime/config-dir/config.toml",
        "CONTAINERD_CONFIG": "/runtime/config-dir/config.toml",
        "RUNTIME_DROP_IN_CONFIG": "/runtime/config-dir.d/99-nvidia.toml",
        "RUNTIME_DROP_IN_CONFIG_HOST_PATH": "/etc/containerd/conf.d/99-nvidia.toml",
        "RUNTIME_SOCKET": "/runtime/sock-dir/containerd.sock",
        "CONTAINERD_SOCKET": "/runtime/sock-dir/containerd.sock",
    }
    mounts = [
        (str(root / "etc/containerd"), "/runtime/config-dir/", False),
        (str(root / "etc/containerd/conf.d"), "/runtime/config-dir.d/", False),
        (str(root / "run/containerd"), "/runtime/sock-dir/", False),
        (str(root / "usr/local/nvidia"), "/usr/local/nvidia", False),
        (str(root), "/host", True),
    ]
    return env, ContainerFs(mounts, root / "ctr-rootfs")


def test_the_toolkit_image_is_nvidias() -> None:
    assert is_toolkit_image("nvcr.io/nvidia/k8s/container-toolkit:v1.20.0-ubi8")
    assert not is_toolkit_image("ghcr.io/example/kubegpu:1.0")


def test_with_the_operators_env_containerd_gets_the_three_handlers(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    env, fs = containerd_pod(tmp_path)
    result = run_installer(env, fs, rt)
    assert result.error is None, result.log
    assert result.restarted
    assert {"nvidia", "nvidia-cdi", "nvidia-legacy"} <= set(rt.loaded.names)
    assert rt.loaded.default == "nvidia"  # set-as-default is the installer's default
    assert rt.handler_binary("nvidia") == "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    assert (tmp_path / "etc/containerd/conf.d/99-nvidia.toml").is_file()
    assert (tmp_path / "usr/local/nvidia/toolkit/nvidia-container-runtime").is_file()
    assert rt.sandbox_error("nvidia", "u") is None


def test_without_config_env_the_installer_edits_its_own_filesystem(tmp_path: Path) -> None:
    """RUNTIME unset means docker: its socket is not on a containerd node, and the config
    lands in the container's rootfs; no handler, the installer's error in the log."""
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    _, fs = containerd_pod(tmp_path)
    result = run_installer({}, fs, rt)
    assert result.exit_code == 1
    assert result.error == (
        "error running nvidia-ctk-installer: unable to setup runtime: unable to restart docker: "
        "unable to dial: dial unix /var/run/docker.sock: connect: no such file or directory"
    )
    assert sum("Error signaling docker, attempt" in line for line in result.log) == 6
    assert "nvidia" not in rt.loaded.names


def test_a_config_path_outside_the_mounts_configures_nothing(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    env, fs = containerd_pod(tmp_path)
    env.pop("RUNTIME_CONFIG")
    env.pop("CONTAINERD_CONFIG")
    env.pop("RUNTIME_DROP_IN_CONFIG")  # the defaults: /etc/containerd/..., not mounted
    result = run_installer(env, fs, rt)
    assert result.error is None and result.restarted
    assert "nvidia" not in rt.loaded.names
    assert (tmp_path / "ctr-rootfs/etc/containerd/conf.d/99-nvidia.toml").is_file()


def test_a_bad_runtime_is_the_installers_refusal(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    _, fs = containerd_pod(tmp_path)
    result = run_installer({"RUNTIME": "podman"}, fs, rt)
    assert result.error == (
        'error running nvidia-ctk-installer: invalid runtime "podman"; '
        "expected one of [containerd | crio | docker]"
    )


def test_crio_gets_its_handlers_in_a_drop_in_and_a_systemd_restart(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CRIO)
    rt.start()
    env = {
        "RUNTIME": "crio",
        "RUNTIME_CONFIG": "/runtime/config-dir/crio.conf",
        "RUNTIME_DROP_IN_CONFIG": "/runtime/config-dir.d/99-nvidia.conf",
    }
    mounts = [
        (str(tmp_path / "etc/crio"), "/runtime/config-dir/", False),
        (str(tmp_path / "etc/crio/crio.conf.d"), "/runtime/config-dir.d/", False),
        (str(tmp_path), "/host", False),
    ]
    result = run_installer(env, ContainerFs(mounts, tmp_path / "rootfs"), rt)
    assert result.error is None, result.log
    assert {"nvidia", "nvidia-cdi", "nvidia-legacy"} <= set(rt.loaded.names)
    table = handlers(effective_config(tmp_path, CRIO), CRIO).tables["nvidia"]
    assert table["runtime_type"] == "oci"
    assert table["runtime_path"] == "/usr/local/nvidia/toolkit/nvidia-container-runtime"


def test_crio_without_the_host_root_cannot_restart(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CRIO)
    rt.start()
    env = {"RUNTIME": "crio", "RUNTIME_CONFIG": "/runtime/config-dir/crio.conf"}
    mounts = [(str(tmp_path / "etc/crio"), "/runtime/config-dir/", False)]
    result = run_installer(env, ContainerFs(mounts, tmp_path / "rootfs"), rt)
    assert result.error is not None
    assert "unable to restart crio" in result.error
    assert "nvidia" not in rt.loaded.names


def test_on_its_signal_the_installer_takes_the_containerd_handlers_away(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CONTAINERD)
    rt.start()
    env, fs = containerd_pod(tmp_path)
    assert run_installer(env, fs, rt).error is None
    undone = run_cleanup(env, fs, rt)
    assert undone.error is None and undone.restarted
    assert rt.loaded.names == ("runc",)
    assert rt.loaded.default == "runc"
    assert not (tmp_path / "etc/containerd/conf.d/99-nvidia.toml").exists()


def test_on_its_signal_crio_keeps_the_handlers_and_loses_the_default(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, CRIO)
    rt.start()
    env = {
        "RUNTIME": "crio",
        "RUNTIME_CONFIG": "/runtime/config-dir/crio.conf",
        "RUNTIME_DROP_IN_CONFIG": "/runtime/config-dir.d/99-nvidia.conf",
    }
    mounts = [
        (str(tmp_path / "etc/crio"), "/runtime/config-dir/", False),
        (str(tmp_path / "etc/crio/crio.conf.d"), "/runtime/config-dir.d/", False),
        (str(tmp_path), "/host", False),
    ]
    fs = ContainerFs(mounts, tmp_path / "rootfs")
    assert run_installer(env, fs, rt).error is None
    assert rt.loaded.default == "nvidia"
    assert run_cleanup(env, fs, rt).error is None
    assert "nvidia" in rt.loaded.names
    assert rt.loaded.default == "crun"
