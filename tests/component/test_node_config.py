"""The config a node runs: chosen by the node label when configs come from a directory,
with the flag/env overrides on top, and a short wait for the label's first value."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from kubegpu.node.config import Applied, ConfigCycle, NodeConfig, Unreadable
from kubegpu.sharing.config import PluginConfig, SharingConfigError
from kubegpu.sharing.config_source import CONFIG_LABEL, ConfigSource

TS2 = "sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"
TS4 = TS2.replace("replicas: 2", "replicas: 4")


def replicas(config: PluginConfig) -> int:
    shared = config.sharing.time_slicing
    assert shared is not None
    return shared.resources[0].replicas


def node(labels: dict[str, str]) -> Node:
    return Node(metadata=ObjectMeta(name="n1", labels=labels))


class NodeWatch:
    """The API's side of one Node watch: the Node now, then each change put on `changes`."""

    def __init__(self, first: Node) -> None:
        self.first = first
        self.changes: asyncio.Queue[Node] = asyncio.Queue()
        self.events: list[dict[str, Any]] = []

    async def get(self, kind: type[Node], name: str) -> Node:
        return self.first

    async def watch(self, kind: type[Node], fields: dict[str, str]) -> AsyncIterator[Any]:
        assert fields == {"metadata.name": "n1"}  # only its own Node
        while True:
            yield "MODIFIED", await self.changes.get()

    async def create(self, obj: Any) -> Any:
        self.events.append(obj.to_dict())
        return obj


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    d = tmp_path / "configs"
    d.mkdir()
    (d / "ts2").write_text(TS2)
    (d / "ts4").write_text(TS4)
    return d


def watched(source: ConfigSource, api: NodeWatch | None, **kw: Any) -> NodeConfig:
    return NodeConfig(source, node_name="n1", client=cast(AsyncClient, api), **kw)


async def test_the_label_picks_the_named_config_and_overrides_apply(configs: Path) -> None:
    cfg = NodeConfig(
        ConfigSource(config_dir=configs, default_config="ts2"), {"MIG_STRATEGY": "single"}
    )
    assert replicas(cfg.load(cfg.choose())) == 2
    cfg.observe({CONFIG_LABEL: "ts4"})
    choice = cfg.choose()
    assert choice.source == f"config 'ts4' in {configs}"
    config = cfg.load(choice)
    assert replicas(config) == 4
    assert config.flags.mig_strategy == "single"


async def test_a_label_naming_no_config_is_refused_on_load(configs: Path) -> None:
    cfg = NodeConfig(ConfigSource(config_dir=configs))
    cfg.observe({CONFIG_LABEL: "ts8"})
    with pytest.raises(SharingConfigError, match="specified config 'ts8' does not exist"):
        cfg.load(cfg.choose())


@pytest.mark.parametrize(
    ("make", "what"), [(None, "does not exist"), ("file", "is not a directory")]
)
async def test_a_config_dir_that_is_not_a_directory_is_refused_not_read_as_empty(
    tmp_path: Path, make: str | None, what: str
) -> None:
    # was "built-in defaults (no default config in ...)": a typo'd path advertised defaults
    where = tmp_path / "configs"
    if make == "file":
        where.write_text(TS2)
    cfg = NodeConfig(ConfigSource(config_dir=where))
    with pytest.raises(SharingConfigError, match=f"config directory {where} {what}"):
        cfg.load(cfg.choose())
    where.unlink(missing_ok=True)
    where.mkdir()  # an empty ConfigMap mount: the built-in defaults, as before
    assert cfg.choose().source == f"built-in defaults (no default config in {where})"


async def test_only_a_change_after_the_first_look_counts(configs: Path) -> None:
    cfg = watched(ConfigSource(config_dir=configs), NodeWatch(node({})))
    assert cfg.observe({CONFIG_LABEL: "ts2"}) is False  # the first look
    assert cfg.label == "ts2"
    assert cfg.observe({CONFIG_LABEL: "ts2", "other": "x"}) is False
    assert cfg.observe({CONFIG_LABEL: "ts4"}) is True
    assert cfg.observe({}) is True and cfg.label is None


async def test_the_first_config_waits_for_the_label_when_it_picks_the_config(
    configs: Path,
) -> None:
    api = NodeWatch(node({CONFIG_LABEL: "ts4"}))
    cfg = watched(ConfigSource(config_dir=configs), api)
    wake = asyncio.Event()
    await asyncio.wait_for(cfg.start(wake), 5)
    try:
        assert cfg.label == "ts4" and wake.is_set()
        assert replicas(cfg.load(cfg.choose())) == 4
        wake.clear()
        await api.changes.put(node({CONFIG_LABEL: "ts2"}))
        await asyncio.wait_for(wake.wait(), 5)
        assert cfg.label == "ts2"
    finally:
        await cfg.stop()


