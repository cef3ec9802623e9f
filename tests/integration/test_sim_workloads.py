"""Workload pods on a simulated node: `nvidia-smi` and CUDA samples print what the pod was
allocated and complete, and `kubectl logs` (the API server's pod log API, proxied to the
simulated kubelet's HTTPS endpoint) returns their output."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import NodeAddress
from lightkube.resources.core_v1 import Node, Pod

from kube_objects import status_of
from kubegpu.sim.kubelet.node import SimNode

from .fake_plugin import FakePlugin
from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
SAMPLE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
NODE = "sim-smi"


@pytest.fixture
async def gpu_node(sim_nodes: SimNodes, akube: AsyncClient) -> AsyncIterator[SimNode]:
    node = await sim_nodes.start(NODE, gpus="h100-80gb:2", labels={"pool": "smi"})
    assert node.nvml is not None
    plugin = FakePlugin(
        node.devices.plugin_dir, "nvidia.com/gpu", [d.uuid for d in node.nvml.devices()]
    )
    await plugin.start()
    try:

        async def advertised() -> bool:
            n = await akube.get(Node, NODE)
            return bool(n.status and (n.status.allocatable or {}).get("nvidia.com/gpu") == "2")

        await eventually(advertised)
        yield node
    finally:
        await plugin.stop()  # the node ends after it (sim_nodes)


def workload(name: str, image: str, command: list[str] | None, gpus: int = 1) -> Pod:
    container: dict[str, Any] = {"name": "main", "image": image}
    if command:
        container["command"] = command
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return Pod.from_dict(  # type: ignore[return-value]
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"pool": "smi"},
                "restartPolicy": "Never",
                "containers": [container],
            },
        }
    )


async def finished(akube: AsyncClient, namespace: str, name: str) -> str:
    async def phase() -> str | None:
        p = await akube.get(Pod, name, namespace=namespace)
        return p.status.phase if p.status and p.status.phase in {"Succeeded", "Failed"} else None

    return cast(str, await eventually(phase, timeout=60))


async def logs(akube: AsyncClient, namespace: str, name: str) -> str:
    return "".join([line async for line in akube.log(name, namespace=namespace)])


async def test_nvidia_smi_lists_only_the_allocated_gpu_and_completes(
    gpu_node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    assert gpu_node.nvml is not None
    uuids = [d.uuid for d in gpu_node.nvml.devices()]
    await akube.create(workload("smi-l", CUDA_IMAGE, ["nvidia-smi", "-L"]), namespace=namespace)  # type: ignore[call-overload]
    assert await finished(akube, namespace, "smi-l") == "Succeeded"
    out = await logs(akube, namespace, "smi-l")
    (line,) = out.splitlines()  # one GPU: the one it was given, not the node's two
    index = next(i for i, u in enumerate(uuids) if line.endswith(f"(UUID: {u})"))
    assert line == f"GPU {index}: NVIDIA H100 80GB HBM3 (UUID: {uuids[index]})"
    # its GPU goes back to the pool
    assert not gpu_node.devices.allocations


async def test_query_gpu_and_the_plain_table_come_from_the_simulated_gpus(
    gpu_node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    command = ["nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader"]
    await akube.create(workload("smi-q", CUDA_IMAGE, command, gpus=2), namespace=namespace)  # type: ignore[call-overload]
    await akube.create(workload("smi", CUDA_IMAGE, ["nvidia-smi"]), namespace=namespace)  # type: ignore[call-overload]
    assert await finished(akube, namespace, "smi-q") == "Succeeded"
    assert gpu_node.nvml is not None
    want = [f"{d.index}, {d.uuid}, 81559 MiB" for d in gpu_node.nvml.devices()]
    assert (await logs(akube, namespace, "smi-q")).splitlines() == want
    assert await finished(akube, namespace, "smi") == "Succeeded"
    table = await logs(akube, namespace, "smi")
    assert "Driver Version:" in table and "No running processes found" in table


async def test_the_cuda_vectoradd_sample_passes_on_its_gpu(
    gpu_node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    await akube.create(workload("vectoradd", SAMPLE_IMAGE, None), namespace=namespace)  # type: ignore[call-overload]
    assert await finished(akube, namespace, "vectoradd") == "Succeeded"
    out = await logs(akube, namespace, "vectoradd")
    assert "Test PASSED" in out
    assert gpu_node.nvml is not None
    assert any(f"NVIDIA H100 80GB HBM3 ({d.uuid})" in out for d in gpu_node.nvml.devices())


async def test_nvidia_smi_without_a_gpu_finds_no_device_and_fails(
    gpu_node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    await akube.create(workload("no-gpu", CUDA_IMAGE, ["nvidia-smi"], gpus=0), namespace=namespace)  # type: ignore[call-overload]
    assert await finished(akube, namespace, "no-gpu") == "Failed"
    assert "No devices were found" in await logs(akube, namespace, "no-gpu")


async def test_each_node_has_its_own_address_for_host_network_pods(
    control_plane: Any, akube: AsyncClient, namespace: str
) -> None:
    """The same port on two nodes (NVIDIA's exporter on :9400 everywhere) never collides,
    and each listens on its node's InternalIP, where the API server reaches it."""
    sim_nodes = SimNodes(control_plane.kubeconfig_path, akube)
    nodes: list[SimNode] = []
    try:
        for i in range(2):
            nodes.append(await sim_nodes.start(f"sim-net-{i}", labels={"pool": f"net-{i}"}))
        assert nodes[0].address != nodes[1].address
        for i, node in enumerate(nodes):
            n = await akube.get(Node, node.name)
            internal = [
                a.address
                for a in cast(list[NodeAddress], status_of(n).addresses)
                if a.type == "InternalIP"
            ]
            assert internal == [node.address]
            await akube.create(  # type: ignore[call-overload]
                Pod.from_dict(
                    {
                        "metadata": {"name": f"status-{i}"},
                        "spec": {
                            "hostNetwork": True,
                            "nodeSelector": {"pool": f"net-{i}"},
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "kubegpu:dev",
                                    "args": ["validator", "metrics", "--port", "19417"],
                                }
                            ],
                        },
                    }
                ),
                namespace=namespace,
            )

        async def both_serving() -> bool:
            for node in nodes:
                try:
                    _, writer = await asyncio.open_connection(node.address, 19417)
                except OSError:
                    return False
                writer.close()
            return True

        await eventually(both_serving, timeout=30)
        for i, node in enumerate(nodes):
            pod = await akube.get(Pod, f"status-{i}", namespace=namespace)
            assert status_of(pod).phase == "Running"
            assert status_of(pod).podIP == status_of(pod).hostIP == node.address
    finally:
        await sim_nodes.close()
    # the addresses were given back
    assert all(node.network is None for node in nodes)
