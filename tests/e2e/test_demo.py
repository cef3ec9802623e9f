"""`kubegpu operator demo`, on a smaller cluster: the same code the command runs, with its own
control plane (this file sorts before the ones that share the package's control plane, so a
full run still holds one at a time)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kubegpu.sim.cluster import ClusterSpec, NodeEntry
from kubegpu.sim.stack import demo, find_chart

pytestmark = [pytest.mark.cluster]

MIG_NODE = "demo-h100"
TIME_SLICED = "demo-l4"
MPS = "demo-l4-mps"
SPEC = ClusterSpec(
    name="demo-e2e",
    nodes=[
        NodeEntry(name=MIG_NODE, gpus="h100-80gb:1"),
        NodeEntry(name=TIME_SLICED, gpus="l4:1"),
        NodeEntry(name=MPS, gpus="l4:1"),
    ],
)


async def test_the_demo_slices_shares_and_schedules_a_gpu_for_every_pod() -> None:
    out = io.StringIO()
    summary = await demo(SPEC, find_chart(), Console(file=out, width=200))

    mig = summary.node(MIG_NODE)
    assert mig.layout == "MIG all-1g.10gb"
    assert mig.advertised["nvidia.com/gpu"] == "7"
    assert sorted(mig.allocations) == [f"demo-{MIG_NODE}-{i}" for i in range(3)]
    mig_devices = [d for ds in mig.allocations.values() for d in ds]
    assert len(mig_devices) == len(set(mig_devices)) == 3  # one slice each, none shared
    assert all(d.startswith("MIG-") for d in mig_devices)

    for node, how, pods in ((TIME_SLICED, "time-sliced", 3), (MPS, "mps", 2)):
        shared = summary.node(node)
        assert shared.layout == f"{how}, 4 replicas per GPU"
        assert shared.advertised["nvidia.com/gpu"] == "4"
        assert sorted(shared.allocations) == [f"demo-{node}-{i}" for i in range(pods)]
        replicas = [d for ds in shared.allocations.values() for d in ds]
        assert len(replicas) == len(set(replicas)) == pods  # one replica each
        assert all(d.startswith("GPU-") and "::" in d for d in replicas)
        assert len({d.split("::")[0] for d in replicas}) == 1  # all of the node's one GPU

    shown = out.getvalue()
    assert "kubegpu on a simulated cluster" in shown
    assert "ClusterPolicy cluster-policy is ready" in shown
    assert "stopping the simulated cluster" in shown
