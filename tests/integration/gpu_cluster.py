"""Simulated GPU nodes behind test device plugins on the real control plane, and pods made
Running or Pending there by the real scheduler: the cluster `kubegpu why` and `kubegpu plan
--from-snapshot` are tested on (tests/integration/test_why.py, test_plan_from_snapshot.py).

Every test gets nodes of its own (names prefixed `why-<random>`) and a fresh namespace that
also serves as the operator namespace of a capture (for mig-parted ConfigMaps); everything
made is removed when the `cluster` fixture ends."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap, Node, Pod
from lightkube.types import PatchType

from kube_objects import meta
from kubegpu.catalog import nvidia
from kubegpu.doctor.capture import capture
from kubegpu.doctor.snapshot import Snapshot
from kubegpu.sim.controlplane.plane import ControlPlane

from .fake_plugin import FakePlugin
from .helpers import eventually
from .simnodes import sim_node

IMAGE = "registry.example/workload:1"  # no process: Running until deleted
MIG_LAYOUTS = """version: v1
mig-configs:
  all-1g.18gb:
  - devices: all
    mig-enabled: true
    mig-devices:
      1g.18gb: 7
"""


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

    async def mig_layouts(
        self, text: str = MIG_LAYOUTS, name: str = nvidia.MIG_PARTED_DEFAULT_CONFIGMAP
    ) -> None:
        """A mig-parted ConfigMap (the chart's default one unless named) in the capture's
        operator namespace."""
        await self.akube.create(  # type: ignore[call-overload]
            ConfigMap.from_dict(
                {
                    "metadata": {"name": name},
                    "data": {"config.yaml": text},
                }
            ),
            namespace=self.namespace,
        )

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

    async def settled(self, name: str, phase: str = "Pending") -> None:
        """Once the scheduler has said its word on the pod (`PodScheduled=False`), or with
        `phase="Failed"` the kubelet its (the pod Failed)."""

        async def said() -> bool:
            p = await self.akube.get(Pod, name, namespace=self.namespace)
            status = p.status
            if phase == "Failed":
                return bool(status and status.phase == "Failed")
            return any(
                c.type == "PodScheduled" and c.status == "False"
                for c in ((status.conditions or []) if status else [])
            )

        await eventually(said, timeout=60)

    async def capture(self, *, own_nodes: bool = False) -> Snapshot:
        """The cluster as `kubegpu why` captures it; with `own_nodes`, less the nodes other
        tests made on the shared control plane."""
        snap = await capture(self.akube, namespace=self.namespace, source="sim")
        if not own_nodes:
            return snap
        mine = tuple(n for n in snap.nodes if n.name.startswith(self.prefix))
        return snap.model_copy(update={"nodes": mine})

    async def close(self) -> None:
        await self._stack.aclose()


@pytest.fixture(name="cluster")
async def cluster_fixture(
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
