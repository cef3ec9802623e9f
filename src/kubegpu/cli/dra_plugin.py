"""`kubegpu dra-plugin`: the DRA kubelet plugin of driver gpu.nvidia.com, with the flags and
env vars of NVIDIA's gpu-kubelet-plugin where they exist."""

from __future__ import annotations

from pathlib import Path

import typer

from kubegpu.catalog import nvidia
from kubegpu.cli.options import (
    KUBECONFIG_OPTION,
    LOG_LEVEL_OPTION,
    NODE_NAME_OPTION,
    NVML_OPTION,
    SIM_NODE_OPTION,
)
from kubegpu.dra.program import DraPluginFlags, DraPluginProgram
from kubegpu.kube.kubelet import DEVICE_PLUGIN_PATH, PLUGINS_PATH, PLUGINS_REGISTRY_PATH
from kubegpu.node.gpus import gpu_backend
from kubegpu.node.intervals import POLL, check_seconds
from kubegpu.node.runtime import run


def dra_plugin(
    node_name: str | None = NODE_NAME_OPTION,
    kubeconfig: str | None = KUBECONFIG_OPTION,
    plugins_registry: Path = typer.Option(
        Path(PLUGINS_REGISTRY_PATH),
        "--plugins-registry",
        envvar="KUBELET_REGISTRAR_DIRECTORY_PATH",
        help="The kubelet's plugin-watcher directory; the registration socket goes here.",
    ),
    plugins_dir: Path = typer.Option(
        Path(PLUGINS_PATH),
        "--plugins-dir",
        envvar="KUBELET_PLUGINS_DIRECTORY_PATH",
        help="The kubelet's plugins directory: <dir>/gpu.nvidia.com holds the DRA socket "
        "and the checkpoint.",
    ),
    cdi_root: Path = typer.Option(
        Path(nvidia.CDI_SPEC_DIR), "--cdi-root", envvar="CDI_ROOT", help="Where claim CDI specs go."
    ),
    device_plugin_dir: str = typer.Option(
        DEVICE_PLUGIN_PATH,
        "--device-plugin-dir",
        envvar="KUBEGPU_DEVICE_PLUGIN_DIR",
        help="Refuse to start while an NVIDIA device plugin serves a socket here; "
        "empty: do not check.",
    ),
    feature_gates: str | None = typer.Option(
        None,
        "--feature-gates",
        envvar="FEATURE_GATES",
        help="Driver feature gates, e.g. TimeSlicingSettings=true,MPSSupport=true.",
    ),
    nvidia_driver_root: Path = typer.Option(
        Path("/"),
        "--nvidia-driver-root",
        envvar="NVIDIA_DRIVER_ROOT",
        help="The driver's root on the host (for the MIG capability table).",
    ),
    container_driver_root: Path = typer.Option(
        Path("/driver-root"),
        "--container-driver-root",
        envvar="DRIVER_ROOT_CTR_PATH",
        help="Where this container sees the driver root (its files go into the CDI specs).",
    ),
    nvidia_dev_root: Path = typer.Option(
        Path("/"),
        "--nvidia-dev-root",
        envvar="NVIDIA_DEV_ROOT",
        help="The root of the driver's /dev on the host.",
    ),
    poll_interval: float = typer.Option(
        1.0,
        "--poll-interval",
        envvar="KUBEGPU_POLL_INTERVAL",
        help="Seconds between checks of the GPUs for a changed MIG layout or a lost GPU.",
    ),
    log_level: str = LOG_LEVEL_OPTION,
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Run the DRA kubelet plugin for NVIDIA GPUs (driver gpu.nvidia.com)."""
    flags = DraPluginFlags(
        node_name=node_name,
        kubeconfig=kubeconfig,
        plugins_registry=plugins_registry,
        plugins_dir=plugins_dir,
        cdi_root=cdi_root,
        device_plugin_dir=Path(device_plugin_dir) if device_plugin_dir else None,
        feature_gates=feature_gates,
        driver_root=nvidia_driver_root,
        container_driver_root=container_driver_root,
        dev_root=nvidia_dev_root,
        poll_s=poll_interval,
    )

    def program() -> DraPluginProgram:
        check_seconds(poll_interval, POLL, "--poll-interval", "KUBEGPU_POLL_INTERVAL")
        return DraPluginProgram(flags, gpu_backend(nvml, sim_node))

    code = run(program, log_level=log_level)
    raise typer.Exit(code)
