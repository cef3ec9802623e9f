"""Pod attribution: which pod, namespace and container hold each GPU or MIG instance.

On every scrape the exporter asks the kubelet's pod-resources API (v1 List) and maps the
device IDs of NVIDIA resources onto its series, as DCGM exporter does:

- `GPU-<uuid>` -> that GPU; `MIG-<uuid>` -> the GPU instance holding that MIG device;
- `<id>::<n>` (time-slicing / MPS replicas) -> `<id>`, replica `n`;
- `MIG-GPU-<uuid>/<gi>/<ci>` (the legacy MIG form) and GKE's `nvidia<i>[/gi<g>][/vgpu<n>]`.

Without virtual-GPU mode one device maps to one pod, the last one listed (DCGM exporter's
behaviour). With it, every pod sharing a device gets its own copy of the series, labelled
with the replica (`vgpu`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from kubegpu.catalog import nvidia
from kubegpu.kube.podresources import HeldDevice, PodResourcesClient, PodResourcesError
from kubegpu.sharing.replicas import split_replica

log = logging.getLogger(__name__)

__all__ = ["HeldDevice", "PodResourcesClient", "PodResourcesError", "attribute", "resolve"]

GPU_RESOURCE = nvidia.GPU_RESOURCE
SHARED_RESOURCE = nvidia.GPU_SHARED_RESOURCE
MIG_RESOURCE_PREFIX = nvidia.MIG_RESOURCE_PREFIX
_LEGACY_MIG = re.compile(r"MIG-(GPU-[^/]+)/(\d+)/(\d+)")
_GKE = re.compile(r"nvidia(\d+)(?:/gi(\d+))?(?:/vgpu(\d+))?")

# A series' entity: ("gpu", index) for a whole GPU, ("gi", index, gpu-instance id) for a
# MIG GPU instance
EntityKey = tuple[str, int] | tuple[str, int, int]


@dataclass(frozen=True)
class PodInfo:
    pod: str
    namespace: str
    container: str
    vgpu: str | None = None  # the replica number of a shared device
    labels: tuple[tuple[str, str], ...] = ()  # more labels, e.g. a DRA claim's (exporter.dra)


@dataclass(frozen=True)
class DeviceIndex:
    """What the scrape knows about the node's devices, for resolving device IDs."""

    gpu_by_uuid: dict[str, int]  # GPU UUID -> index
    gi_by_mig_uuid: dict[str, tuple[int, int]]  # MIG device UUID -> (GPU index, GI id)
    entities: frozenset[EntityKey]  # the series the scrape will emit


def resolve(device_id: str, devices: DeviceIndex) -> tuple[EntityKey, str | None] | None:
    """The entity a kubelet device ID stands for, and its replica number; None if unknown."""
    base, vgpu = split_replica(device_id)
    key: EntityKey | None = None
    if base in devices.gi_by_mig_uuid:
        index, gi = devices.gi_by_mig_uuid[base]
        key = ("gi", index, gi)
    elif base in devices.gpu_by_uuid:
        key = ("gpu", devices.gpu_by_uuid[base])
    elif m := _LEGACY_MIG.fullmatch(base):
        if m.group(1) in devices.gpu_by_uuid:
            key = ("gi", devices.gpu_by_uuid[m.group(1)], int(m.group(2)))
    elif m := _GKE.fullmatch(base):
        index = int(m.group(1))
        key = ("gi", index, int(m.group(2))) if m.group(2) else ("gpu", index)
        vgpu = m.group(3) or vgpu
    if key is None or key not in devices.entities:
        return None
    return key, vgpu


def is_gpu_resource(resource: str, extra: Iterable[str] = ()) -> bool:
    return (
        resource in (GPU_RESOURCE, SHARED_RESOURCE)
        or resource.startswith(MIG_RESOURCE_PREFIX)
        or resource in extra
    )


def attribute(
    held: list[HeldDevice],
    devices: DeviceIndex,
    *,
    virtual_gpus: bool = False,
    resource_names: Iterable[str] = (),
) -> dict[EntityKey, list[PodInfo]]:
    """Pods per entity: the last holder of each device, or every holder in virtual-GPU mode."""
    extra = frozenset(resource_names)
    out: dict[EntityKey, list[PodInfo]] = {}
    for h in held:
        if not is_gpu_resource(h.resource, extra):
            continue
        found = resolve(h.device_id, devices)
        if found is None:
            continue
        key, vgpu = found
        info = PodInfo(h.pod, h.namespace, h.container, vgpu if virtual_gpus else None)
        if virtual_gpus:
            if info not in out.setdefault(key, []):
                out[key].append(info)
        else:
            out[key] = [info]
    return out
