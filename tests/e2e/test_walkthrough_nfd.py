"""A cluster without Node Feature Discovery (issue 17, item 5): the nodes carry no NFD
labels, the chart is installed with `nfd.enabled=false`, and kubegpu's node labeller finds
the GPU nodes from their PCI bus; the operator then deploys the stack on them only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from kube_objects import meta
from kubegpu.sim.cluster import NodeEntry
from kubegpu.sim.controlplane.plane import ControlPlane

from . import conftest
from .stack import E2EStack, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="package")]

GPU_NODE = "nonfd-l4"
CPU_NODE = "nonfd-cpu"
NODES = [
    NodeEntry(name=GPU_NODE, gpus="l4:2", nfd=False),
    NodeEntry(name=CPU_NODE, nfd=False, labels={"node-role.kubernetes.io/control-plane": ""}),
]


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def no_nfd(control_plane: ControlPlane) -> AsyncIterator[E2EStack]:
    async with conftest.own_stack(
        control_plane, NODES, "no-nfd", {"nfd": {"enabled": False}}
    ) as stack:
        yield stack


async def test_without_nfd_the_node_labeller_finds_the_gpu_nodes(no_nfd: E2EStack) -> None:
    labels = meta(await no_nfd.node(GPU_NODE)).labels or {}
    assert not [k for k in labels if k.startswith("feature.node.kubernetes.io/")]  # as started

    await wait_for(no_nfd.ready, timeout=300, what="ClusterPolicy ready without NFD")
    labels = meta(await no_nfd.node(GPU_NODE)).labels or {}
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert labels["feature.node.kubernetes.io/pci-0302_10de.present"] == "true"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert (await no_nfd.allocatable(GPU_NODE))["nvidia.com/gpu"] == "2"
    cpu = meta(await no_nfd.node(CPU_NODE)).labels or {}
    assert not [k for k in cpu if k.startswith(("nvidia.com/", "feature.node.kubernetes.io/"))]
    labellers = await no_nfd.pods(**{"app.kubernetes.io/name": "kubegpu-node-labeller"})
    assert {p.spec.nodeName for p in labellers if p.spec} == {GPU_NODE, CPU_NODE}
