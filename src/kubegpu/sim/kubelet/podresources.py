"""The kubelet's pod-resources API v1 (List, GetAllocatableResources, Get) for a sim node.

Monitoring agents such as the metrics exporter read it to attribute devices to pods; the
answers come from the device manager's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
from kubegpu.sim.kubelet.devicemanager import DeviceManager

# (pod uid, container name) -> the container's DRA claims (kubelet.dramanager)
DynamicResources = Callable[[str, str], list[pr.DynamicResource]]


@dataclass(frozen=True)
class PodRef:
    uid: str
    name: str
    namespace: str
    containers: tuple[str, ...]


def _devices(
    resource: str, ids: list[str], numa: dict[str, list[int]] | None = None
) -> pr.ContainerDevices:
    nodes = sorted({n for d in ids for n in (numa or {}).get(d, [])})
    topology = pr.TopologyInfo(nodes=[pr.NUMANode(ID=n) for n in nodes]) if nodes else None
    return pr.ContainerDevices(resource_name=resource, device_ids=ids, topology=topology)


class PodResourcesServer(pr_grpc.PodResourcesListerServicer):
    def __init__(
        self,
        socket: Path,
        devices: DeviceManager,
        pods: Callable[[], list[PodRef]],
        dynamic: DynamicResources | None = None,
    ) -> None:
        self.socket = socket
        self.devices = devices
        self.pods = pods
        self.dynamic = dynamic
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        pr_grpc.add_PodResourcesListerServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        self.socket.unlink(missing_ok=True)

    def _pod(self, ref: PodRef) -> pr.PodResources:
        containers = []
        for name in ref.containers:
            alloc = self.devices.allocations.get((ref.uid, name))
            devices = (
                [_devices(r, ids) for r, ids in sorted(alloc.devices.items())] if alloc else []
            )
            dynamic = self.dynamic(ref.uid, name) if self.dynamic else []
            containers.append(
                pr.ContainerResources(name=name, devices=devices, dynamic_resources=dynamic)
            )
        return pr.PodResources(name=ref.name, namespace=ref.namespace, containers=containers)

    async def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        return pr.ListPodResourcesResponse(pod_resources=[self._pod(p) for p in self.pods()])

    async def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        devices = []
        for resource, items in sorted(self.devices.healthy_devices().items()):
            numa = dict(items)
            devices.append(_devices(resource, [d for d, _ in items], numa))
        return pr.AllocatableResourcesResponse(devices=devices)

    async def Get(
        self, request: pr.GetPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        for p in self.pods():
            if p.name == request.pod_name and p.namespace == request.pod_namespace:
                return pr.GetPodResourcesResponse(pod_resources=self._pod(p))
        await context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_namespace}/{request.pod_name} not found on this node",
        )
        raise AssertionError("unreachable")
