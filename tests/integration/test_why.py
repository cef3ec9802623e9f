"""`kubegpu why` on the real scheduler: simulated nodes advertise GPU resources through a
test device plugin, pods are made Pending (or refused) one cause at a time, the cluster is
captured as `kubegpu why` captures it, and the verdict must name that cause.

Every test has nodes of its own and a fresh namespace (tests/integration/gpu_cluster.py),
and waits for the scheduler's own `PodScheduled=False` (or the kubelet's `Failed`) before
judging."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from typer.testing import CliRunner

from kubegpu.catalog import nvidia
from kubegpu.cli.app import app
from kubegpu.doctor import why as w
from kubegpu.sim.controlplane.plane import ControlPlane

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
