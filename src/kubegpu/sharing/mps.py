"""MPS: the limits the control daemon sets for each shared resource (pure).

Every replica of a GPU shared through MPS gets an equal share: a pinned device memory limit
of `memory / replicas` (MiB, rounded down) and an active thread percentage of
`100 / replicas` (rounded down). The limits apply per MPS client process, as NVIDIA's
daemon sets them (`set_default_device_pinned_mem_limit`, `set_default_active_thread_percentage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubegpu.sharing.config import PluginConfig
from kubegpu.sharing.devices import Advertised, GpuFacts


@dataclass(frozen=True)
class MpsLimit:
    gpu: int
    uuid: str
    replicas: int
    pinned_memory_mib: int
    active_thread_percentage: int


@dataclass(frozen=True)
class MpsResource:
    """One MPS daemon: a shared resource and the limits on each of its GPUs."""

    resource: str
    limits: tuple[MpsLimit, ...]

    @property
    def active_thread_percentage(self) -> int:
        """The daemon-wide default (the smallest share of its GPUs)."""
        return min(limit.active_thread_percentage for limit in self.limits)


def mps_resources(
    gpus: Sequence[GpuFacts], config: PluginConfig, advertised: Advertised
) -> list[MpsResource]:
    """The MPS daemons this node needs under `config` (none unless the strategy is MPS)."""
    if config.sharing_strategy != "mps":
        return []
    by_index = {g.index: g for g in gpus}
    out = []
    for resource, devices in sorted(advertised.resources.items()):
        limits: dict[int, MpsLimit] = {}
        for d in devices:
            if not d.is_replica or d.mig is not None or d.gpu in limits:
                continue
            g = by_index[d.gpu]
            limits[d.gpu] = MpsLimit(
                gpu=g.index,
                uuid=g.uuid,
                replicas=d.replicas,
                pinned_memory_mib=g.memory_mib // d.replicas,
                active_thread_percentage=100 // d.replicas,
            )
        if limits:
            out.append(MpsResource(resource, tuple(limits[i] for i in sorted(limits))))
    return out
