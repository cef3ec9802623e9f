"""GPU feature discovery in-process, labelling a simulated node on the real control plane.

The sleep interval is an hour in these tests, so every relabel seen here comes from a
trigger: a config change, the MIG manager's state label, or labels changed by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Node

from kubegpu.feature_discovery import FeatureDiscovery, GfdOptions
from kubegpu.kube.labels import labels_of
from kubegpu.mig.config import parse_config
from kubegpu.mig.parted import apply_config
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.kubelet.node import SimNode

from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

MIG_1G = parse_config(
    """
version: v1
mig-configs:
  all-1g.18gb: [{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 7}}]
  all-disabled: [{devices: all, mig-enabled: false}]
"""
)


def strategy(name: str) -> str:
    return f"version: v1\nflags: {{migStrategy: {name}}}\n"


Run = Callable[..., Awaitable[tuple[SimNode, FeatureDiscovery]]]


@pytest.fixture
async def gfd(sim_nodes: SimNodes, akube: AsyncClient) -> AsyncIterator[Run]:
    """Start a simulated node and feature discovery for it; both are stopped afterwards."""
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def start(
        name: str, config: str | None = None, **options: Any
    ) -> tuple[SimNode, FeatureDiscovery]:
        node = await sim_nodes.start(
            name,
            gpus="h200-nvl:8",
            labels={"team": "ml", "nvidia.com/gpu.deploy.device-plugin": "true"},
        )
        root = node.root
        config_file = config_dir = None
        if isinstance(config, str):
            config_file = root / "etc/kubegpu/config.yaml"
            config_file.parent.mkdir(parents=True)
            config_file.write_text(config)
        elif config is not None:  # named configs, as a mounted ConfigMap
            config_dir = root / "available-configs"
            config_dir.mkdir()
            for key, text in config.items():
                (config_dir / key).write_text(text)
        discovery = FeatureDiscovery(
            GfdOptions(
                node_name=name,
                config_file=config_file,
                config_dir=config_dir,
                sleep_interval="1h",
                machine_type_file=str(root / "product_name"),
                config_poll_s=0.1,
                **options,
            ),
            lambda: SimNvml(node.gpu_state),
            akube,
        )
        task = asyncio.create_task(discovery.run())

        async def stop() -> None:
            discovery.stop()
            await asyncio.wait_for(task, 10)

        cleanups.append(stop)
        await asyncio.wait_for(discovery.labelled.wait(), 15)
        return node, discovery

    yield start
    for cleanup in reversed(cleanups):
        await cleanup()


async def node_labels(akube: AsyncClient, name: str) -> dict[str, str]:
    return labels_of(await akube.get(Node, name))


def has(expected: dict[str, str | None]) -> Callable[[dict[str, str]], bool]:
    """A check that each label has its value (None: the label is absent)."""
    return lambda labels: all(labels.get(k) == v for k, v in expected.items())


async def until(akube: AsyncClient, name: str, expected: dict[str, str | None]) -> dict[str, str]:
    async def check() -> dict[str, str] | None:
        labels = await node_labels(akube, name)
        return labels if has(expected)(labels) else None

    return cast(dict[str, str], await eventually(check, timeout=15, interval=0.1))


async def test_the_gfd_labels_appear_and_other_labels_are_left_alone(
    gfd: Run, akube: AsyncClient
) -> None:
    node, discovery = await gfd("gfd-basic")
    labels = await node_labels(akube, node.name)
    assert {
        "nvidia.com/gpu.product": "NVIDIA-H200-NVL",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "143771",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/cuda.driver-version.full": "580.95.05",
        "nvidia.com/gpu.machine": "unknown",
        # what others put there stays
        "team": "ml",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }.items() <= labels.items()
    assert "nvidia.com/gfd.timestamp" in labels
    assert "nvidia.com/mig.strategy" not in labels
    assert discovery.written.items() <= labels.items()


async def test_mig_and_config_changes_relabel_at_once_and_stale_labels_go(
    gfd: Run, akube: AsyncClient
) -> None:
    node, discovery = await gfd("gfd-changes", config=strategy("mixed"), no_timestamp=True)
    await until(akube, node.name, {"nvidia.com/mig.strategy": "mixed"})

    # the MIG manager repartitions, then reports success: GFD relabels at once
    apply_config(SimNvml(node.gpu_state), "all-1g.18gb", MIG_1G.mig_configs["all-1g.18gb"])
    await akube.patch(
        Node, node.name, {"metadata": {"labels": {"nvidia.com/mig.config.state": "success"}}}
    )
    await until(
        akube,
        node.name,
        {
            "nvidia.com/mig-1g.18gb.count": "56",
            "nvidia.com/mig-1g.18gb.product": "NVIDIA-H200-NVL-MIG-1g.18gb",
            "nvidia.com/mig-1g.18gb.memory": "16384",
            "nvidia.com/gpu.replicas": "0",
        },
    )

    # the config file switches to the single strategy: the gpu.* keys describe the slices,
    # and every mig-1g.18gb.* label is removed
    config = discovery.options.config_file
    assert config is not None
    config.write_text(strategy("single"))
    labels = await until(
        akube,
        node.name,
        {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.product": "NVIDIA-H200-NVL-MIG-1g.18gb",
            "nvidia.com/gpu.count": "56",
            "nvidia.com/gpu.multiprocessors": "16",
        },
    )
    assert not [k for k in labels if k.startswith("nvidia.com/mig-1g")]

    # MIG off again, under none: back to whole GPUs, with no MIG keys left behind
    config.write_text(strategy("none"))
    apply_config(SimNvml(node.gpu_state), "all-disabled", MIG_1G.mig_configs["all-disabled"])
    await akube.patch(
        Node, node.name, {"metadata": {"labels": {"nvidia.com/mig.config.state": "pending"}}}
    )
    labels = await until(
        akube,
        node.name,
        {
            "nvidia.com/gpu.product": "NVIDIA-H200-NVL",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/mig.strategy": None,
            "nvidia.com/gpu.multiprocessors": None,
            "nvidia.com/gpu.slices.gi": None,
        },
    )
    assert labels["team"] == "ml"
    assert labels["nvidia.com/mig.config.state"] == "pending"  # not GFD's label: untouched


async def test_time_slicing_marks_the_product_shared(gfd: Run, akube: AsyncClient) -> None:
    shared = """