async def test_without_the_label_in_time_the_default_is_used_and_said(
    configs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = watched(ConfigSource(config_dir=configs, default_config="ts2"), NodeWatch(node({})))
    caplog.set_level(logging.WARNING)
    cfg.first_label_timeout_s = 0.05
    await cfg.wait_for_label()  # no watch is running: the label never comes
    assert "label nvidia.com/device-plugin.config unknown after" in caplog.text
    assert cfg.choose().source == f"default config 'ts2' in {configs}"


async def test_a_single_config_file_does_not_wait_for_the_label(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(TS2)
    cfg = watched(ConfigSource(config_file=tmp_path / "c.yaml"), NodeWatch(node({})))
    cfg.first_label_timeout_s = 30
    await asyncio.wait_for(cfg.wait_for_label(), 1)  # returns at once
    assert replicas(cfg.load(cfg.choose())) == 2


async def test_reports_are_kept_and_recorded_as_node_events(configs: Path) -> None:
    api = NodeWatch(node({}))
    cfg = watched(ConfigSource(config_dir=configs), api, component="kubegpu-test")
    cfg.report("Warning", "ConfigRejected", "ts8 does not exist")
    await asyncio.sleep(0.05)
    await cfg.stop()
    assert cfg.events == [("Warning", "ConfigRejected", "ts8 does not exist")]
    assert api.events and api.events[0]["reason"] == "ConfigRejected"
    assert api.events[0]["involvedObject"]["name"] == "n1"


async def test_a_value_kubegpu_ignores_is_warned_about_once_per_source(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "c.yaml").write_text(TS2 + "flags: {deviceDiscoveryStrategy: tegra}\n")
    cfg = NodeConfig(ConfigSource(config_file=tmp_path / "c.yaml"))
    caplog.set_level(logging.WARNING)
    cfg.load(cfg.choose())
    cfg.load(cfg.choose())  # read again on every change or poll: said once
    said = [r.getMessage() for r in caplog.records if "accepted and ignored" in r.getMessage()]
    assert said == [
        f"{tmp_path / 'c.yaml'}: field flags.deviceDiscoveryStrategy, value 'tegra' is "
        "accepted and ignored: kubegpu discovers devices through NVML only"
    ]


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        (
            {"config_file": Path("c.yaml"), "config_dir": Path("d")},
            "--config-file c.yaml is ignored",
        ),
        (
            {"config_file": Path("c.yaml"), "default_config": "ts2"},
            "--default-config 'ts2' is ignored",
        ),
    ],
)
def test_a_config_option_the_other_options_make_moot_is_warned_about(
    kw: dict[str, Any], said: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    NodeConfig(ConfigSource(**kw))
    assert said in caplog.text
    caplog.clear()
    NodeConfig(ConfigSource(config_dir=Path("d"), default_config="ts2"))
    assert caplog.text == ""


# -- the config cycle the device plugin and the MPS daemon share ----------------------------


class Reads:
    """What `ConfigCycle` calls to read the GPUs: counts its calls, fails while told to."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail: Exception | None = None

    def __call__(self, config: PluginConfig) -> int:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return replicas(config)


def test_the_cycle_applies_a_choice_once_and_again_when_forced(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(TS2)
    reads = Reads()
    cycle = ConfigCycle(NodeConfig(ConfigSource(config_file=path)), reads, "Rejected")
    first = cycle.step(keeping="keeping nothing")
    assert isinstance(first, Applied) and first.read == 2 and first.choice.source == str(path)
    assert cycle.step(keeping="-") is None and reads.calls == 1
    assert isinstance(cycle.step(keeping="-", force=True), Applied) and reads.calls == 2
    path.write_text(TS4)
    changed = cycle.step(keeping="-")
    assert isinstance(changed, Applied) and changed.read == 4


def test_the_cycle_refuses_a_config_the_node_cannot_run_and_says_what_is_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(TS2)
    node_config = NodeConfig(ConfigSource(config_file=path))
    reads = Reads()
    cycle = ConfigCycle(node_config, reads, "SomethingRejected")
    assert isinstance(cycle.step(keeping="-"), Applied)
    path.write_text("version: v1\nflags: {migStrategy: sometimes}\n")
    assert cycle.step(keeping="keeping the old one") is None
    assert cycle.rejection is not None and "sometimes" in cycle.rejection
    kind, reason, message = node_config.events[-1]
    assert (kind, reason) == ("Warning", "SomethingRejected")
    assert message.endswith("; keeping the old one")
    assert cycle.step(keeping="-") is None and reads.calls == 1  # refused once, not each round
    path.write_text(TS4)
    assert isinstance(cycle.step(keeping="-"), Applied) and cycle.rejection is None


def test_a_gpu_read_failure_is_retried_next_round_and_said_once(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(TS2)
    reads = Reads()
    reads.fail = RuntimeError("GPU fell off the bus")
    cycle = ConfigCycle(NodeConfig(ConfigSource(config_file=path)), reads, "Rejected")
    first, second = cycle.step(keeping="-"), cycle.step(keeping="-")
    assert isinstance(first, Unreadable) and first.first
    assert first.message == "RuntimeError: GPU fell off the bus"
    assert isinstance(second, Unreadable) and not second.first  # the same fault: not new
    reads.fail = None
    assert isinstance(cycle.step(keeping="-"), Applied) and cycle.read_fault is None
