"""Every example of examples/dra on a simulated GPU node running the real `kubegpu
dra-plugin`: the real scheduler allocates its claims against the node's slices, the pod's
containers start, and `nvidia-smi -L` in them lists exactly the devices the claim was given.

The examples are applied unchanged: each container's `sh -c "nvidia-smi -L; sleep 3600"`
runs as a shell with the simulated `nvidia-smi` on its PATH."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from kube_objects import status_of
from kubegpu.catalog import nvidia
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode

from .dra_stack import device_classes_applied, published_devices, sim_gpu_node
from .dra_stack import dra_plugin as start_plugin
from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "dra-examples"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
MIG_GPU = 3  # carries one 1g.18gb MIG device; GPUs 0-2 are whole
UUID = re.compile(r"UUID: ((?:GPU|MIG)-[0-9a-f-]+)")


@pytest.fixture
async def gpu_node(control_plane: ControlPlane, akube: AsyncClient) -> AsyncIterator[SimNode]:
    mig = {MIG_GPU: ("1g.18gb",)}
    async with sim_gpu_node(control_plane, akube, NODE, "h200-nvl:4", mig=mig) as node:
        yield node


@pytest.fixture
async def classes(akube: AsyncClient) -> AsyncIterator[None]:
    async with device_classes_applied(akube):
        yield


@pytest.fixture
def dra_plugin(gpu_node: SimNode, control_plane: ControlPlane, tmp_path: Path) -> Iterator[None]:
    """`kubegpu dra-plugin` for the node, with the sharing gates the examples use."""
    with start_plugin(
        gpu_node, control_plane, tmp_path, "TimeSlicingSettings=true,MPSSupport=true"
    ):
        yield


async def _devices(akube: AsyncClient) -> dict[str, Any]:
    """Published device name -> its attributes (empty until the pool is published)."""
    return {n: d.get("attributes") or {} for n, d in (await published_devices(akube, NODE)).items()}


def _uuid(attributes: dict[str, Any], name: str) -> str:
    value: str = attributes[name]["string"]
    return value


async def _started(akube: AsyncClient, name: str, namespace: str) -> Any:
    pod = await akube.get(Pod, name, namespace=namespace)
    return pod if status_of(pod).phase in {"Running", "Succeeded", "Failed"} else None


def _logged_uuids(node: SimNode, namespace: str, pod: Any, container: str) -> set[str]:
    directory = node.root / "var/log/pods" / f"{namespace}_{pod.metadata.name}_{pod.metadata.uid}"
    text = "".join(p.read_text() for p in (directory / container).glob("*.log"))
    return set(UUID.findall(text))


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
async def test_an_example_claim_is_allocated_and_its_pod_sees_exactly_its_devices(
    example: str,
    gpu_node: SimNode,
    dra_plugin: None,
    classes: None,
    akube: AsyncClient,
    namespace: str,
) -> None:
    async def published() -> dict[str, Any]:
        devices = await _devices(akube)
        return devices if any("-mig-" in d for d in devices) else {}

    devices = await eventually(published, timeout=60)
    docs = [d for d in yaml.safe_load_all((EXAMPLES / example).read_text()) if d]
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert pods, f"{example} has no pod"
    for doc in docs:
        kinds = {"ResourceClaimTemplate": ResourceClaimTemplate, "ResourceClaim": ResourceClaim}
        if doc["kind"] in kinds:
            await akube.create(kinds[doc["kind"]].from_dict(doc), namespace=namespace)  # type: ignore[attr-defined, call-overload]
    for doc in pods:  # as written: a shell that lists its GPUs, then sleeps
        await akube.create(Pod.from_dict(doc), namespace=namespace)  # type: ignore[call-overload]

    for doc in pods:
        name = doc["metadata"]["name"]

        async def started(n: str = name) -> Any:
            return await _started(akube, n, namespace)

        pod = await eventually(started, 90)
        assert pod.spec.nodeName == NODE
        given: set[str] = set()
        for status in pod.status.resourceClaimStatuses:
            claim = (
                await akube.get(ResourceClaim, status.resourceClaimName, namespace=namespace)
            ).to_dict()
            for result in claim["status"]["allocation"]["devices"]["results"]:
                assert (result["driver"], result["pool"]) == (nvidia.DRA_DRIVER, NODE)
                given.add(result["device"])
        uuids = {_uuid(devices[d], "uuid") for d in given}
        parents = {_uuid(devices[d], "parentUUID") for d in given if "-mig-" in d}

        async def logged(container: str, n: Any = pod) -> set[str]:
            return _logged_uuids(gpu_node, namespace, n, container)

        for container in doc["spec"]["containers"]:

            async def logged_by(c: str = container["name"]) -> set[str]:
                return await logged(c)

            # a real shell runs nvidia-smi: slow under load, so as long as the pod's start
            seen = await eventually(logged_by, timeout=90)
            assert seen == uuids | parents, (example, container["name"], given)
        pod = await akube.get(Pod, name, namespace=namespace)
        assert pod.status.phase in {"Running", "Succeeded"}, pod.status.containerStatuses
    for doc in pods:
        await akube.delete(Pod, doc["metadata"]["name"], namespace=namespace)

    async def unprepared() -> bool:
        return gpu_node.dra.claims == {}

    await eventually(unprepared, timeout=30)
