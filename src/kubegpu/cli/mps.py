"""`kubegpu mps-control-daemon`: MPS daemons with equal limits for MPS-shared resources."""

from __future__ import annotations

from pathlib import Path

import typer

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
from kubegpu.device_plugin.mps import MpsOptions
from kubegpu.device_plugin.runner import MpsFlags, MpsProgram
from kubegpu.node.gpus import gpu_backend
from kubegpu.node.runtime import run


def mps_control_daemon(
    config_file: Path | None = CONFIG_FILE_OPTION,
    config_dir: Path | None = CONFIG_DIR_OPTION,
    default_config: str | None = DEFAULT_CONFIG_OPTION,
    node_name: str | None = NODE_NAME_OPTION,
    kubeconfig: str | None = KUBECONFIG_OPTION,
    mps_root: Path = typer.Option(
        Path("/run/nvidia/mps"),
        "--mps-root",
        envvar="MPS_ROOT",
        help="The MPS root (pipes, logs, shared memory), as this process sees it.",
    ),
    mig_strategy: str | None = typer.Option(None, "--mig-strategy", envvar="MIG_STRATEGY"),
    poll_interval: float = typer.Option(1.0, "--poll-interval", envvar="KUBEGPU_POLL_INTERVAL"),
    log_level: str = LOG_LEVEL_OPTION,
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Run one MPS control daemon per MPS-shared resource (limits: an equal share per replica);
    with sharing.mps.migInstances, one per MIG instance with shares of the instance.

    On a simulated node (--nvml sim:...) the daemon records the limits it would set in
    <mps-root>/<resource>/limits.json instead of running nvidia-cuda-mps-control.
    """
    flags = MpsFlags(
        options=MpsOptions(
            mps_root=mps_root,
            config_file=config_file,
            config_dir=config_dir,
            default_config=default_config,
            node_name=node_name or None,
            poll_s=poll_interval,
        ),
        overrides={"MIG_STRATEGY": mig_strategy, "MPS_ROOT": str(mps_root)},
        kubeconfig=kubeconfig,
    )
    code = run(lambda: MpsProgram(flags, gpu_backend(nvml, sim_node)), log_level=log_level)
    raise typer.Exit(code)
