"""GPU feature discovery: keeps the GFD labels of this node's GPUs on its own Node.

Each pass reads NVML and the active device-plugin config, computes the label set
(`kubegpu.sharing.labels.compute_labels`) and server-side applies it to the Node under one
field manager, so the labels it wrote before and that no longer apply are removed and no
other label is touched. A pass runs every sleep interval, and at once when the config file
changes, when the MIG manager reports a new `nvidia.com/mig.config.state`, when one of its
labels was changed or removed by someone else, and on `trigger()` (SIGHUP).

Labels stay on the Node when the program stops: during a MIG change its pod is paused, and
the operator reads `nvidia.com/mig.capable` in the meantime.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from kubegpu.base.tasks import cancel_all, start_kept
from kubegpu.catalog import nvidia
from kubegpu.feature_discovery.facts import read_system
from kubegpu.kube.labels import API_ERRORS, apply_node_labels, labels_of, node_event
from kubegpu.kube.nodes import watch_node
from kubegpu.node.config import NodeConfig
from kubegpu.node.overrides import OverrideError, config_overrides
from kubegpu.node.runtime import ComponentError
from kubegpu.nvml import Nvml, NvmlError
from kubegpu.sharing import isolation
from kubegpu.sharing.config import (
    PluginConfig,
    SharingConfigError,
    parse_duration,
    sleep_interval_problem,
    with_overrides,
)
from kubegpu.sharing.config_source import ConfigChoice, ConfigSource
from kubegpu.sharing.facts import read_gpus
from kubegpu.sharing.labels import LabelError, SystemFacts, compute_labels

log = logging.getLogger(__name__)

FIELD_MANAGER = "kubegpu-feature-discovery"
COMPONENT = "kubegpu-feature-discovery"
TIMESTAMP_LABEL = nvidia.GFD_TIMESTAMP
MIG_STATE_LABEL = nvidia.MIG_CONFIG_STATE
CONFIG_POLL_S = 1.0
RETRY_S = 5.0


class DiscoveryError(ComponentError):
    """Feature discovery cannot start (a bad config, or NVML with failOnInitError)."""


@dataclass(frozen=True)
class GfdOptions:
    """Values given by flag or environment; None leaves the config file's value (or default)."""

    node_name: str | None = None  # label this Node; None: only write `output_file` / stdout
    config_file: Path | None = None
    config_dir: Path | None = None  # named configs; the node label picks one
    default_config: str | None = None
    mig_strategy: str | None = None
    fail_on_init_error: bool | None = None
    oneshot: bool | None = None
    no_timestamp: bool | None = None
    sleep_interval: str | None = None
    output_file: str | None = None  # `key=value` lines, the NFD features.d format; "-": stdout
    machine_type_file: str | None = None
    sysfs_root: Path = Path("/sys")
    config_poll_s: float = CONFIG_POLL_S


@dataclass
class Effective:
    """The options after merging flags, environment and the config file."""

    config: PluginConfig
    oneshot: bool
    no_timestamp: bool
    interval_s: float | None  # None: 'infinite'
    machine_type_file: Path
    fail_on_init_error: bool


def overrides_for(options: GfdOptions) -> dict[str, Any]:
    """Flag values over the environment's (MPS_ROOT, MIG_STRATEGY... as the plugin reads
    them), both over the config file; OverrideError for a value the config cannot take."""
    flags = {"MIG_STRATEGY": options.mig_strategy, "FAIL_ON_INIT_ERROR": options.fail_on_init_error}
    return config_overrides(flags, os.environ)


