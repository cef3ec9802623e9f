"""Dynamic MIG with the real control plane (written by the dra-plugin helper, D1): the
plugin publishes a MIG-enabled GPU as partitionable devices with a counter set, the real
scheduler allocates a MIG device that does not exist yet, prepare creates it at the
allocated placement, the pod sees its UUID, and deleting the pod destroys it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from kube_objects import status_of
from kubegpu.catalog import nvidia
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode

from .dra_stack import device_classes_applied, environ, published_slices, sim_gpu_node
from .dra_stack import dra_plugin as start_plugin
from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "dra-dynamic-mig"


@pytest.fixture
async def mig_node(control_plane: ControlPlane, akube: AsyncClient) -> AsyncIterator[SimNode]:
    async with sim_gpu_node(control_plane, akube, NODE, "h100-80gb:1", mig={0: ()}) as node:
        yield node


@pytest.fixture
async def classes(akube: AsyncClient) -> AsyncIterator[None]:
    async with device_classes_applied(akube):
        yield


@pytest.fixture
def dra_plugin(mig_node: SimNode, control_plane: ControlPlane, tmp_path: Path) -> Iterator[Any]:
    with start_plugin(mig_node, control_plane, tmp_path, "DynamicMIG=true") as plugin:
        yield plugin


async def test_the_scheduler_allocates_a_mig_device_that_prepare_creates(
    mig_node: SimNode, dra_plugin: Any, classes: None, akube: AsyncClient, namespace: str
) -> None:
    async def slices() -> list[Any]:
        return await published_slices(akube, NODE)

    published = await eventually(slices, timeout=60)
    counters = [c for s in published for c in s["spec"].get("sharedCounters") or []]
    assert [c["name"] for c in counters] == ["gpu-0-counter-set"]
    names = {d["name"] for s in published for d in s["spec"].get("devices") or []}
    assert "gpu-0-mig-3g40gb-9-4" in names

    await akube.create(  # type: ignore[call-overload]
        ResourceClaimTemplate.from_dict(
            {
                "metadata": {"name": "half-gpu"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "mig",
                                    "exactly": {
                                        "deviceClassName": nvidia.DRA_MIG_CLASS,
                                        "selectors": [
                                            {
                                                "cel": {
                                                    "expression": "device.attributes["
                                                    "'gpu.nvidia.com'].profile == '3g.40gb'"
                                                }
                                            }
                                        ],
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        ),
        namespace=namespace,
    )
    pods = ("first", "second")
    for name in pods:
        await akube.create(  # type: ignore[call-overload]
            Pod.from_dict(
                {
                    "metadata": {"name": name},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "resourceClaims": [
                            {"name": "mig", "resourceClaimTemplateName": "half-gpu"}
                        ],
                        "containers": [
                            {
                                "name": "main",
                                "image": "ghcr.io/kubegpu/kubegpu:test",
                                "command": [sys.executable, "-c", "import time; time.sleep(3600)"],
                                "resources": {"claims": [{"name": "mig"}]},
                            }
                        ],
                    },
                }
            ),
            namespace=namespace,
        )

    async def all_running() -> bool:
        for name in pods:
            pod = await akube.get(Pod, name, namespace=namespace)
            if status_of(pod).phase != "Running":
                return False
        return True

    await eventually(all_running, timeout=90)
    # the two 3g.40gb placements, created at prepare; the counters kept them apart
    with SimNvml(mig_node.gpu_state) as nvml:
        made = {m.uuid: m.placement.start for m in nvml.mig_devices(0)}
    assert sorted(made.values()) == [0, 4]
    seen = {environ(pid)[nvidia.NVIDIA_VISIBLE_DEVICES] for pid in mig_node.pids()}
    assert seen == set(made)

    for name in pods:
        await akube.delete(Pod, name, namespace=namespace)

    async def destroyed() -> bool:
        with SimNvml(mig_node.gpu_state) as nvml:
            return nvml.gpu_instances(0) == []

    await eventually(destroyed, timeout=60)
