"""A tiny device plugin for testing the simulated kubelet (test code, not the product)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2 as dp
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2_grpc as dp_grpc


class FakePlugin(dp_grpc.DevicePluginServicer):
    """Advertises `devices` for `resource`; prefers the highest-numbered free devices."""

    def __init__(self, plugin_dir: Path, resource: str, devices: list[str]) -> None:
        self.plugin_dir = plugin_dir
        self.resource = resource
        self.devices = dict.fromkeys(devices, "Healthy")
        self.endpoint = resource.replace("/", "-") + ".sock"
        self.allocate_calls: list[list[str]] = []
        self.preferred_calls: list[tuple[list[str], int]] = []
        self._changed = asyncio.Event()
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server()
        dp_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.plugin_dir / self.endpoint}")
        await server.start()
        self._server = server
        async with grpc.aio.insecure_channel(f"unix://{self.plugin_dir / 'kubelet.sock'}") as ch:
            await dp_grpc.RegistrationStub(ch).Register(
                dp.RegisterRequest(
                    version="v1beta1",
                    endpoint=self.endpoint,
                    resource_name=self.resource,
                    options=dp.DevicePluginOptions(get_preferred_allocation_available=True),
                )
            )

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        (self.plugin_dir / self.endpoint).unlink(missing_ok=True)

    def set_health(self, device: str, healthy: bool) -> None:
        self.devices[device] = "Healthy" if healthy else "Unhealthy"
        self._changed.set()

    async def GetDevicePluginOptions(self, request, context):
        return dp.DevicePluginOptions(get_preferred_allocation_available=True)

    async def ListAndWatch(self, request, context):
        while True:
            yield dp.ListAndWatchResponse(
                devices=[dp.Device(ID=d, health=h) for d, h in self.devices.items()]
            )
            self._changed.clear()
            await self._changed.wait()

    async def GetPreferredAllocation(self, request, context):
        out = []
        for req in request.container_requests:
            self.preferred_calls.append((list(req.available_deviceIDs), req.allocation_size))
            ids = sorted(req.available_deviceIDs)[-req.allocation_size :]
            out.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return dp.PreferredAllocationResponse(container_responses=out)

    async def Allocate(self, request, context):
        out = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            self.allocate_calls.append(ids)
            out.append(dp.ContainerAllocateResponse(envs={"FAKE_DEVICES": ",".join(ids)}))
        return dp.AllocateResponse(container_responses=out)

    async def PreStartContainer(self, request, context):
        return dp.PreStartContainerResponse()
