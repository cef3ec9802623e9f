"""The device plugin as a program: NVML, API client, signals (`python -m kubegpu.device_plugin`).

`kubegpu device-plugin` checks its flags, then replaces itself (exec) with this runner, so
the long-running process holds only the plugin's modules and not every command of the CLI.
The flags travel as one JSON argument (`encode` / `decode`); the environment is inherited.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kubegpu.device_plugin.plugin import DevicePlugin, PluginOptions
from kubegpu.kube.nodes import client_from_env
from kubegpu.nvml import BackendError, NvmlError, open_nvml
from kubegpu.sharing.health import XidPolicy

log = logging.getLogger("kubegpu.device_plugin")

_PATHS = {"config_file", "config_dir", "plugin_dir", "kubelet_socket", "cdi_root", "driver_root"}


@dataclass
class RunSpec:
    options: PluginOptions
    nvml: str | None = None
    sim_node: str | None = None
    kubeconfig: str | None = None
    fail_on_init_error: bool = True
    log_level: str = "info"


def encode(spec: RunSpec) -> str:
    opts: dict[str, Any] = {}
    for f in fields(PluginOptions):
        if f.name == "xid_policy":
            continue  # read from DP_DISABLE/ENABLE_HEALTHCHECKS again
        value = getattr(spec.options, f.name)
        opts[f.name] = str(value) if isinstance(value, Path) else value
    opts["overrides"] = dict(spec.options.overrides)
    return json.dumps(
        {
            "options": opts,
            "nvml": spec.nvml,
            "sim_node": spec.sim_node,
            "kubeconfig": spec.kubeconfig,
            "fail_on_init_error": spec.fail_on_init_error,
            "log_level": spec.log_level,
        }
    )


def decode(text: str, environ: dict[str, str] | None = None) -> RunSpec:
    data = json.loads(text)
    opts: dict[str, Any] = {
        k: Path(v) if k in _PATHS and v is not None else v for k, v in data["options"].items()
    }
    opts["xid_policy"] = XidPolicy.from_env(dict(os.environ) if environ is None else environ)
    return RunSpec(
        options=PluginOptions(**opts),
        nvml=data["nvml"],
        sim_node=data["sim_node"],
        kubeconfig=data["kubeconfig"],
        fail_on_init_error=data["fail_on_init_error"],
        log_level=data["log_level"],
    )


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


async def serve(spec: RunSpec) -> int:
    """Run until SIGTERM/SIGINT/SIGQUIT (SIGHUP: reload); the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        loop.add_signal_handler(sig, stop.set)
    try:
        nvml = open_nvml(spec.nvml, spec.sim_node)
    except (BackendError, NvmlError, FileNotFoundError, ValueError) as exc:
        if spec.fail_on_init_error:
            log.error("cannot start NVML: %s", exc)
            return 1
        log.warning(
            "cannot start NVML (%s) and failOnInitError is false: no devices. "
            "Waiting indefinitely.",
            exc,
        )
        await stop.wait()
        return 0
    for bad in spec.options.xid_policy.invalid:
        log.warning("ignoring %s: not an XID", bad)
    client = None
    if spec.options.node_name:
        try:
            client = client_from_env("kubegpu-device-plugin", spec.kubeconfig)
        except Exception as exc:
            log.warning("no Kubernetes API access (%s): using the config files only", exc)
    plugin = DevicePlugin(nvml, spec.options, client)
    loop.add_signal_handler(signal.SIGHUP, plugin.reload)
    task = asyncio.create_task(plugin.run())
    stopper = asyncio.create_task(stop.wait())
    try:
        ready = asyncio.create_task(plugin.ready.wait())
        await asyncio.wait({task, stopper, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        # Everything loaded so far lives as long as the process: keep it out of the
        # collector's full passes, which would otherwise add milliseconds to a call now
        # and then.
        gc.collect()
        gc.freeze()
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        plugin.stop()
        await task
    finally:
        stopper.cancel()
        if client is not None:
            await client.close()
        nvml.close()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m kubegpu.device_plugin '<json from kubegpu device-plugin>'",
            file=sys.stderr,
        )
        return 2
    spec = decode(argv[0])
    setup_logging(spec.log_level)
    return asyncio.run(serve(spec))
