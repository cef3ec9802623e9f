"""One kubelet device plugin (v1beta1) for one extended resource, on its own unix socket.

The server is started before it registers with kubelet (kubelet dials it back at once).
ListAndWatch sends the full device list first and again whenever the devices or their
health change. Allocate and GetPreferredAllocation are answered by the pure functions of
`kubegpu.sharing`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from kubegpu.kube.kubelet import (
    DEVICE_PLUGIN_VERSION,
    HEALTHY,
    UNHEALTHY,
    unix_target,
)
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2 as dp
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from kubegpu.sharing.allocate import AllocateSettings, AllocationError, container_response
from kubegpu.sharing.devices import Device
from kubegpu.sharing.preferred import (
    PairScores,
    Policy,
    PreferenceError,
    is_whole_gpu_resource,
    preferred_gpus,
    preferred_shared,
)

log = logging.getLogger(__name__)

REGISTER_TIMEOUT_S = 5.0


def socket_name(resource: str) -> str:
    """`nvidia.com/mig-1g.10gb` -> `nvidia-mig-1g.10gb.sock`."""
    return f"nvidia-{resource.split('/', 1)[-1]}.sock"


@dataclass
class ResourceState:
    """Everything one resource's answers depend on; replaced whole on a change."""

    devices: list[Device]
    settings: AllocateSettings
    policy: Policy = "distributed"
    scores: PairScores = field(default_factory=dict)
    unhealthy: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.by_id = {d.id: d for d in self.devices}
        self.whole = is_whole_gpu_resource(self.devices)
        self.gpu_of = {d.id: d.gpu for d in self.devices}
        self.listing = dp.ListAndWatchResponse(
            devices=[
                dp.Device(
                    ID=d.id,
                    health=UNHEALTHY if d.id in self.unhealthy else HEALTHY,
                    topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=d.numa_node)])
                    if d.numa_node is not None
                    else None,
                )
                for d in self.devices
            ]
        )


class ResourceServer(dp_grpc.DevicePluginServicer):
    """The DevicePlugin service of one resource, its socket and its registration."""

    def __init__(self, resource: str, plugin_dir: Path, state: ResourceState) -> None:
        self.resource = resource
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / socket_name(resource)
        self.state = state
        self.registered = False
        self.allocations = 0  # Allocate calls answered (for tests and logs)
        # told the device IDs of every answered Allocate (the plugin annotates the pod)
        self.on_allocate: Callable[[list[str]], None] | None = None
        self._server: grpc.aio.Server | None = None
        self._changed = asyncio.Condition()
        self._version = 0

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def serving(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Serve on the socket (replacing a stale socket file)."""
        await self.stop()
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        dp_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(unix_target(self.socket))
        await server.start()
        self._server = server

    async def stop(self) -> None:
        """Stop serving: open ListAndWatch streams end, kubelet drops the resource."""
        self.registered = False
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=0.2)
            self.socket.unlink(missing_ok=True)

    async def register(self, kubelet_socket: Path) -> None:
        """Tell kubelet about this resource; raises grpc.aio.AioRpcError or TimeoutError."""
        async with grpc.aio.insecure_channel(unix_target(kubelet_socket)) as channel:
            await asyncio.wait_for(channel.channel_ready(), REGISTER_TIMEOUT_S)
            await dp_grpc.RegistrationStub(channel).Register(
                dp.RegisterRequest(
                    version=DEVICE_PLUGIN_VERSION,
                    endpoint=self.socket.name,
                    resource_name=self.resource,
                    options=dp.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=REGISTER_TIMEOUT_S,
            )
        self.registered = True

    async def update(self, state: ResourceState) -> None:
        """New devices, health or settings; open ListAndWatch streams resend the list."""
        old = self.state.listing
        self.state = state
        if state.listing != old:
            async with self._changed:
                self._version += 1
                self._changed.notify_all()

    # -- the DevicePlugin service ----------------------------------------------------------
    async def GetDevicePluginOptions(
        self, request: dp.Empty, context: Any
    ) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(get_preferred_allocation_available=True)

    async def ListAndWatch(
        self, request: dp.Empty, context: Any
    ) -> AsyncIterator[dp.ListAndWatchResponse]:
        seen = -1
        while True:
            async with self._changed:
                while self._version == seen:
                    await self._changed.wait()
                seen = self._version
                listing = self.state.listing
            yield listing

    async def GetPreferredAllocation(
        self, request: dp.PreferredAllocationRequest, context: Any
    ) -> dp.PreferredAllocationResponse:
        state = self.state
        out = []
        for req in request.container_requests:
            try:
                ids = self._prefer(
                    state,
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    int(req.allocation_size),
                )
            except PreferenceError as exc:
                problem = str(exc)
            else:
                out.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
                continue
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return dp.PreferredAllocationResponse(container_responses=out)

    @staticmethod
    def _prefer(
        state: ResourceState, available: list[str], must: list[str], size: int
    ) -> list[str]:
        if state.whole:
            return preferred_gpus(state.gpu_of, available, must, size, state.scores)
        return preferred_shared(state.devices, available, must, size, state.policy)

    async def Allocate(self, request: dp.AllocateRequest, context: Any) -> dp.AllocateResponse:
        state = self.state
        out = []
        for req in request.container_requests:
            try:
                r = container_response(
                    list(req.devices_ids), state.by_id, state.settings, str(uuid.uuid4())
                )
            except AllocationError as exc:
                log.warning(
                    "%s: Allocate %s refused: %s", self.resource, list(req.devices_ids), exc
                )
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                raise  # not reached: abort raises
            out.append(
                dp.ContainerAllocateResponse(
                    envs=r.envs,
                    mounts=[
                        dp.Mount(
                            container_path=m.container_path,
                            host_path=m.host_path,
                            read_only=m.read_only,
                        )
                        for m in r.mounts
                    ],
                    devices=[
                        dp.DeviceSpec(
                            container_path=d.container_path,
                            host_path=d.host_path,
                            permissions=d.permissions,
                        )
                        for d in r.devices
                    ],
                    annotations=r.annotations,
                    cdi_devices=[dp.CDIDevice(name=n) for n in r.cdi_devices],
                )
            )
        self.allocations += 1
        if self.on_allocate is not None:
            self.on_allocate([i for req in request.container_requests for i in req.devices_ids])
        return dp.AllocateResponse(container_responses=out)

    async def PreStartContainer(
        self, request: dp.PreStartContainerRequest, context: Any
    ) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()
