"""`kubegpu dra-plugin` on a simulated GPU node with the real control plane: the plugin
registers with the simulated kubelet and publishes the node's GPUs, the real scheduler
allocates a claim, the pod runs with the GPU in its environment and shows in pod-resources,
deleting the pod unprepares, and a restarted kubelet gets the slices back."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from kube_objects import status_of
from kubegpu.catalog import nvidia
from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode

from .dra_stack import device_classes_applied, environ, published_slices, sim_gpu_node
from .dra_stack import dra_plugin as start_plugin
from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "dra-gpus"


@pytest.fixture
async def gpu_node(control_plane: ControlPlane, akube: AsyncClient) -> AsyncIterator[SimNode]:
    async with sim_gpu_node(control_plane, akube, NODE, "h200-nvl:2") as node:
        yield node


@pytest.fixture
async def classes(akube: AsyncClient) -> AsyncIterator[None]:
    async with device_classes_applied(akube):
        yield


@pytest.fixture
def dra_plugin(gpu_node: SimNode, control_plane: ControlPlane, tmp_path: Path) -> Iterator[Any]:
    """`kubegpu dra-plugin` for the node, as its DaemonSet pod would run it."""
    with start_plugin(gpu_node, control_plane, tmp_path) as plugin:
        yield plugin


async def _slices(akube: AsyncClient) -> list[Any]:
    return await published_slices(akube, NODE)


async def test_the_real_plugin_serves_a_claim_end_to_end(
    gpu_node: SimNode, dra_plugin: Any, classes: None, akube: AsyncClient, namespace: str
) -> None:
    published = await eventually(lambda: _slices(akube), timeout=60)
    devices = {d["name"]: d for s in published for d in s["spec"].get("devices") or []}
    assert set(devices) == {"gpu-0", "gpu-1"}

    # the plugin publishes at start; the kubelet registers it on its own next poll
    async def registered() -> bool:
        return nvidia.DRA_DRIVER in gpu_node.dra.plugins

    await eventually(registered, timeout=30)

    await akube.create(  # type: ignore[call-overload]
        ResourceClaimTemplate.from_dict(
            {
                "metadata": {"name": "one-gpu"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpu", "exactly": {"deviceClassName": nvidia.DRA_DRIVER}}
                            ]
                        }
                    }
                },
            }
        ),
        namespace=namespace,
    )
    await akube.create(  # type: ignore[call-overload]
        Pod.from_dict(
            {
                "metadata": {"name": "trainer"},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "ghcr.io/kubegpu/kubegpu:test",
                            "command": [sys.executable, "-c", "import time; time.sleep(3600)"],
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            }
        ),
        namespace=namespace,
    )

    async def running() -> Any:
        pod = await akube.get(Pod, "trainer", namespace=namespace)
        return pod if status_of(pod).phase == "Running" else None

    pod = await eventually(running, timeout=90)
    assert pod.spec.nodeName == NODE  # placed by the real scheduler: the only node with GPUs
    (claim_status,) = pod.status.resourceClaimStatuses

    async with grpc.aio.insecure_channel(f"unix://{gpu_node.pod_resources.socket}") as ch:
        listed = await pr_grpc.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest())
    (entry,) = [p for p in listed.pod_resources if p.name == "trainer"]
    (dynamic,) = entry.containers[0].dynamic_resources
    assert (dynamic.claim_name, dynamic.claim_namespace) == (
        claim_status.resourceClaimName,
        namespace,
    )
    (resource,) = dynamic.claim_resources
    assert (resource.driver_name, resource.pool_name) == (nvidia.DRA_DRIVER, NODE)
    device = resource.device_name
    (cdi_device,) = resource.cdi_devices
    assert cdi_device.name.startswith(f"{nvidia.CDI_CLAIM_KIND}=")
    assert cdi_device.name.endswith(f"-{device}")
    claim_uid = cdi_device.name.split("=", 1)[1].removesuffix(f"-{device}")

    (pid,) = gpu_node.pids()
    uuid = devices[device]["attributes"]["uuid"]["string"]
    assert environ(pid)[nvidia.NVIDIA_VISIBLE_DEVICES] == uuid

    spec_files = list((gpu_node.root / "var/run/cdi").glob(f"*{claim_uid}*"))
    assert spec_files, "the plugin wrote no CDI spec for the claim"
    await akube.delete(Pod, "trainer", namespace=namespace)

    async def unprepared() -> bool:
        return not any(p.exists() for p in spec_files) and gpu_node.dra.claims == {}

    await eventually(unprepared, timeout=30)

    # a kubelet restart wipes the node's slices; the plugin publishes them again
    before = {s["metadata"]["uid"] for s in await _slices(akube)}
    await gpu_node.restart_kubelet()

    async def republished() -> bool:
        now = await _slices(akube)
        return bool(now) and not {s["metadata"]["uid"] for s in now} & before

    await eventually(republished, timeout=30)


async def test_nvidia_smi_in_a_claim_pod_lists_only_the_claimed_gpu(
    gpu_node: SimNode, dra_plugin: Any, classes: None, akube: AsyncClient, namespace: str
) -> None:
    published = await eventually(lambda: _slices(akube), timeout=60)
    uuids = {
        d["name"]: d["attributes"]["uuid"]["string"]
        for s in published
        for d in s["spec"].get("devices") or []
    }
    await akube.create(  # type: ignore[call-overload]
        ResourceClaimTemplate.from_dict(
            {
                "metadata": {"name": "one-gpu"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpu", "exactly": {"deviceClassName": nvidia.DRA_DRIVER}}
                            ]
                        }
                    }
                },
            }
        ),
        namespace=namespace,
    )
    await akube.create(  # type: ignore[call-overload]
        Pod.from_dict(
            {
                "metadata": {"name": "smi"},
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                    "containers": [
                        {
                            "name": "smi",
                            "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                            "command": ["nvidia-smi", "-L"],
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            }
        ),
        namespace=namespace,
    )

    async def succeeded() -> Any:
        pod = await akube.get(Pod, "smi", namespace=namespace)
        return pod if status_of(pod).phase == "Succeeded" else None

    pod = await eventually(succeeded, timeout=90)
    (log,) = (gpu_node.root / "var/log/pods").glob(f"{namespace}_smi_{pod.metadata.uid}/smi/*.log")
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    assert any(u in lines[0] for u in uuids.values()), (lines, uuids)

    async def unprepared() -> bool:  # the pod ended: its claim is unprepared
        return gpu_node.dra.claims == {}

    await eventually(unprepared, timeout=30)
