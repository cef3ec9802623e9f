"""The MPS control daemon: one MPS server per shared resource, with equal limits per replica.

For every resource whose replicas are MPS clients it creates `<root>/<resource>/pipe` and
`.../log`, starts the control daemon with its GPUs in EXCLUSIVE_PROCESS compute mode, sets
each GPU's pinned device memory limit to `memory / replicas` and the active thread
percentage to `100 / replicas` (MIG instances shared under `sharing.mps.migInstances`: one
daemon per instance in `<root>/<resource>/<MIG-uuid>/`, with the instance's shares), then
creates `<root>/<resource>/.started` once all of the resource's daemons run (the device
plugin registers the resource only after that) and `<root>/.ready`. It follows the same
config (file, or named config chosen by the node label) as the plugin, and on a change
stops the daemons that are no longer wanted before starting the new ones.

The backend (`kubegpu.node.mps`: `SystemMps` on a real node, `RecordingMps` on a simulated
one) comes with the node's GPU backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import AsyncClient

from kubegpu.kube.nodes import NORMAL
from kubegpu.node.config import ConfigCycle, NodeConfig, Unreadable
from kubegpu.node.mps import LIMITS_FILE, MpsBackend, RecordingMps, SystemMps, commands
from kubegpu.nvml import Nvml
from kubegpu.sharing.config import PluginConfig
from kubegpu.sharing.config_source import ConfigSource
from kubegpu.sharing.devices import advertise
from kubegpu.sharing.facts import read_gpus
from kubegpu.sharing.mps import MpsResource, mps_resources

log = logging.getLogger(__name__)

COMPONENT = "kubegpu-mps-control-daemon"
STARTED = ".started"
READY = ".ready"

__all__ = [
    "LIMITS_FILE",
    "MpsBackend",
    "MpsControlDaemon",
    "MpsOptions",
    "RecordingMps",
    "SystemMps",
    "commands",
]


@dataclass
class MpsOptions:
    mps_root: Path = Path("/run/nvidia/mps")  # where this process sees the MPS root
    config_file: Path | None = None
    config_dir: Path | None = None
    default_config: str | None = None
    node_name: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    poll_s: float = 1.0


class MpsControlDaemon:
    def __init__(
        self,
        nvml: Nvml,
        options: MpsOptions,
        backend: MpsBackend,
        client: AsyncClient | None = None,
    ) -> None:
        self.nvml = nvml
        self.options = options
        self.backend = backend
        self.node = NodeConfig(
            ConfigSource(options.config_file, options.config_dir, options.default_config),
            options.overrides,
            node_name=options.node_name,
            client=client,
            component=COMPONENT,
        )
        self.running: dict[str, MpsResource] = {}
        self.ready = asyncio.Event()
        self._cycle = ConfigCycle(self.node, self._wanted, "MpsConfigRejected")
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()

    @property
    def rejection(self) -> str | None:
        """Why the latest config choice was refused, if it was."""
        return self._cycle.rejection

    def _dir(self, resource: str) -> Path:
        return self.options.mps_root / resource

    async def run(self) -> None:
        root = self.options.mps_root
        try:
            root.mkdir(parents=True, exist_ok=True)
            (root / "shm").mkdir(exist_ok=True)
            await self.node.start(self._wake)
            while not self._stopping.is_set():
                try:
                    self._apply()
                except Exception:
                    log.exception("MPS control daemon")
                self.ready.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.options.poll_s)
                self._wake.clear()
        finally:
            for resource in list(self.running.values()):
                self._stop(resource)
            (root / READY).unlink(missing_ok=True)
            await self.node.stop()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def _wanted(self, config: PluginConfig) -> dict[str, MpsResource]:
        gpus = read_gpus(self.nvml)
        return {r.key: r for r in mps_resources(gpus, config, advertise(gpus, config))}

    def _apply(self) -> None:
        outcome = self._cycle.step(keeping="MPS daemons unchanged")
        if isinstance(outcome, Unreadable):  # said once; tried again next round
            if outcome.first:
                log.error("cannot read the GPUs: %s", outcome.message)
            return
        if outcome is None:
            return
        wanted = outcome.read
        for name in [n for n, r in self.running.items() if wanted.get(n) != r]:
            self._stop(self.running.pop(name))
        for name, resource in wanted.items():
            if name not in self.running:
                self._start(resource)
                self.running[name] = resource
        for resource_name in {r.resource for r in wanted.values()}:
            # every daemon of the resource runs (one per MIG instance): it may be served
            (self._dir(resource_name) / STARTED).touch()
        (self.options.mps_root / READY).touch()
        if wanted:
            self.node.report(
                NORMAL,
                "MpsDaemonsStarted",
                "; ".join(
                    f"{r.key}: {len(r.limits)} {'MIG instance' if r.instance else 'GPUs'}, "
                    f"{r.limits[0].replicas} replicas, "
                    f"{r.active_thread_percentage}% threads"
                    for r in wanted.values()
                ),
            )

    def _start(self, resource: MpsResource) -> None:
        directory = self._dir(resource.key)
        (directory / "pipe").mkdir(parents=True, exist_ok=True)
        (directory / "log").mkdir(parents=True, exist_ok=True)
        self.backend.start(resource, directory)
        log.info("MPS daemon for %s started: %s", resource.key, commands(resource))

    def _stop(self, resource: MpsResource) -> None:
        (self._dir(resource.resource) / STARTED).unlink(missing_ok=True)
        try:
            self.backend.stop(resource, self._dir(resource.key))
        except Exception as exc:
            log.warning("stopping the MPS daemon of %s: %s", resource.key, exc)
        log.info("MPS daemon for %s stopped", resource.key)
