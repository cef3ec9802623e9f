"""Extended resources through DRA (KEP-5004, Kubernetes 1.36+): with the `gpu.nvidia.com`
class naming `extendedResourceName: nvidia.com/gpu` (GPUCluster
`draDriver.gpus.extendedResourceName`), a plain pod asking for `nvidia.com/gpu: 1`, unchanged
from a device-plugin cluster, is placed by the real scheduler on a DRA node (which has no
`nvidia.com/gpu` capacity), gets a device the plugin prepared, shows in pod-resources under
the scheduler's claim (what the exporter attributes by), and is unprepared once deleted.

Runs where the control plane's version serves extended resources (kubegpu.kube.versions);
1.35 has them alpha and off, so there it is skipped."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim

from kube_objects import status_of
from kubegpu.catalog import nvidia
from kubegpu.dra.classes import device_classes
from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
from kubegpu.sim.controlplane.binaries import APISERVER, find_bin_dir
from kubegpu.sim.controlplane.k8s_version import binary_version
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode

from .dra_stack import SLEEP, dra_plugin, sim_gpu_node, wait_published, wait_registered
from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "dra-extended"


@pytest.fixture
async def node(
    control_plane: ControlPlane, akube: AsyncClient, tmp_path: Path
) -> AsyncIterator[SimNode]:
    if not binary_version(find_bin_dir() / APISERVER).extended_resource:
        pytest.skip("this Kubernetes version does not serve extended resources through DRA")
    classes = device_classes(extended_resource=True)
    for body in classes:
        with contextlib.suppress(ApiError):  # one left by another test: replace it
            await akube.delete(DeviceClass, body["metadata"]["name"])
        await akube.create(DeviceClass.from_dict(body))  # type: ignore[call-overload]
    try:
        async with sim_gpu_node(control_plane, akube, NODE, "h200-nvl:2") as sim:
            with dra_plugin(sim, control_plane, tmp_path):
                await wait_registered(sim)
                await wait_published(akube, NODE)
                yield sim
    finally:
        for body in classes:
            with contextlib.suppress(ApiError):
                await akube.delete(DeviceClass, body["metadata"]["name"])


async def test_a_plain_nvidia_com_gpu_pod_runs_on_a_dra_node(
    node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    capacity = status_of(await akube.get(Node, NODE)).capacity or {}
    assert nvidia.GPU_RESOURCE not in capacity  # no device plugin on a DRA node
    devices = await wait_published(akube, NODE)
    uuids = {d["attributes"]["uuid"]["string"] for d in devices.values()}
    await akube.create(  # type: ignore[call-overload]
        Pod.from_dict(
            {
                "metadata": {"name": "legacy"},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "cuda",
                            "image": "ghcr.io/kubegpu/kubegpu:test",
                            "command": SLEEP,
                            "resources": {"limits": {nvidia.GPU_RESOURCE: "1"}},
                        }
                    ],
                },
            }
        ),
        namespace=namespace,
    )

    async def running() -> Any:
        pod = (await akube.get(Pod, "legacy", namespace=namespace)).to_dict()
        return pod if pod["status"].get("phase") == "Running" else None

    pod = await eventually(running, timeout=120)
    assert pod["spec"]["nodeName"] == NODE
    status = pod["status"]["extendedResourceClaimStatus"]
    claim_name = status["resourceClaimName"]
    (mapping,) = status["requestMappings"]
    assert (mapping["containerName"], mapping["resourceName"]) == ("cuda", nvidia.GPU_RESOURCE)
    claim = (await akube.get(ResourceClaim, claim_name, namespace=namespace)).to_dict()
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (nvidia.DRA_DRIVER, NODE)

    env = node.dra.container_env(pod["metadata"]["uid"], "cuda")
    assert env[nvidia.NVIDIA_VISIBLE_DEVICES] in uuids
    assert (
        env[nvidia.NVIDIA_VISIBLE_DEVICES]
        == devices[result["device"]]["attributes"]["uuid"]["string"]
    )
    spec_files = list((node.root / "var/run/cdi").glob(f"*{claim['metadata']['uid']}*"))
    assert spec_files, "the plugin prepared nothing for the scheduler's claim"

    async with grpc.aio.insecure_channel(f"unix://{node.pod_resources.socket}") as ch:
        listed = await pr_grpc.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest())
    (entry,) = [p for p in listed.pod_resources if p.name == "legacy"]
    (dynamic,) = entry.containers[0].dynamic_resources
    assert dynamic.claim_name == claim_name
    assert dynamic.claim_resources[0].device_name == result["device"]

    await akube.delete(Pod, "legacy", namespace=namespace)

    async def unprepared() -> bool:
        return not any(p.exists() for p in spec_files) and node.dra.claims == {}

    await eventually(unprepared, timeout=60)
