"""Dynamic MIG: every MIG placement of a GPU as a partitionable device (pure).

Behind the `DynamicMIG` gate (KEP-4815 partitionable devices; reference/dcgm-dra.md
sections 2.3 and 2.5). A MIG-enabled GPU publishes one counter set,
`gpu-<minor>-counter-set`, holding what the GPU has: multiprocessors, copy engines,
decoders, encoders, JPEG and OFA engines, memory, and one `memory-slice-<i>` per memory
slice. Every placement of every GPU-instance profile is a device
`gpu-<minor>-mig-<profile>-<GI profile id>-<start>` that consumes its profile's share of
those counters and its own memory slices, so the scheduler never allocates two devices
that overlap or together exceed an engine budget. The device does not exist until a claim
is prepared: it has no `uuid` attribute.

MIG devices that exist but were not created for a claim (a layout applied by the MIG
manager) stay static devices without counters; the placements they overlap are not
published and what they use is taken off the counter set.

The layout is Kubernetes 1.35's: one slice with only the counter sets (up to 8 per slice),
then one slice of devices per GPU; whole GPUs without MIG and static MIG devices share a
last slice.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.dra.slices import (
    MAX_DEVICES_PER_SLICE,
    DraDevice,
    DraGpu,
    GiProfile,
    MigEngines,
    NodeGpus,
    common_attributes,
    gpu_device,
    mib,
    mig_device,
    mig_device_name,
    pool_slices,
)

Json = dict[str, Any]

MAX_COUNTER_SETS_PER_SLICE = 8
MAX_DEVICES_WITH_COUNTERS = 64

#: (GPU index, GI profile id, placement start) of a dynamic MIG device that exists.
Placement = tuple[int, int, int]


@dataclass(frozen=True)
class CounterSet:
    name: str
    counters: tuple[tuple[str, str], ...]

    def to_json(self) -> Json:
        return {"name": self.name, "counters": {k: {"value": v} for k, v in self.counters}}


@dataclass(frozen=True)
class Pool:
    """What one node publishes: devices, and with dynamic MIG the counter sets and which
    devices go into which slice."""

    devices: tuple[DraDevice, ...]
    counter_sets: tuple[CounterSet, ...] = ()
    groups: tuple[tuple[DraDevice, ...], ...] = ()  # one devices slice each (dynamic MIG)


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def _usage(
    multiprocessors: int, engines: MigEngines, memory_mib: int, slices: range
) -> dict[str, int]:
    return {
        "multiprocessors": multiprocessors,
        "copy-engines": engines.copy,
        "decoders": engines.decoders,
        "encoders": engines.encoders,
        "jpeg-engines": engines.jpeg,
        "ofa-engines": engines.ofa,
        "memory": memory_mib,
        **{f"memory-slice-{i}": 1 for i in slices},
    }


def _value(name: str, amount: int) -> str:
    return mib(amount) if name == "memory" else str(amount)


def _total_slices(profiles: Sequence[GiProfile]) -> int:
    return max((s + n for p in profiles for s, n in p.placements), default=0)


def counter_set(gpu: DraGpu, static_used: Sequence[dict[str, int]] = ()) -> CounterSet:
    """What the GPU has (the largest of each dimension over its profiles: the whole-GPU
    profile), less what static MIG devices use."""
    p = gpu.gi_profiles
    total = _usage(
        max((x.multiprocessors for x in p), default=0),
        MigEngines(
            copy=max((x.engines.copy for x in p), default=0),
            decoders=max((x.engines.decoders for x in p), default=0),
            encoders=max((x.engines.encoders for x in p), default=0),
            jpeg=max((x.engines.jpeg for x in p), default=0),
            ofa=max((x.engines.ofa for x in p), default=0),
        ),
        max((x.memory_mib for x in p), default=0),
        range(_total_slices(p)),
    )
    for used in static_used:
        for k, v in used.items():
            total[k] = max(0, total[k] - v)
    return CounterSet(
        counter_set_name(gpu.minor), tuple((k, _value(k, v)) for k, v in total.items())
    )


def dynamic_device(
    node: NodeGpus, gpu: DraGpu, profile: GiProfile, start: int, size: int
) -> DraDevice:
    slices = range(start, start + size)
    e = profile.engines
    usage = _usage(profile.multiprocessors, e, profile.memory_mib, slices)
    return DraDevice(
        name=mig_device_name(gpu.minor, profile.name, profile.id, start),
        kind="mig",
        uuid="",
        gpu_index=gpu.index,
        gpu_minor=gpu.minor,
        gpu_uuid=gpu.uuid,
        memory_mib=profile.memory_mib,
        profile=profile.name,
        attributes=(
            ("type", {"string": "mig"}),
            ("parentUUID", {"string": gpu.uuid}),
            ("profile", {"string": profile.name}),
            *common_attributes(node, gpu),
        ),
        capacity=(
            ("multiprocessors", str(profile.multiprocessors)),
            ("copyEngines", str(e.copy)),
            ("decoders", str(e.decoders)),
            ("encoders", str(e.encoders)),
            ("jpegEngines", str(e.jpeg)),
            ("ofaEngines", str(e.ofa)),
            ("memory", mib(profile.memory_mib)),
            *((f"memorySlice{i}", "1") for i in slices),
        ),
        dynamic=True,
        gi_profile_id=profile.id,
        start=start,
        counter_set=counter_set_name(gpu.minor),
        counters=tuple((k, _value(k, v)) for k, v in usage.items()),
    )


def partitioned_pool(node: NodeGpus, created: Collection[Placement]) -> Pool:
    """The node's pool with dynamic MIG. `created`: the placements the plugin created for
    claims (they are dynamic devices, not static ones)."""
    sets: list[CounterSet] = []
    groups: list[tuple[DraDevice, ...]] = []
    plain: list[DraDevice] = []
    for gpu in sorted(node.gpus, key=lambda g: g.minor):
        if not gpu.mig_enabled or not gpu.gi_profiles:
            plain.append(gpu_device(node, gpu))
            continue
        static = [m for m in gpu.migs if (gpu.index, m.gi_profile_id, m.start) not in created]
        taken = {i for m in static for i in range(m.start, m.start + m.size)}
        seen: set[str] = set()
        for m in sorted(static, key=lambda m: (m.start, m.gi_profile_id, m.uuid)):
            dev = mig_device(node, gpu, m)
            if dev.name not in seen:
                seen.add(dev.name)
                plain.append(dev)
        used = []
        for gi in {(m.gi_profile_id, m.start): m for m in static}.values():
            used.append(
                _usage(
                    gi.multiprocessors,
                    gi.engines,
                    gi.memory_mib,
                    range(gi.start, gi.start + gi.size),
                )
            )
        sets.append(counter_set(gpu, used))
        group = tuple(
            dynamic_device(node, gpu, p, start, size)
            for p in gpu.gi_profiles
            for start, size in p.placements
            if not taken & set(range(start, start + size))
        )
        groups.append(group)
    every = tuple(d for g in groups for d in g) + tuple(plain)
    if plain:
        groups.append(tuple(plain))
    return Pool(every, tuple(sets), tuple(groups))


def partitioned_slices(
    node_name: str,
    pool: Pool,
    generation: int,
    owner: Json | None = None,
    driver: str = nvidia.DRA_DRIVER,
) -> list[Json]:
    """Kubernetes 1.35's layout: counter-set slices first, then one devices slice per group
    (a group larger than a slice may hold is split)."""
    specs: list[Json] = []
    sets = list(pool.counter_sets)
    for i in range(0, len(sets), MAX_COUNTER_SETS_PER_SLICE):
        specs.append(
            {"sharedCounters": [c.to_json() for c in sets[i : i + MAX_COUNTER_SETS_PER_SLICE]]}
        )
    for group in pool.groups:
        limit = (
            MAX_DEVICES_WITH_COUNTERS
            if any(d.counter_set for d in group)
            else MAX_DEVICES_PER_SLICE
        )
        for i in range(0, len(group), limit):
            specs.append({"devices": [d.to_json() for d in group[i : i + limit]]})
    return pool_slices(node_name, specs, generation, owner, driver)
