"""The config this node should run, and where the administrator hears about it.

Shared by the device plugin and the MPS control daemon: the chosen config file (by the
node label `nvidia.com/device-plugin.config` when configs come from a directory), the
flag/env overrides on top, and Node events for what was applied or refused. Without
Kubernetes API access (no node name) only the files are used and events are only logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from lightkube import AsyncClient

from kubegpu.kube.nodes import NORMAL, node_label, record_node_event, watch_node
from kubegpu.sharing.config import PluginConfig, SharingConfigError, parse_config
from kubegpu.sharing.config_source import CONFIG_LABEL, ConfigChoice, ConfigSource

log = logging.getLogger(__name__)

FIRST_LABEL_TIMEOUT_S = 10.0
MAX_KEPT_EVENTS = 100


class NodeConfig:
    def __init__(
        self,
        source: ConfigSource,
        overrides: Mapping[str, Any] | None = None,
        *,
        node_name: str | None = None,
        client: AsyncClient | None = None,
        component: str = "kubegpu-device-plugin",
    ) -> None:
        self.source = source
        self.overrides = dict(overrides or {})
        self.node_name = node_name
        self.client = client if node_name else None
        self.component = component
        self.label: str | None = None
        self.events: list[tuple[str, str, str]] = []  # (type, reason, message), newest last
        self._label_known = asyncio.Event()
        self._wake: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self, wake: asyncio.Event) -> None:
        """Watch the node label (setting `wake` when it changes); wait briefly for its value."""
        self._wake = wake
        if self.client is None or self.node_name is None:
            self._label_known.set()
            return
        self._spawn(self._watch(self.client, self.node_name))
        try:
            await asyncio.wait_for(self._label_known.wait(), FIRST_LABEL_TIMEOUT_S)
        except TimeoutError:
            log.warning(
                "node %s: label %s unknown after %.0fs; using the default config until it is",
                self.node_name,
                CONFIG_LABEL,
                FIRST_LABEL_TIMEOUT_S,
            )

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self, client: AsyncClient, name: str) -> None:
        async for node in watch_node(client, name):
            label = node_label(node, CONFIG_LABEL)
            first = not self._label_known.is_set()
            self._label_known.set()
            if first or label != self.label:
                if not first:
                    log.info("node %s: %s is now %r", name, CONFIG_LABEL, label)
                self.label = label
                if self._wake is not None:
                    self._wake.set()

    def choose(self) -> ConfigChoice:
        return self.source.choose(self.label)

    def load(self, choice: ConfigChoice) -> PluginConfig:
        """The config of `choice` with the overrides applied; SharingConfigError if unusable."""
        if choice.error:
            raise SharingConfigError(choice.error)
        return parse_config(choice.text or "", choice.source, self.overrides)

    def report(self, type_: str, reason: str, message: str) -> None:
        """Log, keep, and (with API access) record a Node event."""
        (log.info if type_ == NORMAL else log.warning)("%s: %s", reason, message)
        self.events.append((type_, reason, message))
        del self.events[:-MAX_KEPT_EVENTS]
        if self.client is not None and self.node_name is not None:
            self._spawn(self._record(self.client, self.node_name, type_, reason, message))

    async def _record(
        self, client: AsyncClient, node: str, type_: str, reason: str, message: str
    ) -> None:
        try:
            await record_node_event(
                client, node, reason=reason, message=message, type_=type_, component=self.component
            )
        except Exception as exc:
            log.warning("cannot record event %s on node %s: %s", reason, node, exc)
