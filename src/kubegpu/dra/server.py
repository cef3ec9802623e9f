"""The plugin's two gRPC faces: the plugin-watcher registration socket and the DRA service.

The DRA service is served on the endpoint first, in both versions the kubelet may pick
(`v1.DRAPlugin`, `v1beta1.DRAPlugin`: one wire format, so v1beta1 calls are answered by
re-reading their bytes as v1 messages); the registration socket appears after it, so a
kubelet that finds the socket can dial the endpoint at once. Claim problems are answered
per claim in the response's `error`, never as a failed call: the kubelet shows that text
in the pod's events.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from kubegpu.dra.claims import ClaimRef
from kubegpu.dra.prepare import Outcome, Preparer
from kubegpu.kube.kubelet import DRA_PLUGIN_TYPE, DRA_SUPPORTED_VERSIONS, unix_target
from kubegpu.kube.kubelet import dra_v1_pb2 as dra
from kubegpu.kube.kubelet import dra_v1_pb2_grpc as dra_grpc
from kubegpu.kube.kubelet import dra_v1beta1_pb2 as dra_beta
from kubegpu.kube.kubelet import dra_v1beta1_pb2_grpc as dra_beta_grpc
from kubegpu.kube.kubelet import pluginregistration_v1_pb2 as reg
from kubegpu.kube.kubelet import pluginregistration_v1_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

#: Called with (registered, error) after each NotifyRegistrationStatus.
OnRegistration = Callable[[bool, str], Awaitable[None]]


class Registration(reg_grpc.RegistrationServicer):
    def __init__(self, driver: str, endpoint: Path, on_status: OnRegistration) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.on_status = on_status
        self.registrations = 0  # accepted registrations so far

    async def GetInfo(self, request: reg.InfoRequest, context: Any) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=self.driver,
            endpoint=str(self.endpoint),
            supported_versions=list(DRA_SUPPORTED_VERSIONS),
        )

    async def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: Any
    ) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            self.registrations += 1
            log.info("registered with the kubelet as DRA driver %s", self.driver)
        else:
            log.error("the kubelet refused the registration: %s", request.error)
        await self.on_status(request.plugin_registered, request.error)
        return reg.RegistrationStatusResponse()


def _refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in claims]


def _device(d: Any) -> dra.Device:
    return dra.Device(
        request_names=list(d.request_names),
        pool_name=d.pool,
        device_name=d.device,
        cdi_device_ids=list(d.cdi_ids),
    )


class DraService(dra_grpc.DRAPluginServicer):
    """`v1.DRAPlugin`, answered by the Preparer."""

    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    async def NodePrepareResources(
        self, request: dra.NodePrepareResourcesRequest, context: Any
    ) -> dra.NodePrepareResourcesResponse:
        outcomes = await self.preparer.prepare(_refs(request.claims))
        out = dra.NodePrepareResourcesResponse()
        for uid, o in outcomes.items():
            out.claims[uid].CopyFrom(_prepared(o))
        return out

    async def NodeUnprepareResources(
        self, request: dra.NodeUnprepareResourcesRequest, context: Any
    ) -> dra.NodeUnprepareResourcesResponse:
        outcomes = await self.preparer.unprepare(_refs(request.claims))
        out = dra.NodeUnprepareResourcesResponse()
        for uid, o in outcomes.items():
            out.claims[uid].error = o.error
        return out


def _prepared(o: Outcome) -> dra.NodePrepareResourceResponse:
    if o.error:
        return dra.NodePrepareResourceResponse(error=o.error)
    return dra.NodePrepareResourceResponse(devices=[_device(d) for d in o.devices])


class DraServiceBeta(dra_beta_grpc.DRAPluginServicer):
    """`v1beta1.DRAPlugin`: the same messages on the wire, so the v1 service answers."""

    def __init__(self, v1: DraService) -> None:
        self.v1 = v1

    async def NodePrepareResources(
        self, request: dra_beta.NodePrepareResourcesRequest, context: Any
    ) -> dra_beta.NodePrepareResourcesResponse:
        reply = await self.v1.NodePrepareResources(
            dra.NodePrepareResourcesRequest.FromString(request.SerializeToString()), context
        )
        out = dra_beta.NodePrepareResourcesResponse()
        out.ParseFromString(reply.SerializeToString())
        return out

    async def NodeUnprepareResources(
        self, request: dra_beta.NodeUnprepareResourcesRequest, context: Any
    ) -> dra_beta.NodeUnprepareResourcesResponse:
        reply = await self.v1.NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest.FromString(request.SerializeToString()), context
        )
        out = dra_beta.NodeUnprepareResourcesResponse()
        out.ParseFromString(reply.SerializeToString())
        return out


class Servers:
    """The endpoint server and the registration server, started and stopped together."""

    def __init__(
        self,
        driver: str,
        registration_socket: Path,
        endpoint: Path,
        preparer: Preparer,
        on_status: OnRegistration,
    ) -> None:
        self.registration_socket = registration_socket
        self.endpoint = endpoint
        self.registration = Registration(driver, endpoint, on_status)
        self.service = DraService(preparer)
        self._servers: list[grpc.aio.Server] = []

    async def start(self) -> None:
        await self.stop()
        self.endpoint.parent.mkdir(parents=True, exist_ok=True)
        self.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        self.endpoint.unlink(missing_ok=True)
        endpoint = grpc.aio.server()
        dra_grpc.add_DRAPluginServicer_to_server(self.service, endpoint)
        dra_beta_grpc.add_DRAPluginServicer_to_server(DraServiceBeta(self.service), endpoint)
        endpoint.add_insecure_port(unix_target(self.endpoint))
        await endpoint.start()
        self._servers.append(endpoint)
        self.registration_socket.unlink(missing_ok=True)
        registration = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(self.registration, registration)
        registration.add_insecure_port(unix_target(self.registration_socket))
        await registration.start()
        self._servers.append(registration)

    async def stop(self) -> None:
        """Registration socket first: the kubelet stops dialing before the endpoint goes."""
        servers, self._servers = self._servers, []
        for server in reversed(servers):
            await server.stop(grace=0.5)
        if servers:
            self.registration_socket.unlink(missing_ok=True)
            self.endpoint.unlink(missing_ok=True)
