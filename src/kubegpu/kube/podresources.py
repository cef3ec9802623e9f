"""A client of the kubelet's pod-resources API v1: which pod holds which device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
from kubegpu.kube.kubelet import unix_target


class PodResourcesError(RuntimeError):
    """The kubelet's pod-resources API could not be asked."""


@dataclass(frozen=True)
class HeldDevices:
    """Devices of one resource held by one container of one pod."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]

    @property
    def pod_ref(self) -> str:
        return f"{self.namespace}/{self.pod}"


async def list_held_devices(socket: Path, timeout_s: float = 5.0) -> list[HeldDevices]:
    """Every device a container on this node holds, as the kubelet reports it."""
    try:
        async with grpc.aio.insecure_channel(unix_target(socket)) as channel:
            stub = pr_grpc.PodResourcesListerStub(channel)
            reply = await stub.List(pr.ListPodResourcesRequest(), timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        raise PodResourcesError(f"pod-resources API at {socket}: {exc.details()}") from None
    out = []
    for pod in reply.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if devices.device_ids:
                    out.append(
                        HeldDevices(
                            pod.namespace,
                            pod.name,
                            container.name,
                            devices.resource_name,
                            tuple(devices.device_ids),
                        )
                    )
    return out
