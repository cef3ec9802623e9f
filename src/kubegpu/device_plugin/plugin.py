"""The device plugin: config in, one kubelet plugin per advertised resource out.

`DevicePlugin(nvml, options).run()` serves until `stop()`:

- chooses the config (file, or named config by node label), applies the flag/env
  overrides, reads the GPUs and computes what to advertise (`kubegpu.sharing`); a config
  that fails validation is refused with a Node event and the last good one stays;
- runs one gRPC server per resource on `<plugin dir>/nvidia-<name>.sock` and registers it
  with kubelet; resources that appear or disappear with a new config start or stop;
- watches kubelet's socket: when kubelet restarts (the socket is recreated) or our socket
  is removed, every server starts again and registers again;
- writes the node's CDI spec under the CDI root;
- follows NVML's XID events: a counted XID marks every device of the GPU (or of the GPU
  instance) unhealthy in ListAndWatch, and the devices recover after a quiet period in
  which NVML still answers for the GPU;
- any failure to read the GPUs (an NVML error or anything else the GPU layer raises) marks
  every GPU unhealthy. A fault is logged once when it starts and once when it clears, never
  on every poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient

from kubegpu.base.tasks import cancel_all, finish_even_if_cancelled, start_kept
from kubegpu.catalog import nvidia
from kubegpu.cdi.build import common_edits, node_spec, write_spec
from kubegpu.cdi.driver import driver_edits, find_driver_files, hook_path
from kubegpu.cdi.spec import file_name
from kubegpu.device_plugin.annotate import PodAnnotator
from kubegpu.device_plugin.discovery import NodeFacts, read_node
from kubegpu.device_plugin.health import EventReader
from kubegpu.device_plugin.server import ResourceServer, ResourceState
from kubegpu.kube.kubelet import (
    DEVICE_PLUGIN_PATH,
    KUBELET_SOCKET,
    POD_RESOURCES_PATH,
    REGISTRATION_SOCKET,
)
from kubegpu.kube.nodes import NORMAL, WARNING
from kubegpu.node.config import ConfigCycle, NodeConfig, Unreadable, fault_text
from kubegpu.nvml import EventType, GpuEvent, Nvml, NvmlError
from kubegpu.sharing.allocate import CDI_KIND, settings_for
from kubegpu.sharing.config import PluginConfig
from kubegpu.sharing.config_source import ConfigSource
from kubegpu.sharing.devices import Advertised, Device, advertise
from kubegpu.sharing.health import HealthBook, Scope, XidPolicy
from kubegpu.sharing.isolation import Isolation, allocation_isolation

log = logging.getLogger(__name__)

COMPONENT = "kubegpu-device-plugin"
REASON_APPLIED = "DevicePluginConfigApplied"
REASON_REJECTED = "DevicePluginConfigRejected"
REASON_UNHEALTHY = "GpuUnhealthy"
REASON_RECOVERED = "GpuRecovered"
MPS_STARTED = ".started"
POD_RESOURCES_DIR = Path(POD_RESOURCES_PATH).name  # "pod-resources", beside device-plugins/


@dataclass
class PluginOptions:
    """Everything besides the config file that shapes the plugin (CLI flags)."""

    config_file: Path | None = None
    config_dir: Path | None = None
    default_config: str | None = None
    node_name: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)  # flag/env values over files
    plugin_dir: Path = Path(DEVICE_PLUGIN_PATH)
    kubelet_socket: Path | None = Path(REGISTRATION_SOCKET)  # None: serve, do not register
    cdi_root: Path | None = Path(nvidia.CDI_SPEC_DIR)  # None: write no CDI spec
    driver_root: Path = Path("/")  # where this process sees the driver root (MIG caps)
    # where this process sees the driver's files (its libraries and binaries go into the
    # CDI spec, with host paths under flags.nvidiaDriverRoot)
    container_driver_root: Path = Path("/driver-root")
    health_recovery_s: float = 300.0  # 0: unhealthy until restart, as upstream
    xid_policy: XidPolicy = field(default_factory=XidPolicy)
    poll_s: float = 1.0  # kubelet socket, config files, MPS readiness, recovery
    retry_s: float = 30.0  # after a failed registration
    event_wait_s: float = 1.0  # one NVML event wait (bounds shutdown time)
    # where to ask which pod holds allocated devices (the isolation annotation); None: the
    # kubelet's pod-resources socket beside its registration socket
    pod_resources_socket: Path | None = None
    annotate_pods: bool = True


class DevicePlugin:
    def __init__(
        self, nvml: Nvml, options: PluginOptions, client: AsyncClient | None = None
    ) -> None:
        self.nvml = nvml
        self.options = options
        self.node = NodeConfig(
            ConfigSource(options.config_file, options.config_dir, options.default_config),
            options.overrides,
            node_name=options.node_name,
            client=client,
            component=COMPONENT,
        )
        self.config: PluginConfig | None = None  # the config being served
        self.source: str | None = None  # where it came from
        self.facts: NodeFacts | None = None
        self.advertised: Advertised | None = None
        self.servers: dict[str, ResourceServer] = {}
        self.book = HealthBook(options.health_recovery_s)
        self.ready = asyncio.Event()  # set after the first config was applied or refused
        self.applied = 0  # configs applied so far
        self._cycle = ConfigCycle(self.node, self._read, REASON_REJECTED)
        self._force = False
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._kubelet_stamp: tuple[int, int] | None = None
        self._retry_at: dict[str, float] = {}
        self._waiting_for_mps: set[str] = set()
        self._lock = asyncio.Lock()
        self._background: list[asyncio.Task[None]] = []
        self._events_fault: str | None = None  # why GPU events cannot be read, while so
        self._probe_faults: dict[Scope, str] = {}  # recovery probes that failed, logged once
        self.annotator: PodAnnotator | None = None
        socket = options.pod_resources_socket
        if socket is None and options.kubelet_socket is not None:
            socket = options.kubelet_socket.parent.parent / POD_RESOURCES_DIR / KUBELET_SOCKET
        if client is not None and options.annotate_pods and socket is not None:
            self.annotator = PodAnnotator(client, socket, self.describe)

    # -- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = None
        control: list[asyncio.Task[None]] = []
        try:
            await self.node.start(self._wake)
            if self.options.xid_policy.active:
                reader = EventReader(
                    self.nvml,
                    loop,
                    self._on_gpu_event,
                    self._on_event_error,
                    self.options.event_wait_s,
                    on_clear=self._on_event_clear,
                )
                reader.start()
            self._kubelet_stamp = self._kubelet_now()
            async with self._lock:
                await self._apply(force=True)
            self.ready.set()
            if self.annotator is not None:
                self._in_background(self.annotator.run())
            start_kept(control, self._control(), name="device-plugin-control")
            await self._stopping.wait()
        finally:
            if reader is not None:
                reader.request_stop()  # at once: the thread ends even if all else is cut
            await finish_even_if_cancelled(self._shutdown(control, reader))

    async def _shutdown(
        self, control: list[asyncio.Task[None]], reader: EventReader | None
    ) -> None:
        await cancel_all(control)
        if reader is not None:
            await asyncio.to_thread(reader.stop)
        await cancel_all(self._background)
        for server in self.servers.values():
            await server.stop()
        await self.node.stop()
        log.info("device plugin stopped")

    def describe(self, device_ids: Sequence[str]) -> list[Isolation]:
        """What the devices give (`sharing.isolation`), under the config being served."""
        if self.advertised is None or self.facts is None or self.config is None:
            return []
        return allocation_isolation(
            device_ids, self.advertised, self.facts.gpus, self.config.sharing_strategy
        )

    def _allocated(self, device_ids: list[str]) -> None:
        if self.annotator is not None:
            self.annotator.allocated(device_ids)

    def stop(self) -> None:
        """Ask `run()` to finish: servers stop, their sockets are removed."""
        self._stopping.set()

    def reload(self) -> None:
        """Read the GPUs and the config again (SIGHUP)."""
        self._force = True
        self._wake.set()

    # -- the control loop -------------------------------------------------------------------
    async def _control(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.options.poll_s)
            self._wake.clear()
            try:
                async with self._lock:
                    await self._tick()
            except Exception:  # one bad round must not end the plugin
                log.exception("device plugin control loop")

    async def _tick(self) -> None:
        stamp = self._kubelet_now()
        lost = [s for s in self.servers.values() if s.serving and not s.socket.exists()]
        if stamp != self._kubelet_stamp or lost:
            if stamp != self._kubelet_stamp:
                log.info(
                    "kubelet socket changed (kubelet restarted): serving and registering again"
                )
            self._kubelet_stamp = stamp
            self._retry_at.clear()
            for server in self.servers.values():
                if server.serving:
                    await server.start()
        force, self._force = self._force, False
        await self._apply(force=force)
        for server in list(self.servers.values()):
            await self._ensure_started(server)
        await self._recover()

    def _kubelet_now(self) -> tuple[int, int] | None:
        sock = self.options.kubelet_socket
        if sock is None:
            return None
        try:
            st = sock.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    # -- config ------------------------------------------------------------------------------
    @property
    def rejection(self) -> str | None:
        """Why the latest config choice was refused, if it was."""
        return self._cycle.rejection

    def _read(self, config: PluginConfig) -> tuple[NodeFacts, Advertised]:
        facts = read_node(self.nvml, self.options.driver_root)
        return facts, advertise(facts.gpus, config)

    async def _apply(self, *, force: bool) -> None:
        keeping = f"keeping {self.source}" if self.source else "advertising nothing"
        outcome = self._cycle.step(keeping=keeping, force=force)
        if isinstance(outcome, Unreadable):
            self._gpus_unreadable(outcome)
            return
        if outcome is None:
            return
        config, choice = outcome.config, outcome.choice
        facts, advertised = outcome.read
        self.config, self.source, self.facts, self.advertised = (
            config,
            choice.source,
            facts,
            advertised,
        )
        self.applied += 1
        self._write_cdi(facts, config)
        await self._sync()
        counts = ", ".join(f"{k}: {v}" for k, v in advertised.counts().items()) or "no devices"
        self.node.report(NORMAL, REASON_APPLIED, f"{choice.source}: advertising {counts}")
        if not advertised.resources:
            log.warning("No devices found. Waiting indefinitely.")

    def _state(self, resource: str, devices: list[Device]) -> ResourceState:
        assert self.config is not None and self.facts is not None
        return ResourceState(
            devices=devices,
            settings=settings_for(
                self.config,
                resource,
                control_devices=self.facts.control_devices,
                device_paths=self.facts.nodes,
            ),
            policy=self.config.flags.plugin.shared_devices_allocation_policy,
            scores=self.facts.scores,
            unhealthy=frozenset(self.book.unhealthy(devices)),
        )

    async def _sync(self) -> None:
        """Make the running servers match what is advertised."""
        assert self.advertised is not None
        wanted = self.advertised.resources
        for name in [n for n in self.servers if n not in wanted]:
            log.info("%s is no longer advertised", name)
            await self.servers.pop(name).stop()
        for name, devices in wanted.items():
            state = self._state(name, devices)
            server = self.servers.get(name)
            if server is None:
                server = self.servers[name] = ResourceServer(name, self.options.plugin_dir, state)
                server.on_allocate = self._allocated
            else:
                await server.update(state)
            await self._ensure_started(server)

    def _mps_ready(self, server: ResourceServer) -> bool:
        root = server.state.settings.mps_root
        if not root or not any(d.is_replica for d in server.state.devices):
            return True
        return (Path(root) / server.resource / MPS_STARTED).exists()

    async def _ensure_started(self, server: ResourceServer) -> None:
        if not self._mps_ready(server):
            if server.resource not in self._waiting_for_mps:
                self._waiting_for_mps.add(server.resource)
                log.info("%s: waiting for the MPS control daemon", server.resource)
            if server.serving:
                await server.stop()
            return
        self._waiting_for_mps.discard(server.resource)
        if not server.serving:
            try:
                await server.start()
            except (RuntimeError, OSError) as exc:  # e.g. the socket cannot be bound
                log.error(
                    "%s: cannot serve on %s (%s); trying again", server.resource, server.socket, exc
                )
                return
        kubelet = self.options.kubelet_socket
        if server.registered or kubelet is None or self._kubelet_stamp is None:
            return
        if time.monotonic() < self._retry_at.get(server.resource, 0.0):
            return
        try:
            await server.register(kubelet)
        except (grpc.aio.AioRpcError, TimeoutError, OSError) as exc:
            self._retry_at[server.resource] = time.monotonic() + self.options.retry_s
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else repr(exc)
            log.error(
                "%s: registration with kubelet failed (%s); retrying in %.0fs",
                server.resource,
                detail,
                self.options.retry_s,
            )
            return
        log.info("%s: registered with kubelet as %s", server.resource, server.socket.name)

    def _write_cdi(self, facts: NodeFacts, config: PluginConfig) -> None:
        root = self.options.cdi_root
        if root is None:
            return
        flags = config.flags
        driver = driver_edits(
            find_driver_files(self.options.container_driver_root),
            flags.nvidia_driver_root,
            hook_path(os.environ),
        )
        common = common_edits(facts.control_devices, flags.dev_root, driver)
        spec = node_spec(CDI_KIND, facts.devices, common, flags.dev_root)
        try:
            write_spec(root, file_name(CDI_KIND), spec)
        except OSError as exc:
            log.error("cannot write the CDI spec under %s: %s", root, exc)

    # -- health ------------------------------------------------------------------------------
    def _on_gpu_event(self, event: GpuEvent) -> None:
        lost = event.type == EventType.GPU_LOST
        if not lost and not self.options.xid_policy.counts(event.xid):
            log.info("GPU %d: XID %d ignored (application error)", event.device_index, event.xid)
            return
        scope: Scope = (event.device_index, event.gpu_instance_id, event.compute_instance_id)
        self.book.record(scope, time.monotonic())
        where = f"GPU {event.device_index} ({event.uuid})"
        if event.gpu_instance_id is not None:
            where += f" GPU instance {event.gpu_instance_id}"
        what = "fell off the bus" if lost else f"XID {event.xid}"
        self.node.report(WARNING, REASON_UNHEALTHY, f"{where}: {what}; its devices are unhealthy")
        self._in_background(self._refresh_health())

    def _gpus_unreadable(self, fault: Unreadable) -> None:
        """The GPUs cannot be read (config apply): every known GPU is unhealthy; said once."""
        if fault.first:
            log.error("cannot read the GPUs: %s; marking every GPU unhealthy", fault.message)
            if not isinstance(fault.error, NvmlError):
                log.debug("reading the GPUs", exc_info=fault.error)
        if self._mark_all_unhealthy():
            self._in_background(self._refresh_health())

    def _mark_all_unhealthy(self) -> bool:
        """Record a fault on every known GPU; True when a GPU was not marked before."""
        now = time.monotonic()
        scopes = [(g.index, None, None) for g in (self.facts.gpus if self.facts else [])]
        new = any(scope not in self.book.faults for scope in scopes)
        for scope in scopes:
            self.book.record(scope, now)
        return new

    def _on_event_error(self, exc: Exception) -> None:
        """Called on every failed event wait: the fault's time stays fresh (no recovery
        while it lasts) but it is logged, and reported, only when it starts."""
        message = fault_text(exc)
        new = self._mark_all_unhealthy()
        if self._events_fault is None:
            self.node.report(
                WARNING,
                REASON_UNHEALTHY,
                f"waiting for GPU events failed: {message}; every GPU is unhealthy",
            )
        self._events_fault = message
        if new:
            self._in_background(self._refresh_health())

    def _on_event_clear(self) -> None:
        if self._events_fault is not None:
            log.info(
                "GPU events can be read again (was: %s); the GPUs recover once NVML answers "
                "for them",
                self._events_fault,
            )
        self._events_fault = None

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        start_kept(self._background, coro)

    async def _refresh_health(self) -> None:
        if self.advertised is None:
            return
        for name, server in list(self.servers.items()):
            devices = self.advertised.resources.get(name)
            if devices is not None:
                await server.update(self._state(name, devices))

    async def _recover(self) -> None:
        due = self.book.due(time.monotonic())
        healed = []
        for scope in due:
            try:
                self.nvml.device(scope[0])
            except Exception as exc:  # any failure to read the GPU: it stays unhealthy
                message = fault_text(exc)
                if self._probe_faults.get(scope) != message:
                    log.info("GPU %d not recovered yet: %s", scope[0], message)
                self._probe_faults[scope] = message
                continue
            self._probe_faults.pop(scope, None)
            self.book.recover(scope)
            healed.append(scope)
        if healed:
            gpus = ", ".join(str(s[0]) for s in healed)
            self.node.report(
                NORMAL,
                REASON_RECOVERED,
                f"GPU {gpus}: no counted XID for {self.options.health_recovery_s:g}s and NVML "
                "answers; devices healthy again",
            )
            await self._refresh_health()

    # -- for callers and tests -------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        return self.advertised.counts() if self.advertised else {}

    def unhealthy(self) -> dict[str, set[str]]:
        return {n: set(s.state.unhealthy) for n, s in self.servers.items() if s.state.unhealthy}
