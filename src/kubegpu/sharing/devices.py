"""What a node advertises to kubelet: a pure function of its GPUs and the plugin config.

`advertise(gpus, config)` returns, per extended resource name, the devices kubelet will
see: whole GPUs (`nvidia.com/gpu`), MIG devices (`nvidia.com/mig-<profile>` under the
mixed strategy, `nvidia.com/gpu` under single) and time-slicing or MPS replicas
(`<id>::<n>`, optionally under a `.shared` or custom name). The rules and their error
messages follow NVIDIA's device plugin; kubegpu also honours per-resource device
subsets and renames, which upstream parses but ignores, and shares MIG devices through MPS
when the config says `sharing.mps.migInstances: true` (refused otherwise, as upstream).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kubegpu.catalog import nvidia
from kubegpu.sharing.config import (
    MAX_DEVICES_PER_RESOURCE,
    MPS_MAX_CLIENTS_OLDER,
    MPS_MAX_CLIENTS_VOLTA_PLUS,
    MPS_MIG_HINT,
    PluginConfig,
    ReplicatedResource,
    resource_name,
)
from kubegpu.sharing.replicas import is_replica, physical_id, replica_id

__all__ = [
    "GPU_RESOURCE",
    "Advertised",
    "Device",
    "GpuFacts",
    "MigFacts",
    "StrategyError",
    "advertise",
    "check_sharing",
    "mig_resource_name",
    "physical_id",  # owned by sharing.replicas; re-exported for the callers that import it here
]

GPU_RESOURCE = nvidia.GPU_RESOURCE


class StrategyError(ValueError):
    """The node's GPUs cannot be advertised under this config (upstream refuses too)."""


@dataclass(frozen=True)
class MigFacts:
    """One MIG device (GPU instance + compute instance) as NVML reports it."""

    index: int  # MIG device index on its parent
    uuid: str
    profile: str  # "1g.18gb", "1c.3g.20gb"
    gi: int
    ci: int
    full: bool  # compute instance spans the whole GPU instance (C == G)
    memory_mib: int
    multiprocessors: int
    gi_slices: int
    ci_slices: int
    engines: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # copy, decoder, encoder, jpeg, ofa


@dataclass(frozen=True)
class GpuFacts:
    """One physical GPU as the plugin sees it."""

    index: int
    uuid: str
    product: str  # NVML name, e.g. "NVIDIA H200 NVL"
    memory_mib: int
    compute_capability: tuple[int, int]
    mig_capable: bool
    mig_enabled: bool
    mig_devices: tuple[MigFacts, ...] = ()
    numa_node: int | None = None
    nvlink_peers: tuple[int, ...] = ()  # indexes of GPUs joined by NVLink


@dataclass(frozen=True)
class Device:
    """One device kubelet sees under one resource."""

    id: str  # what kubelet allocates: UUID, or UUID::n for a replica
    index: str  # "0" for a GPU, "0:1" for a MIG device
    uuid: str  # the physical GPU or MIG device behind it
    gpu: int  # index of the physical GPU
    mig: MigFacts | None = None
    replicas: int = 1
    numa_node: int | None = None
    healthy: bool = True

    @property
    def is_replica(self) -> bool:
        return is_replica(self.id)


@dataclass
class Advertised:
    """resource name -> devices, plus the strategy facts labels and allocation need."""

    resources: dict[str, list[Device]] = field(default_factory=dict)
    replicas: dict[str, int] = field(default_factory=dict)  # resource -> replicas per device

    def counts(self) -> dict[str, int]:
        return {name: len(devs) for name, devs in sorted(self.resources.items())}


def _gpu_device(g: GpuFacts) -> Device:
    return Device(id=g.uuid, index=str(g.index), uuid=g.uuid, gpu=g.index, numa_node=g.numa_node)


def _mig_device(g: GpuFacts, m: MigFacts) -> Device:
    return Device(
        id=m.uuid,
        index=f"{g.index}:{m.index}",
        uuid=m.uuid,
        gpu=g.index,
        mig=m,
        numa_node=g.numa_node,
    )


