"""`kubegpu plan --from-snapshot` on a real scheduler: pods Pending for a MIG profile no
node has are captured as `plan --kubeconfig` captures them, and the plan relabels the
fewest GPUs, never on a node with a running pod (docs/planner.md, "From a snapshot").

Nodes advertise through test device plugins (tests/integration/fake_plugin.py); the labels
GPU feature discovery and the MIG manager would write are set on the nodes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap, Pod

from kube_objects import meta
from kubegpu.catalog import nvidia
from kubegpu.doctor.capture import capture
from kubegpu.plan import make_plan
from kubegpu.replan import from_snapshot as ps
from kubegpu.sim.controlplane.plane import ControlPlane

from .helpers import eventually
from .test_why import MIG_LAYOUTS, Cluster

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


@pytest.fixture
async def cluster(
    control_plane: ControlPlane, akube: AsyncClient, namespace: str
) -> AsyncIterator[Cluster]:
    c = Cluster(control_plane, akube, namespace)
    try:
        yield c
    finally:
        with contextlib.suppress(ApiError):
            for p in [p async for p in akube.list(Pod, namespace=namespace)]:
                await akube.delete(
                    Pod, cast(str, meta(p).name), namespace=namespace, grace_period=0
                )
        await c.close()


async def _pending(cluster: Cluster, name: str) -> None:
    async def unschedulable() -> bool:
        p = await cluster.akube.get(Pod, name, namespace=cluster.namespace)
        conds = (p.status.conditions or []) if p.status else []
        return any(c.type == "PodScheduled" and c.status == "False" for c in conds)

    await eventually(unschedulable, timeout=60)


async def test_pending_pods_for_a_missing_profile_get_the_fewest_gpus_relabelled(
    cluster: Cluster,
) -> None:
    await cluster.akube.create(  # type: ignore[call-overload]
        ConfigMap.from_dict(
            {
                "metadata": {"name": nvidia.MIG_PARTED_DEFAULT_CONFIGMAP},
                "data": {"config.yaml": MIG_LAYOUTS},
            }
        ),
        namespace=cluster.namespace,
    )
    free = await cluster.node("free", "nvidia.com/mig-1g.18gb", 14, H200_MIG)
    busy = await cluster.node("busy", "nvidia.com/mig-1g.18gb", 14, H200_MIG)
    await cluster.pod("running", {"nvidia.com/mig-1g.18gb": "1"}, node=busy)
    await cluster.running("running")
    for i in range(2):
        await cluster.pod(f"want-{i}", {"nvidia.com/mig-3g.71gb": "1"})
        await _pending(cluster, f"want-{i}")

    snap = await capture(cluster.akube, namespace=cluster.namespace, source="sim")
    snap = snap.model_copy(
        update={"nodes": tuple(n for n in snap.nodes if n.name.startswith(cluster.prefix))}
    )
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
