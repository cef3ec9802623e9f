"""The device plugin and its MPS control daemon as programs (`kubegpu device-plugin`,
`kubegpu mps-control-daemon`): the flags made into options, NVML, the API client, and
clean shutdown. `kubegpu.node.runtime.run()` drives them (signals, exit status).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kubegpu.device_plugin.mps import MpsControlDaemon, MpsOptions
from kubegpu.device_plugin.plugin import DevicePlugin, PluginOptions
from kubegpu.kube.kubelet import DEVICE_PLUGIN_PATH
from kubegpu.node.api import optional_api_client
from kubegpu.node.config import NodeConfig
from kubegpu.node.gpus import GpuBackend
from kubegpu.node.intervals import HEALTH_RECOVERY, POLL, check_seconds
from kubegpu.node.overrides import config_overrides
from kubegpu.node.runtime import ComponentError
from kubegpu.nvml import NvmlError
from kubegpu.sharing.config import PluginConfig, SharingConfigError, load_config, with_overrides
from kubegpu.sharing.config_source import ConfigSource
from kubegpu.sharing.health import XidPolicy

log = logging.getLogger("kubegpu.device_plugin")


@dataclass(frozen=True)
class DevicePluginFlags:
    """The device plugin's flags as given (None: not given). `overrides` holds the config
    overrides by variable name (MIG_STRATEGY, PASS_DEVICE_SPECS...)."""

    config_file: Path | None = None
    config_dir: Path | None = None
    default_config: str | None = None
    node_name: str | None = None
    kubeconfig: str | None = None
    overrides: Mapping[str, str | None] = field(default_factory=dict)
    kubelet_socket: Path | None = None  # None: serve without registering
    plugin_dir: Path | None = None  # default: the kubelet socket's directory
    cdi_root: Path | None = None
    container_driver_root: Path = Path("/driver-root")
    health_recovery_s: float = 300.0
    poll_s: float = 1.0


def fail_on_init_error(config_file: Path | None, overrides: Mapping[str, str]) -> bool:
    """failOnInitError from the flags over the config file (a bad file counts as absent)."""
    if config_file is not None:
        with contextlib.suppress(SharingConfigError):
            return load_config(config_file, overrides).flags.fail_on_init_error
    return with_overrides(PluginConfig(), overrides).flags.fail_on_init_error


def _no_stdin_config(config_file: Path | None) -> None:
    """`-` is no config file for a program that reads its config again while it runs."""
    if config_file is not None and str(config_file) == "-":
        raise ComponentError(
            "--config-file -: standard input cannot be the config (it is read again while "
            "the program runs); give a file"
        )


def plugin_options(
    flags: DevicePluginFlags, environ: Mapping[str, str] | None = None
) -> tuple[PluginOptions, bool]:
    """The plugin's options and its failOnInitError; ComponentError for bad flags."""
    check_seconds(flags.poll_s, POLL, "--poll-interval", "KUBEGPU_POLL_INTERVAL")
    check_seconds(
        flags.health_recovery_s,
        HEALTH_RECOVERY,
        "--health-recovery-period",
        "DP_HEALTH_RECOVERY_PERIOD",
    )
    overrides = config_overrides(flags.overrides)
    config_file = flags.config_file if flags.config_dir is None else None
    _no_stdin_config(config_file)
    if config_file is not None and not config_file.exists():
        raise ComponentError(f"--config-file {flags.config_file}: no such file")
    policy = XidPolicy.from_env(dict(os.environ) if environ is None else environ)
    socket = flags.kubelet_socket
    options = PluginOptions(
        config_file=flags.config_file,
        config_dir=flags.config_dir,
        default_config=flags.default_config,
        node_name=flags.node_name or None,
        overrides=overrides,
        plugin_dir=flags.plugin_dir or (socket.parent if socket else Path(DEVICE_PLUGIN_PATH)),
        kubelet_socket=socket,
        cdi_root=flags.cdi_root,
        container_driver_root=flags.container_driver_root,
        health_recovery_s=flags.health_recovery_s,
        xid_policy=policy,
        poll_s=flags.poll_s,
    )
    return options, fail_on_init_error(config_file, overrides)