def _gpu_resource(config: PluginConfig, g: GpuFacts) -> str:
    for pattern in config.resources.gpus:
        if pattern.matches(g.product):
            return pattern.name
    if config.resources.gpus:
        raise StrategyError(f"GPU name '{g.product}' does not match any resource patterns")
    return GPU_RESOURCE


def mig_resource_name(profile: str) -> str:
    """`1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me` (upstream's mixed-strategy naming)."""
    return resource_name("mig-" + profile.replace("+", "."))


def _mig_resource(config: PluginConfig, m: MigFacts) -> str:
    for pattern in config.resources.mig:
        if pattern.matches(m.profile):
            return pattern.name
    if config.flags.mig_strategy == "single":
        return GPU_RESOURCE
    return mig_resource_name(m.profile)


def _base(gpus: Sequence[GpuFacts], config: PluginConfig) -> dict[str, list[Device]]:
    strategy = config.flags.mig_strategy
    out: dict[str, list[Device]] = {}

    def add(name: str, device: Device) -> None:
        out.setdefault(name, []).append(device)

    enabled = [g for g in gpus if g.mig_enabled]
    if strategy == "single" and enabled:
        if len(enabled) != len(gpus):
            raise StrategyError(
                "all devices on the node must be configured with the same migEnabled value"
            )
        profiles = set()
        for g in gpus:
            if not g.mig_devices:
                raise StrategyError(f"device {g.index} has no MIG devices configured")
            profiles |= {m.profile for m in g.mig_devices}
        if len(profiles) > 1:
            raise StrategyError(
                f"more than one MIG device type present on node: {', '.join(sorted(profiles))}"
            )
        for g in gpus:
            for m in g.mig_devices:
                add(_mig_resource(config, m), _mig_device(g, m))
        return out
    for g in gpus:
        if strategy == "mixed" and g.mig_enabled:
            for m in g.mig_devices:
                if m.full:  # mixed advertises only C == G profiles, as upstream
                    add(_mig_resource(config, m), _mig_device(g, m))
            continue
        add(_gpu_resource(config, g), _gpu_device(g))
    _check_one_kind(out)
    return out


def _check_one_kind(resources: dict[str, list[Device]]) -> None:
    """Refuses a resource whose devices are of more than one kind (whole GPUs, or MIG
    devices of one profile): kubelet treats them as interchangeable. The config loader
    refuses the renames it can see; a wildcard pattern is only judged here, on the node."""
    for name, devices in resources.items():
        kinds = sorted({"whole GPU" if d.mig is None else f"MIG {d.mig.profile}" for d in devices})
        if len(kinds) > 1:
            raise StrategyError(
                f"{name} would advertise {' and '.join(kinds)} devices as one resource; "
                "give each kind of device its own name (resources.gpus, resources.mig)"
            )


def _select(entry: ReplicatedResource, devices: list[Device]) -> list[Device]:
    """The devices of a resource that one sharing entry replicates."""
    if entry.devices == "all":
        return list(devices)
    if isinstance(entry.devices, int):
        if entry.devices > len(devices):
            raise StrategyError(
                f"{entry.name}: requested {entry.devices} devices to be replicated, but only {len(devices)} devices available"
            )
        return devices[: entry.devices]
    chosen: list[Device] = []
    for ref in entry.devices:
        key = str(ref)
        match = [d for d in devices if key in (d.index, d.uuid)]
        if not match:
            raise StrategyError(
                f"{entry.name}: device {ref!r} is not one of this resource's devices on this node"
            )
        chosen += [d for d in match if d not in chosen]
    return chosen


def check_sharing(gpus: Sequence[GpuFacts], config: PluginConfig) -> None:
    """StrategyError when the plugin would refuse the config's sharing section on these GPUs
    (a device it lacks, a clashing rename, too many devices). A MIG strategy the GPUs do not
    fit is not checked here: feature discovery says that with `-MIG-INVALID` labels."""
    try:
        _base(gpus, config)
    except StrategyError:
        return
    advertise(gpus, config)


