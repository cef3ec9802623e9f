"""The simulated kubelet's plugin watcher: registration sockets found, asked, answered.

As kubelet's plugin manager: every registration socket in ``plugins_registry/`` is
dialled (``GetInfo``), judged by the handler of its plugin type, and told the outcome
(``NotifyRegistrationStatus``); a recreated socket registers again, a removed one
deregisters. A refused plugin is tried again only once its socket changes. The handler
(here the DRA manager, the one plugin type a simulated node watches for: device plugins
register through the device manager's own Registration service) owns what a registered
plugin means.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Protocol

import grpc

from kubegpu.base.tasks import cancel_all
from kubegpu.kube.kubelet import pluginregistration_v1_pb2 as reg
from kubegpu.kube.kubelet import pluginregistration_v1_pb2_grpc as reg_grpc
from kubegpu.kube.kubelet import unix_target

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.2
REGISTRATION_TIMEOUT_S = 5.0


class PluginHandler(Protocol):
    """What the watcher asks of a plugin type's handler (kubelet's PluginHandler)."""

    def validate(self, info: reg.PluginInfo) -> str | None:
        """Why the plugin cannot be registered, or None when it can."""

    async def register(self, info: reg.PluginInfo, socket: Path) -> None:
        """Take the plugin, once it was told it is registered."""

    async def deregister(self, socket: Path) -> None:
        """Forget the plugins registered through `socket` (gone or recreated)."""


class PluginWatcher:
    """Watches one registry directory for one handler."""

    def __init__(
        self,
        node_name: str,
        registry: Path,
        handler: PluginHandler,
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self.node_name = node_name
        self.registry = registry
        self.handler = handler
        self.interval_s = interval_s
        self._seen: dict[Path, tuple[int, int]] = {}  # registration socket -> (inode, mtime)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._watch(), name=f"{self.node_name}:plugins"))

    async def stop(self) -> None:
        """Stop watching; every socket counts as new at the next start."""
        await cancel_all(self._tasks)
        self._seen.clear()

    async def _watch(self) -> None:
        while True:
            try:
                await self._scan()
            except Exception:  # a bad socket must not stop the watcher
                log.exception("node %s: plugin watcher", self.node_name)
            await asyncio.sleep(self.interval_s)

    async def _scan(self) -> None:
        present: dict[Path, tuple[int, int]] = {}
        for path in self.registry.iterdir() if self.registry.is_dir() else []:
            if path.name.startswith(".") or not path.is_socket():
                continue
            with contextlib.suppress(OSError):
                st = path.stat()
                present[path] = (st.st_ino, st.st_mtime_ns)
        for path in [p for p in self._seen if p not in present]:
            del self._seen[path]
            await self.handler.deregister(path)
        for path, stamp in present.items():
            if self._seen.get(path) == stamp:
                continue
            if path in self._seen:  # recreated: the old plugin is gone
                await self.handler.deregister(path)
            if await self._register(path):
                self._seen[path] = stamp

    async def _register(self, socket: Path) -> bool:
        """Register the plugin behind `socket`; False when it is not answering (yet)."""
        try:
            async with grpc.aio.insecure_channel(unix_target(socket)) as channel:
                stub = reg_grpc.RegistrationStub(channel)
                info = await stub.GetInfo(reg.InfoRequest(), timeout=REGISTRATION_TIMEOUT_S)
                problem = self.handler.validate(info)
                if problem is not None:
                    log.warning("node %s: %s: %s", self.node_name, socket, problem)
                    await stub.NotifyRegistrationStatus(
                        reg.RegistrationStatus(plugin_registered=False, error=problem),
                        timeout=REGISTRATION_TIMEOUT_S,
                    )
                    return True  # refused: tried again only once the socket changes
                await stub.NotifyRegistrationStatus(
                    reg.RegistrationStatus(plugin_registered=True),
                    timeout=REGISTRATION_TIMEOUT_S,
                )
                await self.handler.register(info, socket)
                return True
        except grpc.aio.AioRpcError as exc:
            log.debug("node %s: %s not answering: %s", self.node_name, socket, exc.details())
            return False
