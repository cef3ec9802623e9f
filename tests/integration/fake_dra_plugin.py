"""A tiny DRA driver's kubelet plugin for testing the simulated kubelet (test code, not the
product): it registers through the plugin watcher, publishes one ResourceSlice on every
registration, and prepares a claim by writing a CDI spec that sets one variable per device."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubegpu.kube.kubelet import (
    DRA_PLUGIN_TYPE,
    DRA_V1_VERSION,
    dra_endpoint,
    dra_registration_socket,
)
from kubegpu.kube.kubelet import dra_v1_pb2 as dra
from kubegpu.kube.kubelet import dra_v1_pb2_grpc as dra_grpc
from kubegpu.kube.kubelet import pluginregistration_v1_pb2 as reg
from kubegpu.kube.kubelet import pluginregistration_v1_pb2_grpc as reg_grpc

ENV = "FAKE_DRA_DEVICE"  # what a prepared device sets in the container


@dataclass
class FakeDraPlugin(reg_grpc.RegistrationServicer, dra_grpc.DRAPluginServicer):
    driver: str
    node: str
    root: Path  # the simulated node's root
    client: AsyncClient
    devices: list[str]
    fail_prepare: str = ""  # non-empty: every prepare fails with this error
    fail_unprepare: str = ""  # non-empty: every unprepare fails with this error
    type: str = DRA_PLUGIN_TYPE
    registrations: list[tuple[bool, str]] = field(default_factory=list)
    prepared: dict[str, list[str]] = field(default_factory=dict)  # claim uid -> devices
    prepare_calls: list[list[str]] = field(default_factory=list)
    unprepare_calls: list[list[str]] = field(default_factory=list)
    _servers: list[grpc.aio.Server] = field(default_factory=list)

    @property
    def registration(self) -> Path:
        return Path(
            dra_registration_socket(self.driver, self.root / "var/lib/kubelet/plugins_registry")
        )

    @property
    def endpoint(self) -> Path:
        return Path(dra_endpoint(self.driver, self.root / "var/lib/kubelet/plugins"))

    @property
    def cdi_root(self) -> Path:
        return self.root / "var/run/cdi"

    def cdi_file(self, claim_uid: str) -> Path:
        return self.cdi_root / f"{self.driver}-claim_{claim_uid}.json"

    async def start(self) -> None:
        """Serve the endpoint first, then the registration socket (the watcher's trigger)."""
        for path, add in (
            (self.endpoint, dra_grpc.add_DRAPluginServicer_to_server),
            (self.registration, reg_grpc.add_RegistrationServicer_to_server),
        ):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            server = grpc.aio.server()
            add(self, server)
            server.add_insecure_port(f"unix://{path}")
            await server.start()
            self._servers.append(server)

    async def stop(self) -> None:
        for server in self._servers:
            await server.stop(grace=None)
        self._servers.clear()
        self.registration.unlink(missing_ok=True)
        self.endpoint.unlink(missing_ok=True)

    # -- registration ---------------------------------------------------------------------
    async def GetInfo(self, request, context):
        # the endpoint as the host sees it: under /var/lib/kubelet of the node
        return reg.PluginInfo(
            type=self.type,
            name=self.driver,
            endpoint=dra_endpoint(self.driver),
            supported_versions=[DRA_V1_VERSION],
        )

    async def NotifyRegistrationStatus(self, request, context):
        self.registrations.append((request.plugin_registered, request.error))
        if request.plugin_registered:
            await self.publish()
        return reg.RegistrationStatusResponse()

    async def publish(self) -> None:
        body = {
            "metadata": {"name": f"{self.node}-{self.driver}"},
            "spec": {
                "driver": self.driver,
                "nodeName": self.node,
                "pool": {"name": self.node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": d} for d in self.devices],
            },
        }
        try:
            await self.client.create(ResourceSlice.from_dict(body))  # type: ignore[call-overload]
        except ApiError as exc:
            if exc.status.code != 409:
                raise

    # -- DRA ------------------------------------------------------------------------------
    async def NodePrepareResources(self, request, context):
        self.prepare_calls.append([c.name for c in request.claims])
        out = {}
        for c in request.claims:
            if self.fail_prepare:
                out[c.uid] = dra.NodePrepareResourceResponse(error=self.fail_prepare)
                continue
            claim: Any = (
                await self.client.get(ResourceClaim, c.name, namespace=c.namespace)
            ).to_dict()
            assert claim["metadata"]["uid"] == c.uid
            results = claim["status"]["allocation"]["devices"]["results"]
            mine = [r for r in results if r["driver"] == self.driver]
            spec = {
                "cdiVersion": "0.6.0",
                "kind": f"{self.driver}/claim",
                "containerEdits": {"env": [f"FAKE_DRA_CLAIM={c.namespace}/{c.name}"]},
                "devices": [
                    {
                        "name": f"{c.uid}-{r['device']}",
                        "containerEdits": {"env": [f"{ENV}={r['device']}"]},
                    }
                    for r in mine
                ],
            }
            self.cdi_root.mkdir(parents=True, exist_ok=True)
            self.cdi_file(c.uid).write_text(json.dumps(spec))
            self.prepared[c.uid] = [r["device"] for r in mine]
            out[c.uid] = dra.NodePrepareResourceResponse(
                devices=[
                    dra.Device(
                        request_names=[r["request"]],
                        pool_name=r["pool"],
                        device_name=r["device"],
                        cdi_device_ids=[f"{self.driver}/claim={c.uid}-{r['device']}"],
                    )
                    for r in mine
                ]
            )
        return dra.NodePrepareResourcesResponse(claims=out)

    async def NodeUnprepareResources(self, request, context):
        self.unprepare_calls.append([c.name for c in request.claims])
        if self.fail_unprepare:
            return dra.NodeUnprepareResourcesResponse(
                claims={
                    c.uid: dra.NodeUnprepareResourceResponse(error=self.fail_unprepare)
                    for c in request.claims
                }
            )
        for c in request.claims:
            self.cdi_file(c.uid).unlink(missing_ok=True)
            self.prepared.pop(c.uid, None)
        return dra.NodeUnprepareResourcesResponse(
            claims={c.uid: dra.NodeUnprepareResourceResponse() for c in request.claims}
        )
