"""MPS: the limits the control daemon sets for each shared resource (pure).

Every replica of a GPU shared through MPS gets an equal share: a pinned device memory limit
of `memory / replicas` (MiB, rounded down) and an active thread percentage of
`100 / replicas` (rounded down). The limits apply per MPS client process, as NVIDIA's
daemon sets them (`set_default_device_pinned_mem_limit`, `set_default_active_thread_percentage`).

MIG devices (kubegpu's `sharing.mps.migInstances`) get one daemon per MIG instance, and the
shares are of the instance: its memory and its multiprocessors, never the whole card's. A
fault of one client then reaches the clients of that instance's daemon only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubegpu.sharing.config import PluginConfig
from kubegpu.sharing.devices import Advertised, Device, GpuFacts


@dataclass(frozen=True)
class MpsLimit:
    """What one MPS client may use on one device (a GPU, or a MIG instance)."""

    gpu: int
    uuid: str  # the GPU, or the MIG device for an instance's daemon
    replicas: int
    pinned_memory_mib: int
    active_thread_percentage: int
    multiprocessors: int = 0  # of the device: the instance's SMs for a MIG device
    mig_profile: str | None = None  # set when `uuid` is a MIG device

    @property
    def client_multiprocessors(self) -> int:
        """The SMs one client's thread percentage amounts to on this device (0: unknown)."""
        return self.multiprocessors * self.active_thread_percentage // 100


@dataclass(frozen=True)
class MpsResource:
    """One MPS daemon: a shared resource and the limits on each of its GPUs. A daemon of a
    MIG instance (`instance`, the MIG device UUID) has exactly one limit, the instance's."""

    resource: str
    limits: tuple[MpsLimit, ...]
    instance: str | None = None

    @property
    def key(self) -> str:
        """The daemon's directory under the MPS root: `<resource>` or `<resource>/<MIG-...>`."""
        return self.resource if self.instance is None else f"{self.resource}/{self.instance}"

    @property
    def active_thread_percentage(self) -> int:
        """The daemon-wide default (the smallest share of its GPUs)."""
        return min(limit.active_thread_percentage for limit in self.limits)


def daemon_key(resource: str, device: Device) -> str:
    """The directory, under the MPS root, of the daemon serving a replica of `device`."""
    return f"{resource}/{device.uuid}" if device.mig is not None else resource


def instance_limit(device: Device) -> MpsLimit:
    """The limits of one client of a MIG instance's daemon: equal shares of the instance."""
    mig = device.mig
    if mig is None:
        raise ValueError(f"{device.id} is not a MIG device")
    return MpsLimit(
        gpu=device.gpu,
        uuid=device.uuid,
        replicas=device.replicas,
        pinned_memory_mib=mig.memory_mib // device.replicas,
        active_thread_percentage=100 // device.replicas,
        multiprocessors=mig.multiprocessors,
        mig_profile=mig.profile,
    )


def client_limit(device: Device, gpu: GpuFacts) -> MpsLimit:
    """The limits of one client of the daemon serving a replica of `device` on `gpu`: equal
    shares of its MIG instance, or of the whole GPU. The one source of these numbers, for
    the daemon (`mps_resources`), the client's env and the isolation it is said to get."""
    if device.mig is not None:
        return instance_limit(device)
    return MpsLimit(
        gpu=gpu.index,
        uuid=gpu.uuid,
        replicas=device.replicas,
        pinned_memory_mib=gpu.memory_mib // device.replicas,
        active_thread_percentage=100 // device.replicas,
    )


def mps_resources(
    gpus: Sequence[GpuFacts], config: PluginConfig, advertised: Advertised
) -> list[MpsResource]:
    """The MPS daemons this node needs under `config` (none unless the strategy is MPS):
    one per shared resource of whole GPUs, one per MIG instance of a shared MIG resource."""
    if config.sharing_strategy != "mps":
        return []
    by_index = {g.index: g for g in gpus}
    out = []
    for resource, devices in sorted(advertised.resources.items()):
        limits: dict[int, MpsLimit] = {}
        instances: dict[str, MpsLimit] = {}
        for d in devices:
            if not d.is_replica:
                continue
            if d.mig is not None:
                if config.mps_on_mig and d.uuid not in instances:
                    instances[d.uuid] = instance_limit(d)
                continue
            if d.gpu not in limits:
                limits[d.gpu] = client_limit(d, by_index[d.gpu])
        if limits:
            out.append(MpsResource(resource, tuple(limits[i] for i in sorted(limits))))
        for uuid in sorted(instances, key=lambda u: (instances[u].gpu, u)):
            out.append(MpsResource(resource, (instances[uuid],), instance=uuid))
    return out
