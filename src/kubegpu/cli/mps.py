"""`kubegpu mps-control-daemon`: MPS daemons with equal limits for MPS-shared resources."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import typer

from kubegpu.cli.device_plugin import (
    CONFIG_DIR,
    CONFIG_FILE,
    DEFAULT_CONFIG,
    KUBECONFIG,
    NODE_NAME,
    overrides_from,
    setup_logging,
)
from kubegpu.cli.options import NVML_OPTION, SIM_NODE_OPTION, nvml_from
from kubegpu.device_plugin import MpsControlDaemon, MpsOptions, RecordingMps, SystemMps
from kubegpu.device_plugin.mps import MpsBackend
from kubegpu.kube.nodes import client_from_env
from kubegpu.nvml import SimNvml

log = logging.getLogger("kubegpu.device_plugin.mps")


def mps_control_daemon(
    config_file: Path | None = CONFIG_FILE,
    config_dir: Path | None = CONFIG_DIR,
    default_config: str | None = DEFAULT_CONFIG,
    node_name: str | None = NODE_NAME,
    kubeconfig: str | None = KUBECONFIG,
    mps_root: Path = typer.Option(
        Path("/run/nvidia/mps"),
        "--mps-root",
        envvar="MPS_ROOT",
        help="The MPS root (pipes, logs, shared memory), as this process sees it.",
    ),
    mig_strategy: str | None = typer.Option(None, "--mig-strategy", envvar="MIG_STRATEGY"),
    poll_interval: float = typer.Option(1.0, "--poll-interval", envvar="KUBEGPU_POLL_INTERVAL"),
    log_level: str = typer.Option("info", "--log-level", envvar="LOG_LEVEL"),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Run one MPS control daemon per MPS-shared resource (limits: an equal share per replica).

    On a simulated node (--nvml sim:...) the daemon records the limits it would set in
    <mps-root>/<resource>/limits.json instead of running nvidia-cuda-mps-control.
    """
    setup_logging(log_level)
    overrides = overrides_from(mig_strategy=mig_strategy, mps_root=str(mps_root))
    options = MpsOptions(
        mps_root=mps_root,
        config_file=config_file,
        config_dir=config_dir,
        default_config=default_config,
        node_name=node_name or None,
        overrides=overrides,
        poll_s=poll_interval,
    )
    asyncio.run(_serve(options, nvml, sim_node, kubeconfig))


async def _serve(
    options: MpsOptions, nvml_spec: str | None, sim_node: str | None, kubeconfig: str | None
) -> None:
    nvml = nvml_from(nvml_spec, sim_node)
    backend: MpsBackend = RecordingMps() if isinstance(nvml, SimNvml) else SystemMps()
    client = None
    if options.node_name:
        try:
            client = client_from_env("kubegpu-mps-control-daemon", kubeconfig)
        except Exception as exc:
            log.warning("no Kubernetes API access (%s): using the config file only", exc)
    daemon = MpsControlDaemon(nvml, options, backend, client)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        loop.add_signal_handler(sig, daemon.stop)
    try:
        await daemon.run()
    finally:
        if client is not None:
            await client.close()
        nvml.close()
