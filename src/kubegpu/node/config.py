"""The device-plugin config this node should run, and where the administrator hears about it.

Shared by the device plugin, the MPS control daemon and feature discovery, so they agree:
the config file chosen by `ConfigSource` (by the node label `nvidia.com/device-plugin.config`
when configs come from a directory), the flag/env overrides on top, and Node events for
what was applied or refused. Without Kubernetes API access (no node name) only the files
are used and events are only logged.

The label comes from a watch of this node's own Node: `start()` runs one, or a component
that watches its Node for more (feature discovery) feeds each Node's labels to `observe()`.
When configs come from a directory the label picks one, so the first config waits briefly
for the label's value (`wait_for_label`) rather than applying the default and then
switching a moment later.

`ConfigCycle` is the one choose -> load -> read the GPUs -> advertise round of the device
plugin and the MPS control daemon: a choice is applied once, a config the node cannot run is
refused with a Node event (the component keeps what it runs), a GPU read failure is retried
next round and said once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lightkube import AsyncClient

from kubegpu.base.tasks import cancel_all, start_kept
from kubegpu.kube.labels import labels_of
from kubegpu.kube.nodes import NORMAL, WARNING, record_node_event, watch_node
from kubegpu.nvml import NvmlError
from kubegpu.sharing.config import PluginConfig, SharingConfigError, parse_config
from kubegpu.sharing.config_source import CONFIG_LABEL, ConfigChoice, ConfigSource
from kubegpu.sharing.devices import StrategyError

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
        first_label_timeout_s: float = FIRST_LABEL_TIMEOUT_S,
    ) -> None:
        self.source = source
        self.overrides = dict(overrides or {})
        self.node_name = node_name
        self.client = client if node_name else None
        self.component = component
        self.first_label_timeout_s = first_label_timeout_s
        self.label: str | None = None
        self.events: list[tuple[str, str, str]] = []  # (type, reason, message), newest last
        self._label_known = asyncio.Event()
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._ignored_said: set[str] = set()
        if source.config_dir is not None and source.config_file is not None:
            log.warning(
                "--config-file %s is ignored: --config-dir %s takes its place",
                source.config_file,
                source.config_dir,
            )
        elif source.config_dir is None and source.default_config:
            log.warning(
                "--default-config %r is ignored: it names a config of --config-dir, and none "
                "is given",
                source.default_config,
            )

    @property
    def watched(self) -> bool:
        """Whether the node label is known from the API (else only files count)."""
        return self.client is not None and self.node_name is not None

    async def start(self, wake: asyncio.Event | None = None) -> None:
        """Watch the node label (setting `wake` when it changes); wait for its first value."""
        self._wake = wake
        if self.client is None or self.node_name is None:
            self._label_known.set()
            return
        self._spawn(self._watch(self.client, self.node_name))
        await self.wait_for_label()

    async def wait_for_label(self) -> None:
        """When the label picks the config: wait (bounded) until its value is known."""
        if not self.watched or self.source.config_dir is None:
            return
        try:
            await asyncio.wait_for(self._label_known.wait(), self.first_label_timeout_s)
        except TimeoutError:
            log.warning(
                "node %s: label %s unknown after %.0fs; using the default config until it is",
                self.node_name,
                CONFIG_LABEL,
                self.first_label_timeout_s,
            )

    def observe(self, labels: Mapping[str, str]) -> bool:
        """Take the Node's labels; True when the config label changed after the first look."""
        label = labels.get(CONFIG_LABEL)
        first = not self._label_known.is_set()
        self._label_known.set()
        if label == self.label:
            return False
        self.label = label
        if first:
            return False
        log.info("node %s: %s is now %r", self.node_name, CONFIG_LABEL, label)
        if self._wake is not None:
            self._wake.set()
        return True

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        start_kept(self._tasks, coro)

    async def _watch(self, client: AsyncClient, name: str) -> None:
        async for node in watch_node(client, name):
            first = not self._label_known.is_set()
            self.observe(labels_of(node) if node is not None else {})
            if first and self._wake is not None:
                self._wake.set()

    def choose(self) -> ConfigChoice:
        return self.source.choose(self.label)

    def load(self, choice: ConfigChoice) -> PluginConfig:
        """The config of `choice` with the overrides applied; SharingConfigError if unusable."""
        if choice.error:
            raise SharingConfigError(choice.error)
        config = parse_config(choice.text or "", choice.source, self.overrides)
        self._say_ignored(choice.source, config)
        return config

    def _say_ignored(self, source: str, config: PluginConfig) -> None:
        """Warn once per source and field about a value kubegpu accepts but does not act on
        (`PluginConfig.ignored_fields`), so it is never mistaken for one that took effect."""
        for field, value, why in config.ignored_fields():
            message = f"{source}: field {field}, value {value!r} is accepted and ignored: {why}"
            if message not in self._ignored_said:
                self._ignored_said.add(message)
                log.warning("%s", message)

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


T = TypeVar("T")


def fault_text(exc: Exception) -> str:
    """One line for a GPU-layer failure: NVML's own words, else the exception's kind too."""
    if isinstance(exc, NvmlError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Applied(Generic[T]):
    """A choice that was loaded and read: its config and what the component read with it."""

    choice: ConfigChoice
    config: PluginConfig
    read: T


@dataclass(frozen=True)
class Unreadable:
    """The GPUs could not be read under the choice; it is tried again next round."""

    error: Exception
    message: str  # fault_text(error)
    first: bool  # a new fault (say it), not the same one as the round before


class ConfigCycle(Generic[T]):
    """choose -> load -> read -> advertise, shared so the plugin and the MPS daemon agree.

    `read(config)` reads the GPUs and works out what the component runs under `config`; a
    SharingConfigError or StrategyError from it (or from loading) refuses the config, any
    other exception is a GPU-layer failure."""

    def __init__(
        self, node: NodeConfig, read: Callable[[PluginConfig], T], rejected_reason: str
    ) -> None:
        self.node = node
        self.read = read
        self.rejected_reason = rejected_reason
        self.rejection: str | None = None  # why the latest choice was refused, if it was
        self.read_fault: str | None = None  # why the GPUs could not be read, while so
        self._choice_key: object = None

    def step(self, *, keeping: str, force: bool = False) -> Applied[T] | Unreadable | None:
        """One round. None when the choice is the one applied already (unless `force`) or
        was refused: the Node event says why and that the component is `keeping` what it
        runs."""
        choice = self.node.choose()
        if not force and choice.key == self._choice_key:
            return None
        self._choice_key = choice.key
        try:
            config = self.node.load(choice)
            read = self.read(config)
        except (SharingConfigError, StrategyError) as exc:
            message = str(exc) if isinstance(exc, SharingConfigError) else f"{choice.source}: {exc}"
            self.rejection = message
            self.node.report(WARNING, self.rejected_reason, f"{message}; {keeping}")
            return None
        except Exception as exc:  # the GPU layer failed: NVML's error or any other
            self._choice_key = None  # try again next round
            message = fault_text(exc)
            first = message != self.read_fault
            self.read_fault = message
            return Unreadable(exc, message, first)
        if self.read_fault is not None:
            log.info("the GPUs can be read again")
            self.read_fault = None
        self.rejection = None
        return Applied(choice, config, read)
