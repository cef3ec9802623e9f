"""A nos-style greedy baseline for the planner (peers-ecosystem.md §1.2).

nos's partitioner works from the pending pods, node by node, first fit. Pods are sorted by
priority, then smaller request first. Each GPU of a node takes, from the model's known
geometries, the one that provides the most of the still-lacking profiles ("largest
coverage"). nos does not choose methods: a pod asks for what it asks for. Here a replica
asks for:

- whole GPUs when it trains, keeps a card busy or spans GPUs;
- a MIG slice (the smallest profile that holds it) when it needs hardware isolation, or
  when it is a notebook (nos has no time-slicing, by design); whole GPUs where the fleet
  has no MIG;
- otherwise an MPS replica.

So that both plans deploy on NVIDIA's device plugin, the baseline keeps the same hardware
rules as the planner:

- MIG only where the planner's rules allow it;
- MPS never on a node with MIG;
- one replica count per MPS node, set by the first pod that opens the node;
- no exclusive GPU on an MPS node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubegpu.catalog import GpuModel
from kubegpu.plan import rules
from kubegpu.plan.inputs import PlanInput, Workload
from kubegpu.plan.provider import GpuProvider, maximal_mixes
from kubegpu.plan.reporter import PlanReporter


@dataclass
class _Gpu:
    model: GpuModel
    mig_ok: bool
    profiles: tuple[str, ...]
    kind: str = "free"  # free | whole | mig | mps
    mig_free: dict[str, int] = field(default_factory=dict)
    mps_free: int = 0
    pods: int = 0


@dataclass
class _Node:
    gpus: list[_Gpu]
    nvlink: bool
    mps_replicas: int = 0  # set when the node becomes an MPS node


def _want(w: Workload, any_mig: bool) -> str:
    if rules.method_rejection(w, "mig") is not None:
        return "whole"
    if w.isolation == "hardware" or w.kind != "inference":
        return "mig" if any_mig else "whole"
    return "mps"


def _smallest_profile(w: Workload, gpu: _Gpu) -> str | None:
    mig = gpu.model.mig
    if mig is None or not gpu.mig_ok:
        return None
    fits = [
        mig.profile(n)
        for n in gpu.profiles
        if rules.profile_rejection(w, gpu.model, mig.profile(n)) is None
    ]
    if not fits:
        return None
    return min(fits, key=lambda p: (p.slices, p.memory_mib, p.name)).name


def _whole(node: _Node, w: Workload) -> bool:
    if node.mps_replicas or (w.gpus > 1 and w.nvlink and not node.nvlink):
        return False
    free = [g for g in node.gpus if g.kind == "free" and rules.whole_rejection(w, g.model) is None]
    if len(free) < w.gpus:
        return False
    for g in free[: w.gpus]:
        g.kind, g.pods = "whole", 1
    return True


def _mig(node: _Node, lacking: list[Workload]) -> list[Workload]:
    """Each free GPU takes the geometry covering most lacking pods; returns those still lacking."""
    if node.mps_replicas:
        return lacking
    for g in node.gpus:
        if not lacking:
            break
        if g.kind == "free" and g.mig_ok:
            wanted = [_smallest_profile(w, g) for w in lacking]
            best: dict[str, int] | None = None
            best_cover = 0
            for mix in maximal_mixes(g.model, frozenset(g.profiles)):
                left = dict(mix)
                cover = 0
                for prof in wanted:
                    if prof is not None and left.get(prof, 0) > 0:
                        left[prof] -= 1
                        cover += 1
                if cover > best_cover:
                    best, best_cover = dict(mix), cover
            if best is not None:
                g.kind, g.mig_free = "mig", best
        if g.kind != "mig":
            continue
        still = []
        for w in lacking:
            prof = _smallest_profile(w, g)
            if prof is not None and g.mig_free.get(prof, 0) > 0:
                g.mig_free[prof] -= 1
                g.pods += 1
            else:
                still.append(w)
        lacking = still
    return lacking


def _mps(node: _Node, pending: list[Workload]) -> list[Workload]:
    """An untouched node (or an MPS one) takes MPS replicas; returns the pods still pending."""
    if any(g.kind in ("whole", "mig") for g in node.gpus):
        return pending
    still = []
    for w in pending:
        if not node.mps_replicas:
            r = min(
                *(rules.replicas_for(w, g.model) for g in node.gpus),
                *(rules.mps_max_clients(g.model) for g in node.gpus),
            )
            if r < 2:
                still.append(w)
                continue
            node.mps_replicas = r
            for g in node.gpus:
                g.kind, g.mps_free = "mps", r
        gpu = next(
            (
                g
                for g in node.gpus
                if g.mps_free > 0 and rules.replicas_for(w, g.model) >= node.mps_replicas
            ),
            None,
        )
        if gpu is None:
            still.append(w)
            continue
        gpu.mps_free -= 1
        gpu.pods += 1
    return still


def nos_plan(inp: PlanInput) -> tuple[int, int, int]:
    """(replicas placed, replicas wanted, GPUs used)."""
    provider = GpuProvider(inp, PlanReporter())
    nodes = [
        _Node(
            [_Gpu(m, n.mig_ok.get(m.id, False), n.profiles.get(m.id, ())) for m in n.models],
            n.nvlink,
        )
        for n in provider.nodes
        if n.server is None  # nos has no buy mode
    ]
    any_mig = any(g.mig_ok for n in nodes for g in n.gpus)
    pods = [w for w in inp.workloads for _ in range(w.replicas)]
    # priority first, then the smaller request first (nos's pod sorter)
    pods.sort(key=lambda w: (-w.priority, w.gpus, w.memory_mib, w.name))
    wanted = len(pods)
    whole = [w for w in pods if _want(w, any_mig) == "whole"]
    mig = [w for w in pods if _want(w, any_mig) == "mig"]
    # MPS: the largest tenants open a node first, so smaller ones fit its replica count
    mps = sorted((w for w in pods if _want(w, any_mig) == "mps"), key=lambda w: -w.memory_mib)
    for node in nodes:  # node by node, as nos does
        whole = [w for w in whole if not _whole(node, w)]
        mig = _mig(node, mig)
        mps = _mps(node, mps)
    placed = wanted - len(whole) - len(mig) - len(mps)
    used = sum(1 for n in nodes for g in n.gpus if g.pods)
    return placed, wanted, used
