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


def _equal_shares(
    device: Device,
    gpu: int,
    uuid: str,
    memory_mib: int,
    multiprocessors: int = 0,
    mig_profile: str | None = None,
) -> MpsLimit:
    """One client's limits: `memory_mib` and 100 % of the threads, split evenly between the
    device's replicas (rounded down)."""
    return MpsLimit(
        gpu=gpu,
        uuid=uuid,
        replicas=device.replicas,
        pinned_memory_mib=memory_mib // device.replicas,
        active_thread_percentage=100 // device.replicas,
        multiprocessors=multiprocessors,
        mig_profile=mig_profile,
    )


def instance_limit(device: Device) -> MpsLimit:
    """The limits of one client of a MIG instance's daemon: equal shares of the instance."""
    mig = device.mig
    if mig is None:
        raise ValueError(f"{device.id} is not a MIG device")
    return _equal_shares(
        device, device.gpu, device.uuid, mig.memory_mib, mig.multiprocessors, mig.profile
    )


def client_limit(device: Device, gpu: GpuFacts) -> MpsLimit:
    """The limits of one client of the daemon serving a replica of `device` on `gpu`: equal
    shares of its MIG instance, or of the whole GPU. The one source of these numbers, for
    the daemon (`mps_resources`), the client's env and the isolation it is said to get."""
    if device.mig is not None:
        return instance_limit(device)
    return _equal_shares(device, gpu.index, gpu.uuid, gpu.memory_mib)


def mps_resources(
    gpus: Sequence[GpuFacts], config: PluginConfig, advertised: Advertised
) -> list[MpsResource]:
    """The MPS daemons this node needs under `config` (none unless the strategy is MPS):
    one per shared resource of whole GPUs, one per MIG instance of a shared MIG resource
    (when the config shares MIG instances at all). The whole GPUs' daemon comes first, then
    the instances' by GPU."""
    if config.sharing_strategy != "mps":
        return []
    by_index = {g.index: g for g in gpus}
    out = []
    for resource, devices in sorted(advertised.resources.items()):
        # the MIG instance a daemon serves (None: the whole GPUs) -> its limit per device
        daemons: dict[str | None, dict[str, MpsLimit]] = {}
        for d in devices:
            if not d.is_replica or (d.mig is not None and not config.mps_on_mig):
                continue
            limits = daemons.setdefault(d.uuid if d.mig is not None else None, {})
            if d.uuid not in limits:
                limits[d.uuid] = client_limit(d, by_index[d.gpu])
        for instance, limits in sorted(daemons.items(), key=_daemon_order):
            ordered = tuple(sorted(limits.values(), key=lambda lim: (lim.gpu, lim.uuid)))
            out.append(MpsResource(resource, ordered, instance=instance))
    return out


def _daemon_order(item: tuple[str | None, dict[str, MpsLimit]]) -> tuple[bool, int, str]:
    instance, limits = item
    return (instance is not None, min(lim.gpu for lim in limits.values()), instance or "")
