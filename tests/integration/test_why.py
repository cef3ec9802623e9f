"""`kubegpu why` on the real scheduler: simulated nodes advertise GPU resources through a
test device plugin, pods are made Pending (or refused) one cause at a time, the cluster is
captured as `kubegpu why` captures it, and the verdict must name that cause.

Every test has nodes of its own (names prefixed `why-<test>`), a fresh namespace that also
serves as the operator namespace of the capture (for mig-parted ConfigMaps), and waits for
the scheduler's own `PodScheduled=False` (or the kubelet's `Failed`) before judging."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap, Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from lightkube.types import PatchType
from typer.testing import CliRunner

from kube_objects import meta
from kubegpu.catalog import nvidia
from kubegpu.cli.app import app
from kubegpu.doctor import why as w
from kubegpu.doctor.capture import capture
from kubegpu.sim.controlplane.plane import ControlPlane

from .fake_plugin import FakePlugin
from .helpers import eventually
from .simnodes import sim_node

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

IMAGE = "registry.example/workload:1"  # no process: Running until deleted
MIG_LAYOUTS = """version: v1
mig-configs:
  all-1g.18gb:
  - devices: all
    mig-enabled: true
    mig-devices:
      1g.18gb: 7
"""


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


class Cluster:
    """Simulated nodes with test device plugins; everything made is removed by `close`."""

    def __init__(self, cp: ControlPlane, akube: AsyncClient, namespace: str) -> None:
        self.cp, self.akube, self.namespace = cp, akube, namespace
        self._stack = contextlib.AsyncExitStack()
        self.prefix = f"why-{uuid.uuid4().hex[:6]}"

    async def node(
        self,
        suffix: str,
        resource: str = nvidia.GPU_RESOURCE,
        count: int = 2,
        labels: dict[str, str] | None = None,
        plugin: type[FakePlugin] = FakePlugin,
    ) -> str:
        name = f"{self.prefix}-{suffix}"
        node = await self._stack.enter_async_context(
            sim_node(
                self.cp.kubeconfig_path,
                self.akube,
                name,
                gpus="h100-80gb:1",
                labels={nvidia.GPU_PRESENT: "true", **(labels or {})},
            )
        )
        if count:
            fake = plugin(node.devices.plugin_dir, resource, [f"dev-{i}" for i in range(count)])
            await fake.start()
            self._stack.push_async_callback(fake.stop)

            async def advertised() -> bool:
                n = await self.akube.get(Node, name)
                alloc = (n.status.allocatable or {}) if n.status else {}
                return alloc.get(resource) == str(count)

            await eventually(advertised, timeout=60)
        return name

    async def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        await self.akube.patch(Node, name, patch, patch_type=PatchType.MERGE)

    async def pod(
        self,
        name: str,
        resources: dict[str, str] | None = None,
        *,
        node: str | None = None,
        selector: dict[str, str] | None = None,
        claim: str | None = None,
    ) -> str:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "resources": {"limits": resources or {}},
                }
            ],
            "restartPolicy": "Never",
        }
        if node:
            spec["nodeName"] = node
        if selector:
            spec["nodeSelector"] = selector
        if claim:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
            spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        await self.akube.create(  # type: ignore[call-overload]
            Pod.from_dict({"metadata": {"name": name}, "spec": spec}),
            namespace=self.namespace,
        )
        return f"{self.namespace}/{name}"

    async def running(self, name: str) -> None:
        async def up() -> bool:
            p = await self.akube.get(Pod, name, namespace=self.namespace)
            return bool(p.status and p.status.phase == "Running")

        await eventually(up, timeout=60)

    async def verdict(self, name: str, phase: str = "Pending") -> w.Verdict:
        """Once the scheduler (or kubelet) has said its word, the verdict on a fresh capture."""

        async def settled() -> bool:
            p = await self.akube.get(Pod, name, namespace=self.namespace)
            status = p.status
            if phase == "Failed":
                return bool(status and status.phase == "Failed")
            return any(
                c.type == "PodScheduled" and c.status == "False"
                for c in ((status.conditions or []) if status else [])
            )

        await eventually(settled, timeout=60)
        snap = await capture(self.akube, namespace=self.namespace, source="sim")
        return w.why(snap, f"{self.namespace}/{name}")

    async def close(self) -> None:
        await self._stack.aclose()


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


async def test_a_profile_nobody_advertises_names_the_nearest(cluster: Cluster) -> None:
    await cluster.node("h200", "nvidia.com/mig-1g.18gb", 7)
    await cluster.pod("p", {"nvidia.com/mig-1g.10gb": "1"})
    v = await cluster.verdict("p")
    assert v.kind == w.UNKNOWN_RESOURCE
    assert "nearest resource that exists is nvidia.com/mig-1g.18gb" in v.reason


async def test_a_mig_profile_under_the_single_strategy(cluster: Cluster) -> None:
    single = {nvidia.MIG_STRATEGY: "single", nvidia.GPU_PRODUCT: "NVIDIA-H200-NVL-MIG-1g.18gb"}
    await cluster.node("h200", nvidia.GPU_RESOURCE, 7, single)
    await cluster.pod("p", {"nvidia.com/mig-1g.18gb": "1"})
    v = await cluster.verdict("p")
    assert v.kind == w.STRATEGY_NAMING and "advertised as nvidia.com/gpu" in v.reason


async def test_free_gpus_on_two_nodes_are_fragmented(cluster: Cluster) -> None:
    a = await cluster.node("a", count=2)
    b = await cluster.node("b", count=2)
    for name, node in (("busy-a", a), ("busy-b", b)):
        await cluster.pod(name, {nvidia.GPU_RESOURCE: "1"}, node=node)
        await cluster.running(name)
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "2"})
    v = await cluster.verdict("p")
    assert v.kind == w.FRAGMENTED, v
    assert any(f"{a}: 1 free of 2" in e and f"{b}: 1 free of 2" in e for e in v.evidence)


async def test_every_gpu_in_use(cluster: Cluster) -> None:
    a = await cluster.node("a", count=1)
    await cluster.pod("busy", {nvidia.GPU_RESOURCE: "1"}, node=a)
    await cluster.running("busy")
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "1"})
    v = await cluster.verdict("p")
    assert v.kind == w.INSUFFICIENT and any("/busy" in e for e in v.evidence)


async def test_a_node_selector_that_matches_no_gpu_node(cluster: Cluster) -> None:
    await cluster.node("a", labels={"pool": "infer"})
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "1"}, selector={"pool": "train"})
    v = await cluster.verdict("p")
    assert v.kind == w.NODE_SELECTOR and any("pool=train (node: infer)" in e for e in v.evidence)


async def test_a_taint_the_pod_does_not_tolerate(cluster: Cluster) -> None:
    a = await cluster.node("a")
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    await cluster.patch_node(a, {"spec": {"taints": [taint]}})
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "1"})
    v = await cluster.verdict("p")
    assert v.kind == w.TAINT and any("nvidia.com/gpu=present:NoSchedule" in e for e in v.evidence)


async def test_a_cordoned_gpu_node(cluster: Cluster) -> None:
    a = await cluster.node("a")
    await cluster.patch_node(a, {"spec": {"unschedulable": True}})
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "1"})
    assert (await cluster.verdict("p")).kind == w.CORDONED


async def test_a_pod_the_kubelet_refused(cluster: Cluster) -> None:
    a = await cluster.node("a", count=4, plugin=RefusingPlugin)
    await cluster.pod("p", {nvidia.GPU_RESOURCE: "2"}, node=a)
    v = await cluster.verdict("p", phase="Failed")
    assert v.kind == w.ADMISSION_FAILED
    assert any("UnexpectedAdmissionError" in e and "more than one shared" in e for e in v.evidence)


async def test_a_mig_reconfiguration_pending_on_the_only_node_that_fits(
    cluster: Cluster, akube: AsyncClient
) -> None:
    await akube.create(  # type: ignore[call-overload]
        ConfigMap.from_dict(
            {
                "metadata": {"name": nvidia.MIG_PARTED_DEFAULT_CONFIGMAP},
                "data": {"config.yaml": MIG_LAYOUTS},
            }
        ),
        namespace=cluster.namespace,
    )
    labels = {nvidia.MIG_CONFIG: "all-1g.18gb", nvidia.MIG_CONFIG_STATE: "pending"}
    await cluster.node("h200", count=0, labels=labels)
    await cluster.pod("p", {"nvidia.com/mig-1g.18gb": "1"})
    v = await cluster.verdict("p")
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
        v = await cluster.verdict("p")
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
    await cluster.verdict("p")
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
