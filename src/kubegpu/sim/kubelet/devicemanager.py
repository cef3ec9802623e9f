"""The kubelet's device manager, as the simulated node runs it.

It serves the Registration service on `<root>/var/lib/kubelet/device-plugins/kubelet.sock`,
dials each plugin that registers, follows its ListAndWatch stream, and allocates devices
to containers the way kubelet does: GetPreferredAllocation when the plugin offers it,
then Allocate, with bookkeeping so no device is handed out twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from kubegpu.base.tasks import cancel_all
from kubegpu.kube.kubelet import KUBELET_SOCKET
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2 as dp
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2_grpc as dp_grpc

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
VERSION = "v1beta1"


class AdmissionError(Exception):
    """A pod cannot be admitted; kubelet reports it as UnexpectedAdmissionError."""


@dataclass
class ContainerAllocation:
    """What the device plugins returned for one container."""

    devices: dict[str, list[str]] = field(default_factory=dict)  # resource -> device IDs
    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)  # container, host, ro
    device_specs: list[tuple[str, str, str]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)


@dataclass
class _Endpoint:
    resource: str
    socket: Path
    channel: grpc.aio.Channel
    stub: dp_grpc.DevicePluginStub
    preferred: bool
    devices: dict[str, bool] = field(default_factory=dict)  # id -> healthy
    numa: dict[str, list[int]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


class DeviceManager:
    """Registration server plus per-resource endpoints and allocation bookkeeping."""

    def __init__(self, plugin_dir: Path, on_change: Callable[[], Awaitable[None]]) -> None:
        self.plugin_dir = plugin_dir
        self._on_change = on_change
        self._endpoints: dict[str, _Endpoint] = {}
        self._server: grpc.aio.Server | None = None
        # (pod uid, container) -> allocation; kept across plugin restarts like kubelet's checkpoint
        self.allocations: dict[tuple[str, str], ContainerAllocation] = {}
        self._lock = asyncio.Lock()
        # called after allocations change (the node marks allocated GPUs busy)
        self.on_allocations: Callable[[], None] | None = None

    @property
    def socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    # -- registration -------------------------------------------------------------------
    async def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        dp_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        for ep in list(self._endpoints.values()):
            await self._drop(ep)
        self._endpoints.clear()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        self.socket.unlink(missing_ok=True)

    async def restart(self) -> None:
        """Kubelet restart: every plugin socket is removed, plugins must register again."""
        await self.stop()
        for sock in self.plugin_dir.glob("*.sock"):
            sock.unlink(missing_ok=True)
        await self._on_change()
        await self.start()

    async def register(self, request: dp.RegisterRequest) -> None:
        if request.version != VERSION:
            raise ValueError(
                f"unsupported device plugin API version {request.version!r} (want {VERSION})"
            )
        if not request.resource_name or "/" not in request.resource_name:
            raise ValueError(f"invalid extended resource name {request.resource_name!r}")
        socket = self.plugin_dir / request.endpoint
        channel = grpc.aio.insecure_channel(f"unix://{socket}")
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout=5)
        except TimeoutError:
            await channel.close()
            raise ValueError(f"cannot dial plugin endpoint {socket}") from None
        old = self._endpoints.get(request.resource_name)
        if old is not None:
            await self._drop(old)
        ep = _Endpoint(
            resource=request.resource_name,
            socket=socket,
            channel=channel,
            stub=dp_grpc.DevicePluginStub(channel),
            preferred=request.options.get_preferred_allocation_available,
        )
        self._endpoints[request.resource_name] = ep
        ep.task = asyncio.create_task(self._follow(ep), name=f"listandwatch:{ep.resource}")
        log.info("device plugin registered: %s at %s", ep.resource, socket)

    async def _follow(self, ep: _Endpoint) -> None:
        try:
            async for response in ep.stub.ListAndWatch(dp.Empty()):
                ep.devices = {d.ID: d.health == HEALTHY for d in response.devices}
                ep.numa = {d.ID: [n.ID for n in d.topology.nodes] for d in response.devices}
                await self._on_change()
        except (grpc.aio.AioRpcError, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.info("device plugin %s went away: %s", ep.resource, exc.code())
        if self._endpoints.get(ep.resource) is ep:
            del self._endpoints[ep.resource]
            await ep.channel.close()
            await self._on_change()

    async def _drop(self, ep: _Endpoint) -> None:
        if ep.task is not None:
            await cancel_all([ep.task])
        await ep.channel.close()

    # -- what the node advertises ---------------------------------------------------------
    def resources(self) -> dict[str, tuple[int, int]]:
        """resource -> (capacity, allocatable): all devices, healthy devices."""
        return {r: (len(ep.devices), sum(ep.devices.values())) for r, ep in self._endpoints.items()}

    def healthy_devices(self) -> dict[str, list[tuple[str, list[int]]]]:
        return {
            r: [(d, ep.numa.get(d, [])) for d, ok in sorted(ep.devices.items()) if ok]
            for r, ep in self._endpoints.items()
        }

    def is_device_resource(self, name: str) -> bool:
        return name in self._endpoints

    # -- allocation -----------------------------------------------------------------------
    def _in_use(self, resource: str) -> set[str]:
        return {d for a in self.allocations.values() for d in a.devices.get(resource, [])}

    async def allocate(
        self, pod_uid: str, container: str, wants: dict[str, int]
    ) -> ContainerAllocation:
        """Allocate `wants` (resource -> count) to one container; AdmissionError when impossible."""
        async with self._lock:
            key = (pod_uid, container)
            if key in self.allocations:
                return self.allocations[key]
            result = ContainerAllocation()
            for resource, needed in sorted(wants.items()):
                ep = self._endpoints.get(resource)
                if ep is None:
                    raise AdmissionError(
                        f"Allocate failed due to no healthy devices present; cannot allocate unhealthy devices {resource}, which is unexpected"
                    )
                used = self._in_use(resource)
                available = sorted(d for d, ok in ep.devices.items() if ok and d not in used)
                if needed > len(available):
                    raise AdmissionError(
                        f"Allocate failed due to requested number of devices unavailable for {resource}. "
                        f"Requested: {needed}, Available: {len(available)}, which is unexpected"
                    )
                chosen = available[:needed]
                if ep.preferred:
                    chosen = await self._preferred(ep, available, needed) or chosen
                try:
                    response = await ep.stub.Allocate(
                        dp.AllocateRequest(
                            container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)]
                        )
                    )
                except grpc.aio.AioRpcError as exc:
                    raise AdmissionError(
                        f"Allocate failed due to {exc.details()}, which is unexpected"
                    ) from None
                except grpc.aio.UsageError as exc:  # the plugin went away: channel closed
                    raise AdmissionError(
                        f"Allocate failed due to {exc}, which is unexpected"
                    ) from None
                (car,) = response.container_responses
                result.devices[resource] = chosen
                result.envs.update(car.envs)
                result.mounts += [(m.container_path, m.host_path, m.read_only) for m in car.mounts]
                result.device_specs += [
                    (d.container_path, d.host_path, d.permissions) for d in car.devices
                ]
                result.annotations.update(car.annotations)
                result.cdi_devices += [c.name for c in car.cdi_devices]
            self.allocations[key] = result
            if self.on_allocations is not None:
                self.on_allocations()
            return result

    async def _preferred(
        self, ep: _Endpoint, available: list[str], needed: int
    ) -> list[str] | None:
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=[], allocation_size=needed
                )
            ]
        )
        try:
            response = await ep.stub.GetPreferredAllocation(request)
        except grpc.aio.AioRpcError as exc:
            log.warning("GetPreferredAllocation for %s failed: %s", ep.resource, exc.details())
            return None
        except grpc.aio.UsageError as exc:  # the plugin went away: channel closed
            log.warning("GetPreferredAllocation for %s failed: %s", ep.resource, exc)
            return None
        ids = (
            list(response.container_responses[0].deviceIDs) if response.container_responses else []
        )
        if len(ids) != needed or not set(ids) <= set(available) or len(set(ids)) != needed:
            log.warning("ignoring preferred allocation %s for %s", ids, ep.resource)
            return None
        return ids

    def release(self, pod_uid: str) -> None:
        keys = [k for k in self.allocations if k[0] == pod_uid]
        for key in keys:
            del self.allocations[key]
        if keys and self.on_allocations is not None:
            self.on_allocations()


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, manager: DeviceManager) -> None:
        self.manager = manager

    async def Register(
        self, request: dp.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> dp.Empty:
        try:
            await self.manager.register(request)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return dp.Empty()
