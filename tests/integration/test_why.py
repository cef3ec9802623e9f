"""`kubegpu why` on the real scheduler: simulated nodes advertise GPU resources through a
test device plugin, pods are made Pending (or refused) one cause at a time, the cluster is
captured as `kubegpu why` captures it, and the verdict must name that cause.

Every test has nodes of its own and a fresh namespace (tests/integration/gpu_cluster.py),
and waits for the scheduler's own `PodScheduled=False` (or the kubelet's `Failed`) before
judging."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from pathlib import Path

import grpc
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from typer.testing import CliRunner

from kubegpu.catalog import nvidia
from kubegpu.cli.app import app
from kubegpu.doctor import why as w
from kubegpu.doctor.replay import RESHAPE
from kubegpu.doctor.snapshot import CustomObject, Snapshot
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.whatif.pod_replay import explain

from .fake_plugin import FakePlugin
from .gpu_cluster import Cluster, cluster_fixture  # noqa: F401  (the `cluster` fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]


class RefusingPlugin(FakePlugin):
    """A plugin that refuses more than one device per container, as NVIDIA's does for
    shared replicas with failRequestsGreaterThanOne."""

    async def Allocate(self, request, context):
        for req in request.container_requests:
            if len(req.devices_ids) > 1:
                await context.abort(
                    grpc.StatusCode.UNKNOWN,
                    "request for 'nvidia.com/gpu: 2': more than one shared replica "
                    "(failRequestsGreaterThanOne)",
                )
        return await super().Allocate(request, context)


async def verdict(cluster: Cluster, name: str, phase: str = "Pending") -> w.Verdict:
    """Once the scheduler (or kubelet) has said its word, the verdict on a fresh capture."""
    await cluster.settled(name, phase)
    return w.why(await cluster.capture(), f"{cluster.namespace}/{name}")


async def test_a_profile_nobody_advertises_names_the_nearest(cluster: Cluster) -> None:
    await cluster.node("h200", "nvidia.com/mig-1g.18gb", 7)
    await cluster.pod("p", {"nvidia.com/mig-1g.10gb": "1"})
    v = await verdict(cluster, "p")
    assert v.kind == w.UNKNOWN_RESOURCE
    assert "nearest resource that exists is nvidia.com/mig-1g.18gb" in v.reason


async def test_a_mig_profile_under_the_single_strategy(cluster: Cluster) -> None:
    single = {nvidia.MIG_STRATEGY: "single", nvidia.GPU_PRODUCT: "NVIDIA-H200-NVL-MIG-1g.18gb"}
    await cluster.node("h200", nvidia.GPU_RESOURCE, 7, single)
    await cluster.pod("p", {"nvidia.com/mig-1g.18gb": "1"})
    v = await verdict(cluster, "p")
    assert v.kind == w.STRATEGY_NAMING and "advertised as nvidia.com/gpu" in v.reason


async def test_free_gpus_on_two_nodes_are_fragmented(cluster: Cluster) -> None:
    a = await cluster.node("a", count=2)
    b = await cluster.node("b", count=2)
    for name, node in (("busy-a", a), ("busy-b", b)):
        await cluster.pod(name, {nvidia.GPU_RESOURCE: "1"}, node=node)
        await cluster.running(name)
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "2"})
    v = await verdict(cluster, "p")
    assert v.kind == w.FRAGMENTED, v
    assert any(f"{a}: 1 free of 2" in e and f"{b}: 1 free of 2" in e for e in v.evidence)


async def test_every_gpu_in_use(cluster: Cluster) -> None:
    a = await cluster.node("a", count=1)
    await cluster.pod("busy", {nvidia.GPU_RESOURCE: "1"}, node=a)
    await cluster.running("busy")
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "1"})
    v = await verdict(cluster, "p")
    assert v.kind == w.INSUFFICIENT and any("/busy" in e for e in v.evidence)


async def test_a_node_selector_that_matches_no_gpu_node(cluster: Cluster) -> None:
    await cluster.node("a", labels={"pool": "infer"})
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "1"}, selector={"pool": "train"})
    v = await verdict(cluster, "p")
    assert v.kind == w.NODE_SELECTOR and any("pool=train (node: infer)" in e for e in v.evidence)


async def test_a_taint_the_pod_does_not_tolerate(cluster: Cluster) -> None:
    a = await cluster.node("a")
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    await cluster.patch_node(a, {"spec": {"taints": [taint]}})
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "1"})
    v = await verdict(cluster, "p")
    assert v.kind == w.TAINT and any("nvidia.com/gpu=present:NoSchedule" in e for e in v.evidence)


async def test_a_cordoned_gpu_node(cluster: Cluster) -> None:
    a = await cluster.node("a")
    await cluster.patch_node(a, {"spec": {"unschedulable": True}})
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "1"})
    assert (await verdict(cluster, "p")).kind == w.CORDONED


async def test_a_pod_the_kubelet_refused(cluster: Cluster) -> None:
    a = await cluster.node("a", count=4, plugin=RefusingPlugin)
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "2"}, node=a)
    v = await verdict(cluster, "p", phase="Failed")
    assert v.kind == w.ADMISSION_FAILED
    assert any("UnexpectedAdmissionError" in e and "more than one shared" in e for e in v.evidence)


async def test_a_mig_reconfiguration_pending_on_the_only_node_that_fits(
    cluster: Cluster, akube: AsyncClient
) -> None:
    await cluster.mig_layouts()
    labels = {nvidia.MIG_CONFIG: "all-1g.18gb", nvidia.MIG_CONFIG_STATE: "pending"}
    await cluster.node("h200", count=0, labels=labels)
    await cluster.pod("p", {"nvidia.com/mig-1g.18gb": "1"})
    v = await verdict(cluster, "p")
    assert v.kind == w.MIG_PENDING and f"{cluster.prefix}-h200" in v.reason


async def test_a_dra_selector_no_published_device_satisfies(
    cluster: Cluster, akube: AsyncClient
) -> None:
    driver = f"{cluster.prefix}.example.com"
    a = await cluster.node("a", count=0)
    devices = [
        {"name": f"gpu-{i}", "attributes": {"productName": {"string": "NVIDIA H100"}}}
        for i in range(2)
    ]
    await akube.create(  # type: ignore[call-overload]
        ResourceSlice.from_dict(
            {
                "metadata": {"name": f"{driver}-{a}"},
                "spec": {
                    "driver": driver,
                    "nodeName": a,
                    "pool": {"name": a, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    )
    await akube.create(  # type: ignore[call-overload]
        DeviceClass.from_dict(
            {
                "metadata": {"name": driver},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
            }
        )
    )
    try:
        want = f"device.attributes['{driver}'].productName == 'NVIDIA H200'"
        await akube.create(  # type: ignore[call-overload]
            ResourceClaim.from_dict(
                {
                    "metadata": {"name": "h200"},
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "gpu",
                                    "exactly": {
                                        "deviceClassName": driver,
                                        "selectors": [{"cel": {"expression": want}}],
                                    },
                                }
                            ]
                        }
                    },
                }
            ),
            namespace=cluster.namespace,
        )
        await cluster.pod("p", claim="h200")
        v = await verdict(cluster, "p")
        assert v.kind == w.DRA_NO_DEVICE, v
        assert any("the values published are NVIDIA H100" in e for e in v.evidence), v
    finally:
        with contextlib.suppress(ApiError):
            await akube.delete(ResourceSlice, f"{driver}-{a}")
        with contextlib.suppress(ApiError):
            await akube.delete(DeviceClass, driver)


async def test_the_cli_prints_the_verdict_as_json(
    cluster: Cluster, control_plane: ControlPlane
) -> None:
    await cluster.node("h200", "nvidia.com/mig-1g.18gb", 7)
    await cluster.pod("p", {"nvidia.com/mig-1g.10gb": "1"})
    await verdict(cluster, "p")
    result = await asyncio.to_thread(  # the CLI runs its own event loop
        CliRunner().invoke,
        app,
        [
            "why",
            f"{cluster.namespace}/p",
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
            "-n",
            cluster.namespace,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert '"kind": "resource-not-advertised"' in result.output


# --- replayed on the what-if twin: causes only an attempt shows (docs/doctor.md) -----------

REPLAY_TIMEOUT_S = 900  # a twin is a cluster of its own: control plane, nodes, helm install
MIG_1G, MIG_3G = "nvidia.com/mig-1g.18gb", "nvidia.com/mig-3g.71gb"
REPLAY_LAYOUTS = """version: v1
mig-configs:
  all-1g.18gb:
  - devices: all
    mig-enabled: true
    mig-devices:
      1g.18gb: 7
  all-3g.71gb:
  - devices: all
    mig-enabled: true
    mig-devices:
      3g.71gb: 2