def advertise(gpus: Sequence[GpuFacts], config: PluginConfig) -> Advertised:
    """Everything the plugin advertises on a node with these GPUs under this config."""
    base = _base(gpus, config)
    result = Advertised(
        resources={k: list(v) for k, v in base.items()}, replicas=dict.fromkeys(base, 1)
    )
    shared = config.replicated
    strategy = config.sharing_strategy
    if shared is None or strategy == "none":
        return result
    plan: list[tuple[ReplicatedResource, list[Device], str]] = []
    for entry in shared.resources:
        devices = base.get(entry.name)
        if not devices:
            continue  # upstream: a sharing entry for a resource this node lacks is ignored
        target = shared.shared_name(entry) or entry.name
        if target != entry.name and target in base:
            raise StrategyError(
                f"{entry.name}: rename {target} is already a resource of this node's devices"
            )
        plan.append((entry, _select(entry, devices), target))
    targets = [t for _, _, t in plan]
    for t in targets:
        if targets.count(t) > 1:
            raise StrategyError(f"more than one sharing entry advertises {t}")
    if strategy == "mps":
        _check_mps(gpus, plan, config)
    _check_sizes(base, plan)
    for entry, selected, target in plan:
        devices = base[entry.name]
        untouched = [d for d in devices if d not in selected]
        replicas = [
            replace(d, id=replica_id(d.id, n), replicas=entry.replicas)
            for d in selected
            for n in range(entry.replicas)
        ]
        if target == entry.name:
            result.resources[entry.name] = untouched + replicas
        else:
            if untouched:
                result.resources[entry.name] = untouched
            else:
                del result.resources[entry.name]
                del result.replicas[entry.name]
            result.resources[target] = replicas
        result.replicas[target] = entry.replicas
    return result


def _check_sizes(
    base: dict[str, list[Device]], plan: list[tuple[ReplicatedResource, list[Device], str]]
) -> None:
    """Refuses, before any device list is built, a resource of more than
    MAX_DEVICES_PER_RESOURCE devices: its ListAndWatch message would near gRPC's 4 MiB."""
    for entry, selected, target in plan:
        kept = len(base[entry.name]) - len(selected) if target == entry.name else 0
        total = kept + len(selected) * entry.replicas
        if total > MAX_DEVICES_PER_RESOURCE:
            raise StrategyError(
                f"{entry.name}: {len(selected)} devices x {entry.replicas} replicas would "
                f"advertise {total} devices as {target}, more than the "
                f"{MAX_DEVICES_PER_RESOURCE} one resource may have (docs/limits.md)"
            )


def _check_mps(
    gpus: Sequence[GpuFacts],
    plan: list[tuple[ReplicatedResource, list[Device], str]],
    config: PluginConfig,
) -> None:
    """Upstream's MPS rules; MIG devices pass only under kubegpu's `migInstances`, each MIG
    device then being one MPS daemon's device with the same client limit as a GPU."""
    by_index = {g.index: g for g in gpus}
    entries = config.sharing.mps.resources if config.sharing.mps is not None else ()
    for entry, selected, _ in plan:
        if any(d.mig is not None for d in selected) and not config.mps_on_mig:
            where = f"sharing.mps.resources.{entries.index(entry)}.name"
            raise StrategyError(
                f"field {where}, value '{entry.name}': sharing using MPS is not supported for "
                f"MIG devices ({MPS_MIG_HINT})"
            )
        for d in selected:
            g = by_index[d.gpu]
            if g.mig_enabled and d.mig is None:
                raise StrategyError(
                    f"{entry.name}: sharing using MPS is not supported on MIG-enabled GPUs "
                    f"(GPU {g.index} has MIG enabled)"
                    + (
                        "; MPS shares MIG instances under migStrategy single or mixed"
                        if config.mps_on_mig
                        else ""
                    )
                )
            limit = (
                MPS_MAX_CLIENTS_VOLTA_PLUS
                if g.compute_capability >= (7, 5)
                else MPS_MAX_CLIENTS_OLDER
            )
            if entry.replicas > limit:
                on = f"MIG device {d.index}" if d.mig is not None else f"GPU {g.index}"
                raise StrategyError(
                    f"invalid MPS configuration: {entry.name}: {entry.replicas} replicas on {on}: "
                    f"maximum allowed replicas exceeded ({limit})"
                )
