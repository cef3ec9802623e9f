"""GetPreferredAllocation: which of the available devices a container should get.

Two pure policies, chosen by what the resource holds:

- whole GPUs (`preferred_gpus`): the set that is best connected (NVLink first, then the
  closest PCIe ancestor) while leaving the GPUs that stay free as well connected as
  possible. Pair scores follow the usual GPU-allocator points: cross-CPU 10, same CPU 20,
  host bridge 30, several PCIe switches 40, one switch 50, same board 60, plus 100 per
  NVLink. A set's score is the sum over its pairs; the chosen set maximises its own score
  plus the score of the GPUs left over (equivalently, it cuts the fewest strong links),
  then its own score, then the lowest IDs.
- replicas and MIG devices (`preferred_shared`): a greedy pick by physical GPU load,
  `distributed` (least-used GPU first, the default) or `packed` (most-used first). Ties go
  to the GPU picked least often in this request, so a multi-replica request lands on
  distinct GPUs when it can.

kubelet may ignore a preference; these functions only rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from math import comb
from typing import Literal

from kubegpu.nvml.types import GpuLink, GpuTopology, TopologyLevel
from kubegpu.sharing.devices import Device

Policy = Literal["distributed", "packed"]

LEVEL_POINTS = {
    TopologyLevel.SYSTEM: 10,
    TopologyLevel.NODE: 20,
    TopologyLevel.HOSTBRIDGE: 30,
    TopologyLevel.MULTIPLE: 40,
    TopologyLevel.SINGLE: 50,
    TopologyLevel.INTERNAL: 60,
}
NVLINK_POINTS = 100
MAX_EXACT_SETS = 5000  # above this many candidate sets, grow the set greedily instead


class PreferenceError(ValueError):
    """The request cannot be met from the available devices."""


def link_score(link: GpuLink) -> int:
    return LEVEL_POINTS[link.level] + NVLINK_POINTS * link.nvlinks


PairScores = Mapping[tuple[int, int], int]


def pair_scores(topologies: Iterable[GpuTopology]) -> dict[tuple[int, int], int]:
    """(gpu, gpu) -> score, both orders, from each GPU's links."""
    out: dict[tuple[int, int], int] = {}
    for t in topologies:
        for link in t.links:
            s = link_score(link)
            out[(t.index, link.peer)] = s
            out.setdefault((link.peer, t.index), s)
    return out


def _score(group: Sequence[int], scores: PairScores) -> int:
    return sum(scores.get((a, b), 0) for a, b in combinations(group, 2))


def preferred_gpus(
    gpu_of: Mapping[str, int],
    available: Sequence[str],
    required: Sequence[str],
    size: int,
    scores: PairScores,
) -> list[str]:
    """Whole GPUs: `size` IDs from `available` including `required`; [] when impossible.

    `gpu_of` maps a device ID to its GPU index (the keys of `scores`).
    """
    pool = sorted(dict.fromkeys(a for a in available if a in gpu_of), key=lambda i: gpu_of[i])
    must = list(dict.fromkeys(required))
    if size <= 0 or len(must) > size or any(r not in gpu_of for r in must):
        return []
    pool = [a for a in pool if a not in must]
    need = size - len(must)
    if need > len(pool):
        return []
    if need == 0:
        return must
    everything = [gpu_of[i] for i in must + pool]
    total = _score(everything, scores)
    degree = {
        i: sum(scores.get((gpu_of[i], g), 0) for g in everything if g != gpu_of[i])
        for i in must + pool
    }

    def value(chosen: Sequence[str]) -> tuple[int, int]:
        group = [gpu_of[i] for i in chosen]
        inside = _score(group, scores)
        cut = sum(degree[i] for i in chosen) - 2 * inside
        return total - cut, inside  # (inside + left over, inside)

    if comb(len(pool), need) <= MAX_EXACT_SETS:
        best: tuple[tuple[int, int], list[str]] | None = None
        for extra in combinations(pool, need):  # pool is sorted: first best = lowest IDs
            chosen = must + list(extra)
            v = value(chosen)
            if best is None or v > best[0]:
                best = (v, chosen)
        assert best is not None
        return best[1]
    chosen = list(must)
    rest = list(pool)
    if not chosen:  # seed with the best-connected GPU
        seed = max(rest, key=lambda i: (degree[i], -gpu_of[i]))
        chosen.append(seed)
        rest.remove(seed)
    while len(chosen) < size:
        nxt = max(rest, key=lambda i: (value([*chosen, i]), -gpu_of[i]))
        chosen.append(nxt)
        rest.remove(nxt)
    return chosen


def preferred_shared(
    devices: Sequence[Device],
    available: Sequence[str],
    required: Sequence[str],
    size: int,
    policy: Policy = "distributed",
) -> list[str]:
    """Replicas or MIG devices: `required` plus a greedy pick by physical GPU load.

    `devices` are every device of the resource (to count what each GPU already gave out).
    """
    by_id = {d.id: d for d in devices}
    must = list(dict.fromkeys(required))
    candidates = [a for a in dict.fromkeys(available) if a not in must and a in by_id]
    if size - len(must) > len(candidates):
        raise PreferenceError(
            f"not enough available devices: need {size - len(must)} more, have {len(candidates)}"
        )
    free = set(available) | set(must)
    used: dict[int, int] = {}
    for d in devices:
        if d.id not in free:
            used[d.gpu] = used.get(d.gpu, 0) + 1
    order = {d.id: n for n, d in enumerate(devices)}
    picked_from: dict[int, int] = {}
    for r in must:
        if r in by_id:
            g = by_id[r].gpu
            used[g] = used.get(g, 0) + 1
            picked_from[g] = picked_from.get(g, 0) + 1
    sign = 1 if policy == "distributed" else -1
    out = list(must)
    for _ in range(size - len(must)):
        best = min(
            candidates,
            key=lambda i: (
                sign * used.get(by_id[i].gpu, 0),
                picked_from.get(by_id[i].gpu, 0),
                order[i],
            ),
        )
        candidates.remove(best)
        g = by_id[best].gpu
        used[g] = used.get(g, 0) + 1
        picked_from[g] = picked_from.get(g, 0) + 1
        out.append(best)
    return out


def is_whole_gpu_resource(devices: Sequence[Device]) -> bool:
    """Topology applies when every device is a whole, unreplicated GPU."""
    return all(d.mig is None and not d.is_replica for d in devices)