class DevicePluginProgram:
    """The plugin with its NVML session and API client; SIGHUP reloads the config."""

    def __init__(self, flags: DevicePluginFlags, gpus: GpuBackend) -> None:
        self.options, self.fail_on_init_error = plugin_options(flags)
        self.kubeconfig = flags.kubeconfig
        self.gpus = gpus
        self.plugin: DevicePlugin | None = None
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()
        if self.plugin is not None:
            self.plugin.stop()

    def reload(self) -> None:
        if self.plugin is not None:
            self.plugin.reload()

    async def _fail_on_init_error(self) -> bool:
        """failOnInitError of the config this node runs. With --config-dir the node label
        picks a named config, so it is read here (after the label's first value) rather
        than at start, where only --config-file is known; a config that cannot be used
        counts as absent, as for --config-file."""
        o = self.options
        if o.config_dir is None:
            return self.fail_on_init_error
        client = None
        if o.node_name:
            client = optional_api_client("kubegpu-device-plugin", self.kubeconfig)
        node = NodeConfig(
            ConfigSource(None, o.config_dir, o.default_config),
            o.overrides,
            node_name=o.node_name,
            client=client,
            component="kubegpu-device-plugin",
        )
        try:
            await node.start()
            choice = node.choose()
            try:
                config = await asyncio.to_thread(node.load, choice)
            except SharingConfigError:
                return self.fail_on_init_error
            return config.flags.fail_on_init_error
        finally:
            await node.stop()
            if client is not None:
                await client.close()

    async def run(self) -> None:
        invalid = self.options.xid_policy.invalid
        if invalid:
            more = f" (and {len(invalid) - 10} more)" if len(invalid) > 10 else ""
            log.warning("ignoring what is not an XID: %s%s", ", ".join(invalid[:10]), more)
        try:
            nvml = self.gpus.open()
        except NvmlError as exc:
            if await self._fail_on_init_error():
                raise ComponentError(f"cannot start NVML: {exc}") from None
            log.warning(
                "cannot start NVML (%s) and failOnInitError is false: no devices. "
                "Waiting indefinitely.",
                exc,
            )
            await self._stop.wait()
            return
        client = None
        if self.options.node_name:
            client = optional_api_client("kubegpu-device-plugin", self.kubeconfig)
        try:
            self.plugin = plugin = DevicePlugin(nvml, self.options, client)
            if self._stop.is_set():
                return
            task = asyncio.create_task(plugin.run())
            ready = asyncio.create_task(plugin.ready.wait())
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
            ready.cancel()
            # Everything loaded so far lives as long as the process: keep it out of the
            # collector's full passes, which would otherwise add milliseconds to a call now
            # and then.
            gc.collect()
            gc.freeze()
            await task
        finally:
            if client is not None:
                await client.close()
            nvml.close()


@dataclass(frozen=True)
class MpsFlags:
    options: MpsOptions
    overrides: Mapping[str, str | None] = field(default_factory=dict)
    kubeconfig: str | None = None


class MpsProgram:
    """The MPS control daemon with its NVML session, MPS backend and API client."""

    def __init__(self, flags: MpsFlags, gpus: GpuBackend) -> None:
        check_seconds(flags.options.poll_s, POLL, "--poll-interval", "KUBEGPU_POLL_INTERVAL")
        _no_stdin_config(flags.options.config_file)
        self.options = replace(flags.options, overrides=config_overrides(flags.overrides))
        self.kubeconfig = flags.kubeconfig
        self.gpus = gpus
        self.daemon: MpsControlDaemon | None = None
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True
        if self.daemon is not None:
            self.daemon.stop()

    async def run(self) -> None:
        nvml = self.gpus.open_or_fail()
        client = None
        if self.options.node_name:
            client = optional_api_client("kubegpu-mps-control-daemon", self.kubeconfig)
        try:
            self.daemon = MpsControlDaemon(nvml, self.options, self.gpus.mps, client)
            if self._stopped:
                return
            await self.daemon.run()
        finally:
            if client is not None:
                await client.close()
            nvml.close()
