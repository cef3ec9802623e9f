"""DRA attribution (`--kubernetes-enable-dra`): which claim holds each GPU or MIG instance.

The kubelet's pod-resources API lists, per container, the devices of its DRA claims as
(driver, pool, device). Devices of driver `gpu.nvidia.com` are named as its plugin
publishes them: `gpu-<minor>` for a whole GPU and
`gpu-<minor>-mig-<profile>-<GI profile id>-<placement start>` for a MIG device. DCGM
exporter resolves the name through a ResourceSlice informer; kubegpu's exporter resolves it
on the node instead, from NVML (the GPU by its `/dev/nvidia<minor>`, the MIG device by its
parent, GPU-instance profile and placement), so it needs no API access. A MIG claim is
attributed to its own GPU instance's series, not to every instance of the parent GPU.

Each attributed series gets `pod`, `namespace`, `container` and the `dra_*` labels:
claim name and namespace, driver, pool, device, and for MIG devices the profile and the MIG
device's UUID.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubegpu.catalog import nvidia
from kubegpu.exporter.pods import EntityKey, PodInfo
from kubegpu.kube.podresources import ClaimDevice
from kubegpu.nvml import Nvml, NvmlError

log = logging.getLogger(__name__)

_GPU = re.compile(r"gpu-(\d+)")
_MIG = re.compile(r"gpu-(\d+)-mig-[0-9a-z+]+-(\d+)-(\d+)")


@dataclass(frozen=True)
class DeviceName:
    """A parsed device name: the GPU's minor and, for a MIG device, its placement."""

    minor: int
    gi_profile_id: int | None = None
    start: int | None = None


def parse_device_name(name: str) -> DeviceName | None:
    """`gpu-3` -> minor 3; `gpu-0-mig-1g18gb-19-4` -> minor 0, GI profile 19, start 4."""
    if m := _MIG.fullmatch(name):
        return DeviceName(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if m := _GPU.fullmatch(name):
        return DeviceName(int(m.group(1)))
    return None


@dataclass(frozen=True)
class MigTarget:
    gpu_instance_id: int
    profile: str  # e.g. "1g.18gb"
    uuid: str  # "MIG-..."


@dataclass(frozen=True)
class DraIndex:
    """The node's devices as DRA names them: GPU index by minor, MIG devices by placement."""

    index_by_minor: dict[int, int]
    migs: dict[tuple[int, int, int], MigTarget]  # (GPU index, GI profile id, start)

    def resolve(self, name: DeviceName) -> tuple[EntityKey, MigTarget | None] | None:
        index = self.index_by_minor.get(name.minor)
        if index is None:
            return None
        if name.gi_profile_id is None or name.start is None:
            return ("gpu", index), None
        mig = self.migs.get((index, name.gi_profile_id, name.start))
        if mig is None:
            return None
        return ("gi", index, mig.gpu_instance_id), mig


def read_index(nvml: Nvml, indices: Iterable[int]) -> DraIndex:
    """Minor numbers and MIG placements of the given GPUs (a GPU that cannot be asked is
    left out: its claims stay unattributed)."""
    by_minor: dict[int, int] = {}
    migs: dict[tuple[int, int, int], MigTarget] = {}
    for index in indices:
        try:
            by_minor[nvml.topology(index).minor_number] = index
        except NvmlError:
            by_minor.setdefault(index, index)  # no topology: /dev/nvidia<index>
        try:
            devices = nvml.mig_devices(index)
        except NvmlError as exc:
            log.debug("GPU %d: no MIG devices read: %s", index, exc)
            continue
        for m in devices:
            migs.setdefault(
                (index, m.gi_profile_id, m.placement.start),
                MigTarget(m.gpu_instance_id, m.profile, m.uuid),
            )
    return DraIndex(by_minor, migs)


def attribute_claims(
    claims: Sequence[ClaimDevice],
    index: DraIndex,
    entities: frozenset[EntityKey],
    driver: str = nvidia.DRA_DRIVER,
) -> dict[EntityKey, list[PodInfo]]:
    """Pods per entity for the claim devices of `driver`: every container holding a
    device gets its own copy of the series (a claim may be shared by several)."""
    out: dict[EntityKey, list[PodInfo]] = {}
    for c in claims:
        if c.driver != driver:
            continue
        name = parse_device_name(c.device)
        found = index.resolve(name) if name is not None else None
        if found is None or found[0] not in entities:
            continue
        key, mig = found
        labels = [
            ("dra_claim_name", c.claim_name),
            ("dra_claim_namespace", c.claim_namespace),
            ("dra_driver_name", c.driver),
            ("dra_pool_name", c.pool),
            ("dra_device_name", c.device),
        ]
        if mig is not None:
            labels += [("dra_mig_profile", mig.profile), ("dra_mig_device_uuid", mig.uuid)]
        info = PodInfo(c.pod, c.namespace, c.container, labels=tuple(labels))
        if info not in out.setdefault(key, []):
            out[key].append(info)
    return out


def merge(
    a: dict[EntityKey, list[PodInfo]], b: dict[EntityKey, list[PodInfo]]
) -> dict[EntityKey, list[PodInfo]]:
    out = {k: list(v) for k, v in a.items()}
    for key, pods in b.items():
        out.setdefault(key, []).extend(p for p in pods if p not in out[key])
    return out
