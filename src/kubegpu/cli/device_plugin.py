"""`kubegpu device-plugin`: the kubelet device plugin, with NVIDIA's flags and env vars."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

import typer

from kubegpu.cli.options import NVML_OPTION, SIM_NODE_OPTION, fail
from kubegpu.device_plugin import PluginOptions
from kubegpu.device_plugin.runner import RunSpec, encode, serve
from kubegpu.device_plugin.runner import setup_logging as _setup_logging
from kubegpu.kube.kubelet import DEVICE_PLUGIN_PATH, REGISTRATION_SOCKET
from kubegpu.sharing.config import (
    PluginConfig,
    SharingConfigError,
    load_config,
    with_overrides,
)
from kubegpu.sharing.health import XidPolicy

log = logging.getLogger("kubegpu.device_plugin")


CONFIG_FILE = typer.Option(
    None,
    "--config-file",
    envvar="CONFIG_FILE",
    help="The device plugin config file (YAML or JSON).",
)
CONFIG_DIR = typer.Option(
    None,
    "--config-dir",
    envvar=["CONFIG_DIR", "CONFIG_FILE_SRCDIR"],
    help="A directory of named configs (a mounted ConfigMap); the node label "
    "nvidia.com/device-plugin.config picks one. Takes the place of --config-file.",
)
DEFAULT_CONFIG = typer.Option(
    None,
    "--default-config",
    envvar="DEFAULT_CONFIG",
    help="The named config used while the node has no label.",
)
NODE_NAME = typer.Option(
    None,
    "--node-name",
    envvar="NODE_NAME",
    help="This node's name: watch its config label and record Node events (needs API access).",
)
KUBECONFIG = typer.Option(
    None, "--kubeconfig", envvar="KUBECONFIG", help="Kubeconfig outside a cluster."
)


def overrides_from(**values: Any) -> dict[str, Any]:
    keys = {
        "mig_strategy": "MIG_STRATEGY",
        "fail_on_init_error": "FAIL_ON_INIT_ERROR",
        "nvidia_driver_root": "NVIDIA_DRIVER_ROOT",
        "nvidia_dev_root": "NVIDIA_DEV_ROOT",
        "mps_root": "MPS_ROOT",
        "gds_enabled": "GDS_ENABLED",
        "mofed_enabled": "MOFED_ENABLED",
        "gdrcopy_enabled": "GDRCOPY_ENABLED",
        "pass_device_specs": "PASS_DEVICE_SPECS",
        "device_list_strategy": "DEVICE_LIST_STRATEGY",
        "device_id_strategy": "DEVICE_ID_STRATEGY",
    }
    out = {keys[k]: v for k, v in values.items() if v not in (None, "")}
    try:
        with_overrides(PluginConfig(), out, "flags/env")
    except SharingConfigError as exc:
        fail(str(exc))
    return out


def setup_logging(level: str) -> None:
    _setup_logging(level)


def device_plugin(
    config_file: Path | None = CONFIG_FILE,
    config_dir: Path | None = CONFIG_DIR,
    default_config: str | None = DEFAULT_CONFIG,
    node_name: str | None = NODE_NAME,
    kubeconfig: str | None = KUBECONFIG,
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
        "/var/run/cdi",
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
    log_level: str = typer.Option(
        "info", "--log-level", envvar="LOG_LEVEL", help="debug, info, warning or error."
    ),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Run the NVIDIA kubelet device plugin (one socket per advertised resource)."""
    setup_logging(log_level)
    overrides = overrides_from(
        mig_strategy=mig_strategy,
        fail_on_init_error=fail_on_init_error,
        nvidia_driver_root=nvidia_driver_root,
        nvidia_dev_root=nvidia_dev_root,
        mps_root=mps_root,
        gds_enabled=gds_enabled,
        mofed_enabled=mofed_enabled,
        gdrcopy_enabled=gdrcopy_enabled,
        pass_device_specs=pass_device_specs,
        device_list_strategy=device_list_strategy,
        device_id_strategy=device_id_strategy,
    )
    if config_file is not None and config_dir is None and not config_file.exists():
        fail(f"--config-file {config_file}: no such file")
    policy = XidPolicy.from_env(os.environ)
    for bad in policy.invalid:
        log.warning("ignoring %s: not an XID", bad)
    socket = Path(kubelet_socket) if kubelet_socket else None
    options = PluginOptions(
        config_file=config_file,
        config_dir=config_dir,
        default_config=default_config,
        node_name=node_name or None,
        overrides=overrides,
        plugin_dir=plugin_dir or (socket.parent if socket else Path(DEVICE_PLUGIN_PATH)),
        kubelet_socket=socket,
        cdi_root=Path(cdi_root) if cdi_root else None,
        health_recovery_s=health_recovery_period,
        xid_policy=policy,
        poll_s=poll_interval,
    )
    spec = RunSpec(
        options=options,
        nvml=nvml,
        sim_node=sim_node,
        kubeconfig=kubeconfig,
        fail_on_init_error=_fail_on_init_error(
            config_file if config_dir is None else None, overrides
        ),
        log_level=log_level,
    )
    if os.environ.get("KUBEGPU_DP_IN_PROCESS"):
        raise typer.Exit(asyncio.run(serve(spec)))
    # The long-running process should hold the plugin, not every command of the CLI:
    # replace this process with the lean runner (same pid, same environment).
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "kubegpu.device_plugin", encode(spec)])


def _fail_on_init_error(config_file: Path | None, overrides: dict[str, Any]) -> bool:
    """failOnInitError from the flags over the config file (a bad file counts as absent)."""
    if config_file is not None:
        try:
            return load_config(config_file, overrides).flags.fail_on_init_error
        except SharingConfigError:
            pass
    return with_overrides(PluginConfig(), overrides).flags.fail_on_init_error