"""
LAYOUTS_CM = "why-layouts"
DEMO = Path(__file__).parents[1] / "data" / "doctor" / "demo.json"


def h200_on(config: str, profile: str, count: int) -> dict[str, str]:
    """One H200 NVL with `config` applied, as GFD and the MIG manager label it (mixed)."""
    return {
        nvidia.GPU_PRODUCT: "NVIDIA-H200-NVL",
        nvidia.GPU_COUNT: "1",
        nvidia.MIG_CAPABLE: "true",
        nvidia.MIG_STRATEGY: "mixed",
        nvidia.CUDA_DRIVER_VERSION: "580.95.05",
        nvidia.MIG_CONFIG: config,
        nvidia.MIG_CONFIG_STATE: "success",
        f"nvidia.com/mig-{profile}.count": str(count),
    }


def with_policy(snap: Snapshot) -> Snapshot:
    """The captured cluster with the ClusterPolicy the chart installs (the demo cluster's,
    as captured in tests/data), mixed strategy, its MIG layouts from LAYOUTS_CM. The shared
    control plane runs no operator and has no ClusterPolicy of its own: one created there
    would be in every other test's capture."""
    demo = Snapshot.from_json(DEMO.read_text(), str(DEMO))
    spec = copy.deepcopy(demo.cluster_policies[0].spec)
    spec["mig"] = {"strategy": "mixed"}
    spec["migManager"]["config"] = {"name": LAYOUTS_CM, "default": "all-disabled"}
    spec["devicePlugin"].pop("config", None)  # the built-in defaults
    policy = CustomObject(kind="ClusterPolicy", name="cluster-policy", spec=spec)
    return snap.model_copy(update={"cluster_policies": (policy,)})


