"""`kubegpu device-plugin`: the kubelet device plugin, with NVIDIA's flags and env vars."""

from __future__ import annotations

from pathlib import Path

import typer

from kubegpu.catalog import nvidia
from kubegpu.cli.options import (
    CONFIG_DIR_OPTION,
    CONFIG_FILE_OPTION,
    DEFAULT_CONFIG_OPTION,
    KUBECONFIG_OPTION,
    LOG_LEVEL_OPTION,
    NODE_NAME_OPTION,
    NVML_OPTION,
    SIM_NODE_OPTION,
)
from kubegpu.device_plugin.runner import DevicePluginFlags, DevicePluginProgram
from kubegpu.kube.kubelet import REGISTRATION_SOCKET
from kubegpu.node.gpus import gpu_backend
from kubegpu.node.runtime import run


def device_plugin(
    config_file: Path | None = CONFIG_FILE_OPTION,
    config_dir: Path | None = CONFIG_DIR_OPTION,
    default_config: str | None = DEFAULT_CONFIG_OPTION,
    node_name: str | None = NODE_NAME_OPTION,
    kubeconfig: str | None = KUBECONFIG_OPTION,
    mig_strategy: str | None = typer.Option(
        None, "--mig-strategy", envvar="MIG_STRATEGY", help="none, single or mixed."
    ),
    fail_on_init_error: str | None = typer.Option(
        None,
        "--fail-on-init-error",
        envvar="FAIL_ON_INIT_ERROR",
        help="Exit when NVML cannot start (default true).",
    ),
    nvidia_driver_root: str | None = typer.Option(
        None,
        "--nvidia-driver-root",
        envvar="NVIDIA_DRIVER_ROOT",
        help="The driver's root on the host.",
    ),
    container_driver_root: Path = typer.Option(
        Path("/driver-root"),
        "--container-driver-root",
        envvar="DRIVER_ROOT_CTR_PATH",
        help="Where this container sees the driver root (its files go into the CDI spec).",
    ),
    nvidia_dev_root: str | None = typer.Option(
        None,
        "--nvidia-dev-root",
        envvar="NVIDIA_DEV_ROOT",
        help="The root of the driver's /dev on the host.",
    ),
    pass_device_specs: str | None = typer.Option(
        None,
        "--pass-device-specs",
        envvar="PASS_DEVICE_SPECS",
        help="Return device nodes in Allocate (true/false).",
    ),
    device_list_strategy: str | None = typer.Option(
        None,
        "--device-list-strategy",
        envvar="DEVICE_LIST_STRATEGY",
        help="Comma list of envvar, volume-mounts, cdi-annotations, cdi-cri.",
    ),
    device_id_strategy: str | None = typer.Option(
        None, "--device-id-strategy", envvar="DEVICE_ID_STRATEGY", help="uuid or index."
    ),
    mps_root: str | None = typer.Option(
        None, "--mps-root", envvar="MPS_ROOT", help="The MPS root on the host."
    ),
    gds_enabled: str | None = typer.Option(
        None, "--gds-enabled", envvar="GDS_ENABLED", help="Set NVIDIA_GDS=enabled."
    ),
    mofed_enabled: str | None = typer.Option(
        None, "--mofed-enabled", envvar="MOFED_ENABLED", help="Set NVIDIA_MOFED=enabled."
    ),
    gdrcopy_enabled: str | None = typer.Option(
        None, "--gdrcopy-enabled", envvar="GDRCOPY_ENABLED", help="Set NVIDIA_GDRCOPY=enabled."
    ),
    kubelet_socket: str = typer.Option(
        REGISTRATION_SOCKET,
        "--kubelet-socket",
        envvar="KUBELET_SOCKET",
        help="kubelet's registration socket; empty: serve without registering.",
    ),
    plugin_dir: Path | None = typer.Option(
        None,
        "--plugin-dir",
        envvar="PLUGIN_DIR",
        help="Where the plugin sockets go (default: the kubelet socket's directory).",
    ),
    cdi_root: str = typer.Option(
        nvidia.CDI_SPEC_DIR,
        "--cdi-root",
        envvar="CDI_ROOT",
        help="Where the CDI spec is written; empty: none.",
    ),
    health_recovery_period: float = typer.Option(
        300.0,
        "--health-recovery-period",
        envvar="DP_HEALTH_RECOVERY_PERIOD",
        help="Seconds without a counted XID (NVML answering) before a GPU is healthy again; "
        "0: never, as upstream.",
    ),
    poll_interval: float = typer.Option(
        1.0,
        "--poll-interval",
        envvar="KUBEGPU_POLL_INTERVAL",
        help="Seconds between checks of kubelet's socket and the config files.",
    ),
    log_level: str = LOG_LEVEL_OPTION,
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Run the NVIDIA kubelet device plugin (one socket per advertised resource)."""
    flags = DevicePluginFlags(
        config_file=config_file,
        config_dir=config_dir,
        default_config=default_config,
        node_name=node_name,
        kubeconfig=kubeconfig,
        overrides={
            "MIG_STRATEGY": mig_strategy,
            "FAIL_ON_INIT_ERROR": fail_on_init_error,
            "NVIDIA_DRIVER_ROOT": nvidia_driver_root,
            "NVIDIA_DEV_ROOT": nvidia_dev_root,
            "MPS_ROOT": mps_root,
            "GDS_ENABLED": gds_enabled,
            "MOFED_ENABLED": mofed_enabled,
            "GDRCOPY_ENABLED": gdrcopy_enabled,
            "PASS_DEVICE_SPECS": pass_device_specs,
            "DEVICE_LIST_STRATEGY": device_list_strategy,
            "DEVICE_ID_STRATEGY": device_id_strategy,
        },
        kubelet_socket=Path(kubelet_socket) if kubelet_socket else None,
        plugin_dir=plugin_dir,
        cdi_root=Path(cdi_root) if cdi_root else None,
        container_driver_root=container_driver_root,
        health_recovery_s=health_recovery_period,
        poll_s=poll_interval,
    )
    code = run(lambda: DevicePluginProgram(flags, gpu_backend(nvml, sim_node)), log_level=log_level)
    raise typer.Exit(code)
