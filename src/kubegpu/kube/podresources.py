"""The one client of the kubelet's pod-resources API v1: which pod holds which device.

Used by the exporter (pod labels on every scrape, from a thread: a blocking channel kept
open between scrapes) and the MIG manager (which pods hold a GPU about to change). The
kubelet's side, for simulated nodes, is kubegpu.sim.kubelet.podresources.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import grpc

from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
from kubegpu.kube.kubelet import unix_target


class PodResourcesError(RuntimeError):
    """The kubelet's pod-resources API could not be asked."""


@dataclass(frozen=True)
class HeldDevice:
    """One device of one resource held by one container of one pod."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str

    @property
    def pod_ref(self) -> str:
        return f"{self.namespace}/{self.pod}"


@dataclass(frozen=True)
class ClaimDevice:
    """One device of a DRA claim held by one container of one pod (`dynamic_resources`)."""

    namespace: str
    pod: str
    container: str
    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class NodeResources:
    """Everything the containers on the node hold: device-plugin devices and DRA devices."""

    devices: list[HeldDevice]
    claims: list[ClaimDevice]


class PodResourcesClient:
    """A blocking client of `v1.PodResourcesLister/List` on the kubelet's unix socket; the
    channel stays open between calls and is dialled again after a failure.

    `missing_ok`: no socket means no pods hold devices (the exporter on a node without a
    kubelet) rather than an error."""

    def __init__(self, socket: Path, timeout_s: float = 3.0, *, missing_ok: bool = False) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self.missing_ok = missing_ok
        self._channel: grpc.Channel | None = None
        self._stub: pr_grpc.PodResourcesListerSyncStub | None = None

    def available(self) -> bool:
        return self.socket.exists()

    def list(self) -> list[HeldDevice]:
        """Every device every container on the node holds (PodResourcesError otherwise)."""
        return self.list_resources().devices

    def list_resources(self) -> NodeResources:
        """Device-plugin devices and DRA claim devices, from one List call."""
        if self.missing_ok and not self.available():
            return NodeResources([], [])
        if self._stub is None:
            self._channel = grpc.insecure_channel(unix_target(self.socket.absolute()))
            self._stub = pr_grpc.PodResourcesListerSyncStub(self._channel)
        try:
            reply = self._stub.List(pr.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            self.close()  # dial again next time: the kubelet may have restarted
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise PodResourcesError(f"pod-resources API at {self.socket}: {details}") from None
        devices = [
            HeldDevice(pod.namespace, pod.name, c.name, d.resource_name, device_id)
            for pod in reply.pod_resources
            for c in pod.containers
            for d in c.devices
            for device_id in d.device_ids
        ]
        claims = [
            ClaimDevice(
                pod.namespace,
                pod.name,
                c.name,
                dr.claim_name,
                dr.claim_namespace,
                r.driver_name,
                r.pool_name,
                r.device_name,
            )
            for pod in reply.pod_resources
            for c in pod.containers
            for dr in c.dynamic_resources
            for r in dr.claim_resources
        ]
        return NodeResources(devices, claims)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None


async def list_held_devices(socket: Path, timeout_s: float = 5.0) -> list[HeldDevice]:
    """Every device a container on this node holds, asked once (off the event loop)."""
    client = PodResourcesClient(socket, timeout_s)

    def ask() -> list[HeldDevice]:
        try:
            return client.list()
        finally:
            client.close()

    return await asyncio.to_thread(ask)