version: v1
sharing:
  timeSlicing:
    resources: [{name: nvidia.com/gpu, replicas: 4}]
"""
    node, _ = await gfd("gfd-shared", config=shared)
    await until(
        akube,
        node.name,
        {
            "nvidia.com/gpu.product": "NVIDIA-H200-NVL-SHARED",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
        },
    )


async def test_labels_removed_by_hand_are_put_back(gfd: Run, akube: AsyncClient) -> None:
    node, _ = await gfd("gfd-drift")
    await akube.patch(
        Node,
        node.name,
        {"metadata": {"labels": {"nvidia.com/gpu.product": None, "nvidia.com/gpu.count": "99"}}},
    )
    await until(
        akube, node.name, {"nvidia.com/gpu.product": "NVIDIA-H200-NVL", "nvidia.com/gpu.count": "8"}
    )


async def test_a_bad_config_keeps_the_labels_and_says_why(gfd: Run, akube: AsyncClient) -> None:
    node, discovery = await gfd("gfd-badcfg", config=strategy("none"))
    config = discovery.options.config_file
    assert config is not None
    config.write_text("version: v1\nflags: {migStrategy: sideways}\n")

    async def reported() -> list[str]:
        return [
            e.message or ""
            async for e in akube.list(
                Event, namespace="default", fields={"involvedObject.name": node.name}
            )
            if e.reason == "GpuFeatureDiscoveryFailed"
        ]

    (message,) = await eventually(reported, timeout=15)
    assert "the new config is not used" in message
    assert "migStrategy" in message
    assert (await node_labels(akube, node.name))["nvidia.com/gpu.product"] == "NVIDIA-H200-NVL"


async def test_a_deleted_node_is_never_recreated(gfd: Run, akube: AsyncClient) -> None:
    node, discovery = await gfd("gfd-gone")
    passes = discovery.passes
    await akube.delete(Node, node.name)
    discovery.trigger()
    await asyncio.sleep(1.0)
    assert discovery.passes == passes  # the write was refused...
    with pytest.raises(ApiError) as gone:
        await akube.get(Node, node.name)
    assert gone.value.status.code == 404  # ...and no Node was created


async def test_the_node_label_picks_one_of_the_named_configs(gfd: Run, akube: AsyncClient) -> None:
    shared = (
        "version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n"
    )
    node, _ = await gfd("gfd-named", config={"default": strategy("none"), "shared": shared})
    await until(akube, node.name, {"nvidia.com/gpu.product": "NVIDIA-H200-NVL"})
    config_label = "nvidia.com/device-plugin.config"
    await akube.patch(Node, node.name, {"metadata": {"labels": {config_label: "shared"}}})
    await until(
        akube,
        node.name,
        {"nvidia.com/gpu.product": "NVIDIA-H200-NVL-SHARED", "nvidia.com/gpu.replicas": "2"},
    )
    # a name that is not a config keeps the last good labels
    await akube.patch(Node, node.name, {"metadata": {"labels": {config_label: "nope"}}})
    await asyncio.sleep(0.5)
    assert (await node_labels(akube, node.name))["nvidia.com/gpu.replicas"] == "2"
    await akube.patch(Node, node.name, {"metadata": {"labels": {config_label: None}}})
    await until(
        akube,
        node.name,
        {"nvidia.com/gpu.product": "NVIDIA-H200-NVL", "nvidia.com/gpu.replicas": "1"},
    )
