"""`kubegpu plan --from-snapshot` on a real scheduler: pods Pending for a MIG profile no
node has are captured as `plan --kubeconfig` captures them, and the plan relabels the
fewest GPUs, never on a node with a running pod (docs/planner.md, "From a snapshot").

Nodes advertise through test device plugins (tests/integration/fake_plugin.py); the labels
GPU feature discovery and the MIG manager would write are set on the nodes."""

from __future__ import annotations

import pytest

from kubegpu.catalog import nvidia
from kubegpu.plan import make_plan
from kubegpu.replan import from_snapshot as ps

from .gpu_cluster import Cluster, cluster_fixture  # noqa: F401  (the `cluster` fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

H200_MIG = {  # two H200 NVL on all-1g.18gb, as GFD and the MIG manager label them
    nvidia.GPU_PRODUCT: "NVIDIA-H200-NVL",
    nvidia.MIG_CAPABLE: "true",
    nvidia.MIG_CONFIG: "all-1g.18gb",
    nvidia.MIG_CONFIG_STATE: "success",
    nvidia.MIG_STRATEGY: "mixed",
    nvidia.CUDA_DRIVER_VERSION: "580.95.05",
    "kubegpu.io/gpu.0.isolation": "mig",
    "kubegpu.io/gpu.1.isolation": "mig",
}


async def test_pending_pods_for_a_missing_profile_get_the_fewest_gpus_relabelled(
    cluster: Cluster,
) -> None:
    await cluster.mig_layouts()
    free = await cluster.node("free", "nvidia.com/mig-1g.18gb", 14, H200_MIG)
    busy = await cluster.node("busy", "nvidia.com/mig-1g.18gb", 14, H200_MIG)
    await cluster.pod("running", {"nvidia.com/mig-1g.18gb": "1"}, node=busy)
    await cluster.running("running")
    for i in range(2):
        await cluster.pod(f"want-{i}", {"nvidia.com/mig-3g.71gb": "1"})
        await cluster.settled(f"want-{i}")

    snap = await cluster.capture(own_nodes=True)
    start = ps.start_from(snap, solver="exact")
    assert start.nodes[busy].pinned and not start.nodes[free].pinned
    assert sorted(start.pending["pending-mig-3g-71gb-x1"]) == [
        f"{cluster.namespace}/want-0",
        f"{cluster.namespace}/want-1",
    ]
    plan = make_plan(start.input)
    change = ps.change_of(start, plan)
    # two 3g.71gb share one GPU: one GPU repartitioned, on the node without running pods
    assert [c.node for c in change.nodes] == [free]
    assert change.repartitioned == 1
    assert change.nodes[0].waits_for == {"nvidia.com/mig-1g.18gb": 7, "nvidia.com/mig-3g.71gb": 2}
    book = ps.runbook(start, plan, change, namespace=cluster.namespace)
    assert f"kubectl label node {free} {nvidia.MIG_CONFIG}=" in book
    assert busy not in book
    assert "2 of 2 Pending pods placed" in book