def effective(options: GfdOptions, config: PluginConfig) -> Effective:
    config = with_overrides(config, overrides_for(options))
    gfd = config.flags.gfd
    interval_text = options.sleep_interval or gfd.sleep_interval
    if (problem := sleep_interval_problem(interval_text)) is not None:
        raise SharingConfigError(f"sleep interval {problem}")
    interval = None if interval_text == "infinite" else parse_duration(interval_text)
    return Effective(
        config=config,
        oneshot=options.oneshot if options.oneshot is not None else gfd.oneshot,
        no_timestamp=options.no_timestamp if options.no_timestamp is not None else gfd.no_timestamp,
        interval_s=interval,
        machine_type_file=Path(options.machine_type_file or gfd.machine_type_file),
        fail_on_init_error=config.flags.fail_on_init_error,
    )


def features_text(labels: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))


def write_features(path: str, labels: Mapping[str, str]) -> None:
    """The NFD local-source file, replaced atomically; `-` prints to stdout."""
    text = features_text(labels)
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)  # never a half-written file left beside the target


class FeatureDiscovery:
    """`await run()` until `stop()`; `label_once()` computes and writes one label set."""

    def __init__(
        self,
        options: GfdOptions,
        open_nvml: Callable[[], Nvml],
        client: AsyncClient | None = None,
    ) -> None:
        if options.node_name and client is None:
            raise ValueError("labelling a Node needs an API client")
        self.options = options
        self.client = client
        self._open_nvml = open_nvml
        self._nvml: Nvml | None = None
        self._nvml_failed = False
        self._stop = asyncio.Event()
        self._trigger = asyncio.Event()
        self._reload = True
        self._settings: Effective | None = None
        self._chosen_key: tuple[str, str | None, str | None] | None = None
        self.node = NodeConfig(
            ConfigSource(options.config_file, options.config_dir, options.default_config),
            node_name=options.node_name,
            client=client,
            component=COMPONENT,
        )
        self._node_uid: str | None = None
        self._last_error = ""
        self.written: dict[str, str] = {}
        self.passes = 0
        self.labelled = asyncio.Event()  # set after the first labels are written

    # -- lifecycle ---------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def reload(self) -> None:
        """SIGHUP: label again now with the config read again."""
        self.trigger(reload=True)

    def trigger(self, reload: bool = True) -> None:
        """Label again now (and re-read the config): what SIGHUP does."""
        self._reload = self._reload or reload
        self._trigger.set()

    async def run(self) -> None:
        watchers: list[asyncio.Task[None]] = []
        if self.options.node_name and self.client is not None:
            start_kept(watchers, self._watch_node(), name="gfd:node")
            await self.node.wait_for_label()
        if self.options.config_file is not None or self.options.config_dir is not None:
            start_kept(watchers, self._watch_config(), name="gfd:config")
        try:
            self._load()  # a bad config or NVML at start is fatal, as upstream
            while not self._stop.is_set():
                ok = await self._pass()
                settings = self._settings
                assert settings is not None
                if settings.oneshot:
                    if not ok:
                        raise DiscoveryError(self._last_error or "labelling failed")
                    return
                interval = (
                    settings.interval_s if ok else min(RETRY_S, settings.interval_s or RETRY_S)
                )
                await self._sleep(interval)
        finally:
            await cancel_all(watchers)
            if self._nvml is not None:
                self._nvml.close()

    async def _sleep(self, seconds: float | None) -> None:
        waits = [asyncio.create_task(self._stop.wait()), asyncio.create_task(self._trigger.wait())]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        self._trigger.clear()

    # -- one pass -----------------------------------------------------------------------------
    def _choose(self) -> ConfigChoice:
        return self.node.choose()

    def _load(self) -> Effective:
        """Read the chosen config and apply the flags; also opens NVML the first time."""
        chosen = self._choose()
        self._chosen_key = chosen.key
        self._reload = False
        try:
            # overrides go in before validation: MPS_ROOT may supply what the file lacks
            self.node.overrides = overrides_for(self.options)
            settings = effective(self.options, self.node.load(chosen))
        except (SharingConfigError, OverrideError) as exc:
            raise DiscoveryError(str(exc)) from None
        self._settings = settings
        if self._nvml is None and not self._nvml_failed:
            try:
                self._nvml = self._open_nvml()
            except (NvmlError, OSError, ValueError) as exc:
                if settings.fail_on_init_error:
                    raise DiscoveryError(f"cannot open NVML: {exc}") from None
                log.warning("cannot open NVML (%s); failOnInitError=false: no GPU labels", exc)
                self._nvml_failed = True
        return settings

    def compute(self) -> dict[str, str]:
        """The labels for now (LabelError, NvmlError when they cannot be computed)."""
        settings = self._settings or self._load()
        timestamp = None if settings.no_timestamp else int(time.time())
        if self._nvml is None:
            return compute_labels([], settings.config, SystemFacts("", (0, 0)), timestamp=timestamp)
        gpus = read_gpus(self._nvml)
        system = read_system(self._nvml, settings.machine_type_file, self.options.sysfs_root)
        labels = compute_labels(gpus, settings.config, system, timestamp=timestamp)
        return labels | isolation.node_labels(gpus, settings.config)

    async def label_once(self) -> dict[str, str]:
        """Compute and write the labels once; errors propagate."""
        if self._reload:
            self._load()
        labels = await asyncio.to_thread(self.compute)
        await self._write(labels)
        return labels

    async def _pass(self) -> bool:
        try:
            if self._reload:
                try:
                    self._load()
                except DiscoveryError as exc:
                    # keep labelling with the last good config; say why once
                    await self._report(f"the new config is not used: {exc}")
                    self._reload = False
            await self.label_once()
        except (LabelError, NvmlError) as exc:
            await self._report(f"cannot compute GPU labels: {exc}")
            return False
        except API_ERRORS as exc:
            log.warning("cannot write the labels to node %s: %s", self.options.node_name, exc)
            self._node_uid = None
            return False
        self._last_error = ""
        return True

    async def _report(self, message: str) -> None:
        if message == self._last_error:
            return
        self._last_error = message
        log.error("%s", message)
        if self.options.node_name and self.client is not None:
            await node_event(
                self.client,
                self.options.node_name,
                reason="GpuFeatureDiscoveryFailed",
                message=message + " (the labels written before are kept)",
                component=COMPONENT,
                warning=True,
            )

    async def _write(self, labels: dict[str, str]) -> None:
        node_name = self.options.node_name
        if node_name and self.client is not None:
            if self._node_uid is None:
                node = await self.client.get(Node, node_name)
                self._node_uid = node.metadata.uid if node.metadata else None
            await apply_node_labels(
                self.client, node_name, labels, field_manager=FIELD_MANAGER, uid=self._node_uid
            )
        output = self.options.output_file or (None if node_name else "-")
        if output:
            await asyncio.to_thread(write_features, output, labels)
        self.written = labels
        self.passes += 1
        self.labelled.set()

    # -- triggers -------------------------------------------------------------------------------
    async def _watch_config(self) -> None:
        while True:
            await asyncio.sleep(self.options.config_poll_s)
            chosen = await asyncio.to_thread(self._choose)
            if chosen.key != self._chosen_key:
                log.info("config %s changed; relabelling", chosen.source)
                self._chosen_key = chosen.key
                self.trigger(reload=True)

    async def _watch_node(self) -> None:
        assert self.client is not None and self.options.node_name
        state: str | None = None
        async for node in watch_node(self.client, self.options.node_name):
            if node is None:
                self._node_uid = None
                continue
            labels = labels_of(node)
            if self.node.observe(labels):
                self.trigger(reload=True)
            new_state = labels.get(MIG_STATE_LABEL, "")
            if state is not None and new_state != state:
                log.info("MIG config state is now %r; relabelling", new_state)
                self.trigger(reload=False)
            state = new_state
            drifted = [
                k for k, v in self.written.items() if k != TIMESTAMP_LABEL and labels.get(k) != v
            ]
            if drifted and self.labelled.is_set():
                log.info("labels changed by someone else (%s); relabelling", ", ".join(drifted))
                self.trigger(reload=False)