async def replayed(cluster: Cluster, name: str) -> tuple[w.Verdict, w.Verdict]:
    """The snapshot's verdict alone, and `kubegpu why`'s with the replay on the twin."""
    await cluster.settled(name)
    snap = with_policy(await cluster.capture(own_nodes=True))
    ref = f"{cluster.namespace}/{name}"
    return w.why(snap, ref), await explain(snap, ref, settle_timeout=300)


@pytest.mark.timeout(REPLAY_TIMEOUT_S)
async def test_replayed_a_profile_nobody_advertises_is_an_idle_gpus_relabel(
    cluster: Cluster,
) -> None:
    await cluster.mig_layouts(REPLAY_LAYOUTS, LAYOUTS_CM)
    busy = await cluster.node("busy", MIG_1G, 7, h200_on("all-1g.18gb", "1g.18gb", 7))
    idle = await cluster.node("idle", MIG_1G, 7, h200_on("all-1g.18gb", "1g.18gb", 7))
    await cluster.pod("running", {MIG_1G: "1"}, node=busy)
    await cluster.running("running")
    await cluster.pod("p", {MIG_3G: "1"})
    alone, v = await replayed(cluster, "p")
    # the snapshot alone: nobody advertises it, "ask for the nearest name" (the wrong fix)
    assert alone.kind == w.UNKNOWN_RESOURCE, alone
    assert v.kind == RESHAPE, v
    assert f"node {idle} took the pod once labelled {nvidia.MIG_CONFIG}=all-3g.71gb" in v.reason
    assert v.fix.startswith(f"kubectl label node {idle} {nvidia.MIG_CONFIG}=all-3g.71gb")
    assert v.replay is not None and v.replay["after"]["node"] == idle
    assert any(f"not tried: node {busy}: running GPU pods" in e for e in v.evidence), v


@pytest.mark.timeout(REPLAY_TIMEOUT_S)
async def test_replayed_an_insufficient_profile_is_idle_gpus_in_another_layout(
    cluster: Cluster,
) -> None:
    await cluster.mig_layouts(REPLAY_LAYOUTS, LAYOUTS_CM)
    full = await cluster.node("full", MIG_3G, 2, h200_on("all-3g.71gb", "3g.71gb", 2))
    idle = await cluster.node("idle", MIG_1G, 7, h200_on("all-1g.18gb", "1g.18gb", 7))
    for i in range(2):
        await cluster.pod(f"train-{i}", {MIG_3G: "1"}, node=full)
        await cluster.running(f"train-{i}")
    await cluster.pod("p", {MIG_3G: "1"})
    alone, v = await replayed(cluster, "p")
    # the snapshot alone: "every nvidia.com/mig-3g.71gb is in use", wait or add GPUs
    assert alone.kind == w.INSUFFICIENT, alone
    assert v.kind == RESHAPE, v
    assert f"node {idle} took the pod" in v.reason
    assert v.replay is not None
    assert v.replay["before"]["phase"] == "Pending"  # the twin agrees before the relabel
    assert [(n["node"], n["mig_state"]) for n in v.replay["nodes"]] == [(idle, "success")]
