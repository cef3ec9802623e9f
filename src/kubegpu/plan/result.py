"""The plan in GPU terms: per workload what to request and where it lands; per node the MIG
strategy, per-GPU layouts, device-plugin sharing and labels."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from kubegpu.catalog import GpuModel, get_model
from kubegpu.mig.geometry import Layout, place
from kubegpu.plan import rules
from kubegpu.plan.core import Placement, Problem, Solution
from kubegpu.plan.inputs import Workload
from kubegpu.plan.provider import GpuProvider, Node, parse_mix_key, slot_model, split_option
from kubegpu.plan.reporter import PlanReporter
from kubegpu.sharing.devices import GPU_RESOURCE, mig_resource_name

SHARED_RESOURCE = GPU_RESOURCE + ".shared"
MPS_ROOT = "/run/nvidia/mps"

Role = Literal["whole", "mig", "shared", "idle", "busy"]


@dataclass
class GpuPlan:
    index: int
    model: str
    role: Role
    mig: dict[str, int] = field(default_factory=dict)  # profile -> instances (role mig)
    layout: tuple[str, ...] = ()  # "1g.18gb@0:1" placements
    replicas: int = 0  # role shared
    changed: bool = False

    @property
    def mig_enabled(self) -> bool:
        return self.role == "mig"


@dataclass
class NodePlan:
    name: str
    gpus: list[GpuPlan]
    mig_strategy: Literal["none", "single", "mixed"] = "none"
    sharing: Literal["none", "time-slicing", "mps"] = "none"
    replicas: int = 0
    mig_capable: bool = False
    bought: str | None = None  # server type, in buy mode
    cost: float = 0.0
    workloads: dict[str, int] = field(default_factory=dict)  # workload -> replicas here
    device_plugin_config: str = ""
    mig_config: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    prerequisites: list[str] = field(default_factory=list)
    # models whose full GPUs the device plugin advertises under their own resource name
    # (`nvidia.com/gpu-<model>`): every model of a node with several, so that a pod lands
    # on the model it was planned for
    renamed: list[str] = field(default_factory=list)

    @property
    def used(self) -> bool:
        return any(g.role not in ("idle",) for g in self.gpus)

    def models(self) -> str:
        c = Counter(g.model for g in self.gpus)
        return ",".join(f"{m}:{n}" for m, n in c.items())


@dataclass
class WorkloadPlan:
    name: str
    replicas: int
    method: str | None  # whole | mig | mps | time-slicing
    profile: str | None = None
    resources: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    left: int = 0
    left_reason: str = ""
    models: list[str] = field(default_factory=list)  # models of the full GPUs it sits on
    suggestions: list[str] = field(default_factory=list)

    @property
    def placed(self) -> int:
        return sum(self.nodes.values())


@dataclass
class Plan:
    workloads: list[WorkloadPlan]
    nodes: list[NodePlan]
    solver: str
    objective: float
    bound: float | None
    optimal: bool
    note: str
    reporter: PlanReporter
    warnings: list[str] = field(default_factory=list)
    # workloads whose full-GPU replicas sit on several models where names are per model:
    # one resource name cannot hold them (make_plan plans again with them on one model)
    split: list[str] = field(default_factory=list)
    gpus_used: int = 0
    cost: float = 0.0  # buy mode: what the bought servers and cards cost

    @property
    def complete(self) -> bool:
        return all(w.left == 0 for w in self.workloads)

    def node(self, name: str) -> NodePlan:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def workload(self, name: str) -> WorkloadPlan:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)


def _layout_text(layout: Layout) -> tuple[str, ...]:
    return tuple(str(pi) for pi in sorted(layout, key=lambda pi: pi.start))


def _gpu_plans(
    provider: GpuProvider, node: Node, patterns: dict[str, dict[str, int]]
) -> list[GpuPlan]:
    out: dict[int, GpuPlan] = {}
    cur = node.current.gpus if node.current else {}
    for g in node.groups:
        counts = patterns.get(g.key, {})
        order = sorted(counts.items())
        queue = [k for k, n in order for _ in range(n)]
        for idx in g.indexes:
            state = cur.get(idx)
            current_mix = {k: v for k, v in (state.mig or {}).items() if v} if state else {}
            if not queue:
                if state is not None and state.busy == "whole":
                    out[idx] = GpuPlan(idx, g.model.id, "busy")
                elif current_mix:
                    layout = place(g.model, current_mix)
                    assert layout is not None
                    out[idx] = GpuPlan(
                        idx, g.model.id, "mig", dict(current_mix), _layout_text(layout)
                    )
                else:
                    out[idx] = GpuPlan(idx, g.model.id, "idle")
                continue
            key = queue.pop(0)
            out[idx] = _gpu_for(provider, g.model, idx, key, current_mix, node.facts.driver)
    return [out[i] for i in sorted(out)]


@cache
def _placed(model: GpuModel, key: str, driver: str | None) -> Layout | None:
    """GPUs of one model with one mix under one driver are placed alike: placed once."""
    return place(model, parse_mix_key(key), driver=driver)


def _gpu_for(
    provider: GpuProvider,
    model: GpuModel,
    idx: int,
    key: str,
    current: dict[str, int],
    driver: str | None = None,
) -> GpuPlan:
    if key == "whole":
        return GpuPlan(idx, model.id, "whole", changed=bool(current))
    if key == "busy":
        return GpuPlan(idx, model.id, "busy")
    if key.startswith(("ts:", "mps:")):
        return GpuPlan(
            idx, model.id, "shared", replicas=int(key.split(":")[1]), changed=bool(current)
        )
    kept = provider.layouts.get((model.id, key))
    if key.startswith("keep:"):
        assert kept is not None
        mix = dict(Counter(pi.profile.name for pi in kept))
        return GpuPlan(idx, model.id, "mig", mix, _layout_text(kept))
    mix = parse_mix_key(key)
    layout = kept or _placed(model, key, driver)
    assert layout is not None, f"{model.id}: {key} is not placeable"
    return GpuPlan(idx, model.id, "mig", mix, _layout_text(layout), changed=mix != current)


def build_plan(
    provider: GpuProvider, problem: Problem, sol: Solution, reporter: PlanReporter
) -> Plan:
    inp = provider.inp
    nodes: list[NodePlan] = []
    for node, bin_plan in zip(provider.nodes, sol.bins, strict=True):
        gpus = _gpu_plans(provider, node, bin_plan.patterns)
        np_ = NodePlan(node.name, gpus, mig_capable=any(m.mig is not None for m in node.models))
        shared = [g for g in gpus if g.role == "shared"]
        kept = node.current is not None and node.current.sharing != "none"
        if shared or (kept and bin_plan.mode != "none"):
            kind, _, r = bin_plan.mode.partition(":")
            np_.sharing = "mps" if kind == "mps" else "time-slicing"
            np_.replicas = int(r)
        if node.server is not None:
            np_.bought = node.server.name
            if np_.used:
                used_cards = sum(1 for g in gpus if g.role != "idle")
                np_.cost = node.server.server_price + used_cards * node.server.card_price
                # cards not needed are not bought
                np_.gpus = [g for g in gpus if g.role != "idle"]
        nodes.append(np_)

    workloads: list[WorkloadPlan] = []
    unplaced = sol.unplaced(problem)
    by_name = {x.name: x for x in nodes}
    by_demand: dict[int, list[Placement]] = {}
    for pl in sol.placements:
        by_demand.setdefault(pl.demand, []).append(pl)
    for d, dem in enumerate(problem.demands):
        w = provider.workloads[dem.key]
        o = sol.chosen[d]
        option = dem.options[o] if o is not None else None
        method = None if option is None else ("mig" if option.startswith("mig:") else option)
        if method is not None:
            method = split_option(method)[0]  # `whole@l4`: whole GPUs, held to the L4s
        wp = WorkloadPlan(w.name, w.replicas, method)
        if option is not None and option.startswith("mig:"):
            wp.profile = option[4:]
        for pl in by_demand.get(d, ()):
            name = problem.bins[pl.bin].key
            wp.nodes[name] = wp.nodes.get(name, 0) + pl.count
        wp.left = unplaced[d]
        workloads.append(wp)
        for name, n in wp.nodes.items():
            by_name[name].workloads[w.name] = n

    _strategies(nodes, workloads, inp.options.mig_strategy, reporter)
    models_of = _models_used(problem, sol)
    plan_warnings: list[str] = []
    split = _rename(nodes, workloads, models_of, provider.workloads) or []
    for name in split:
        plan_warnings.append(
            f"{name}: its replicas sit on GPUs of several models and a node with several "
            "models names each model's GPUs apart; its pods request one name, so the plan "
            "cannot hold them there"
        )
    for wp in workloads:
        w = provider.workloads[wp.name]
        wp.models = sorted({m for _node, m in models_of.get(wp.name, ())})
        used = sorted({m for node, m in models_of.get(wp.name, ()) if m in by_name[node].renamed})
        if wp.method == "whole":
            wp.resources = {model_resource(used[0]) if used else GPU_RESOURCE: w.gpus}
        elif wp.method == "mig" and wp.profile is not None:
            single = wp.nodes and all(by_name[n].mig_strategy == "single" for n in wp.nodes)
            wp.resources = {GPU_RESOURCE if single else mig_resource_name(wp.profile): 1}
        elif wp.method in ("mps", "time-slicing"):
            wp.resources = {shared_resource(used[0] if used else None): 1}

    # buy mode: unused candidate servers are not part of the plan
    nodes = [n for n in nodes if n.bought is None or n.used]
    plan = Plan(
        workloads,
        nodes,
        sol.solver,
        sol.objective,
        sol.bound,
        sol.optimal,
        sol.note,
        reporter,
    )
    plan.warnings += plan_warnings
    plan.split = split
    plan.gpus_used = sum(1 for n in nodes for g in n.gpus if g.role != "idle")
    plan.cost = sum(n.cost for n in nodes)
    _prerequisites(provider, plan, reporter)
    return plan


def model_resource(model: str) -> str:
    """The resource a model's full GPUs are advertised under where they are renamed."""
    return f"{GPU_RESOURCE}-{model}"


def shared_resource(model: str | None) -> str:
    """Shared replicas' resource: `nvidia.com/gpu.shared`, or per model where renamed."""
    return SHARED_RESOURCE if model is None else model_resource(model) + ".shared"


def _models_used(problem: Problem, sol: Solution) -> dict[str, set[tuple[str, str]]]:
    """Per workload, the (node, model) pairs whose full GPUs (whole or shared) it sits on."""
    out: dict[str, set[tuple[str, str]]] = {}
    for pl in sol.placements:
        model = slot_model(pl.slot)
        if model is None:
            continue
        key = problem.demands[pl.demand].key
        out.setdefault(key, set()).add((problem.bins[pl.bin].key, model))
    return out


def _rename(
    nodes: list[NodePlan],
    workloads: list[WorkloadPlan],
    models_of: dict[str, set[tuple[str, str]]],
    specs: dict[str, Workload],
) -> list[str]:
    """Per-model resource names on nodes with several models (unless any of its full GPUs
    holds any of the node's workloads alike); a workload that requests one of them requests
    it everywhere it lands, so the nodes it shares get it too. Returns the workloads that
    sit on several models under such names (one name cannot hold them)."""
    by_name = {n.name: n for n in nodes}
    wp_by = {w.name: w for w in workloads}
    renamed: dict[str, set[str]] = {}
    for n in nodes:
        models = {g.model for g in n.gpus if g.role != "mig"}
        if len({g.model for g in n.gpus}) > 1 and not _alike(n, wp_by, specs):
            renamed[n.name] = models
    changed = True
    while changed:
        changed = False
        for w in workloads:
            pairs = models_of.get(w.name, set())
            if any(m in renamed.get(node, ()) for node, m in pairs):
                for node, m in pairs:
                    if m not in renamed.setdefault(node, set()):
                        renamed[node].add(m)
                        changed = True
    for name, models in renamed.items():
        by_name[name].renamed = sorted(models)
    split = []
    for w in workloads:
        models = {m for _node, m in models_of.get(w.name, ())}
        if len(models) > 1 and any(renamed.get(node) for node, _m in models_of.get(w.name, ())):
            split.append(w.name)
    return split


def _alike(n: NodePlan, workloads: dict[str, WorkloadPlan], specs: dict[str, Workload]) -> bool:
    """Whether every full GPU of a node with several models holds every workload that
    takes full GPUs (whole or shared) there: then one resource name cannot mislead the
    scheduler, and the node keeps `nvidia.com/gpu`."""
    models = {get_model(g.model) for g in n.gpus if g.role != "mig"}
    for name in n.workloads:
        wp, w = workloads[name], specs[name]
        if wp.method == "whole":
            if w.gpus > 1 or any(rules.whole_rejection(w, m) for m in models):
                return False
        elif wp.method in ("mps", "time-slicing"):
            for m in models:
                most = rules.replicas_for(w, m)
                if wp.method == "mps":
                    most = min(most, rules.mps_max_clients(m))
                if n.replicas > most:
                    return False
    return True


def _strategies(
    nodes: list[NodePlan], workloads: list[WorkloadPlan], option: str, reporter: PlanReporter
) -> None:
    """Single where every GPU of a node has the one same profile (and the resource name stays
    one per workload); mixed where a node has MIG otherwise; none without MIG."""
    single: set[str] = set()
    for n in nodes:
        mig = [g for g in n.gpus if g.mig_enabled]
        if not mig:
            n.mig_strategy = "none"
            continue
        n.mig_strategy = "mixed"
        profiles = {p for g in mig for p, k in g.mig.items() if k}
        if (
            option == "auto"
            and len(mig) == len(n.gpus)
            and len(profiles) == 1
            and n.sharing == "none"
        ):
            single.add(n.name)
    changed = True
    while changed:
        changed = False
        for w in workloads:
            if w.method != "mig" or not w.nodes:
                continue
            on = [x for x in w.nodes if x in single]
            if on and len(on) != len(w.nodes):
                for x in on:
                    single.discard(x)
                    reporter.note(
                        f"node {x}", "mig-single",
                        f"mixed, not single: {w.name} also lands on nodes that need mixed, and its pods request one resource name",
                    )  # fmt: skip
                changed = True
    for n in nodes:
        if n.name in single:
            n.mig_strategy = "single"
            reporter.note(
                f"node {n.name}",
                "mig-single",
                "single MIG strategy: every GPU has the same one profile",
            )
        elif n.mig_strategy == "mixed":
            reporter.note(
                f"node {n.name}",
                "mig-single",
                "mixed MIG strategy: its GPUs do not all have one same profile",
            )


def _prerequisites(provider: GpuProvider, plan: Plan, reporter: PlanReporter) -> None:
    warned: set[str] = set()
    for n in plan.nodes:
        node = provider.node(n.name)
        models = {g.model for g in n.gpus if g.mig_enabled}
        changed = [g for g in n.gpus if g.mig_enabled and g.changed]
        for mid in sorted(models):
            model = next(m for m in node.models if m.id == mid)
            assert model.mig is not None
            mig = model.mig
            subject = f"node {n.name}"
            if node.facts.driver is None:
                text = f"MIG on {mid} needs NVIDIA driver {mig.min_driver} or newer"
                n.prerequisites.append(text)
                reporter.note(subject, "mig-driver", text)
            if mig.display_mode_compute_required and node.facts.display != "compute":
                text = (
                    f"switch the {mid} GPUs to compute display mode before MIG is enabled: "
                    "DisplayModeSelector --gpumode=compute --gpu=<id> (DisplayModeSelector >= 1.72.0), then reboot"
                )
                n.prerequisites.append(text)
                reporter.note(subject, "mig-display", text)
            if mig.mode_change_needs_reset and changed:
                text = f"enabling MIG on {mid} takes a GPU reset (the MIG manager resets or reboots; drain the node first)"
                n.prerequisites.append(text)
                reporter.note(subject, "mig-reset", text)
            if rules.mig_unconfirmed(model):
                text = f"MIG on {mid} is planned with unconfirmed geometry ({', '.join(rules.mig_unconfirmed(model))})"
                n.prerequisites.append(text)
                reporter.note(subject, "mig-unconfirmed", text)
            used_profiles = {p for g in n.gpus if g.model == mid for p in g.mig}
            facts = []
            for pname in sorted(used_profiles):
                p = mig.profile(pname)
                unc = sorted(
                    p.unconfirmed | ({"placements"} if "placements" in mig.unconfirmed else set())
                )
                if unc:
                    facts.append(f"{pname} ({', '.join(unc)})")
            key = f"{mid}:{','.join(facts)}"
            if facts and key not in warned:
                warned.add(key)
                plan.warnings.append(
                    f"{mid}: catalog values no source confirms are used: {'; '.join(facts)}; "
                    "check them on the card (scripts/gpu-readonly-check)"
                )
        if n.sharing == "mps":
            text = "MPS: the MPS control daemon runs where GFD labels nvidia.com/mps.capable=true (mpsRoot /run/nvidia/mps)"
            n.prerequisites.append(text)


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan for tools (stable keys, sorted)."""
    return {
        "complete": plan.complete,
        "solver": plan.solver,
        "objective": round(plan.objective, 6),
        "bound": None if plan.bound is None else round(plan.bound, 6),
        "optimal": plan.optimal,
        "gpus_used": plan.gpus_used,
        "cost": plan.cost,
        "workloads": [
            {
                "name": w.name,
                "replicas": w.replicas,
                "placed": w.placed,
                "left": w.left,
                "method": w.method,
                "profile": w.profile,
                "resources": w.resources,
                "nodes": dict(sorted(w.nodes.items())),
                **({"left_reason": w.left_reason} if w.left else {}),
                **({"suggestions": w.suggestions} if w.suggestions else {}),
            }
            for w in plan.workloads
        ],
        "nodes": [
            {
                "name": n.name,
                "gpus": n.models(),
                **({"buy": n.bought, "cost": n.cost} if n.bought else {}),
                "mig_strategy": n.mig_strategy,
                "sharing": n.sharing,
                **({"replicas": n.replicas} if n.replicas else {}),
                "device_plugin_config": n.device_plugin_config,
                "mig_config": n.mig_config,
                "labels": n.labels,
                "workloads": dict(sorted(n.workloads.items())),
                "layout": [
                    {
                        "index": g.index,
                        "model": g.model,
                        "role": g.role,
                        **({"mig": g.mig, "placements": list(g.layout)} if g.role == "mig" else {}),
                        **({"replicas": g.replicas} if g.role == "shared" else {}),
                    }
                    for g in n.gpus
                ],
                "prerequisites": n.prerequisites,
            }
            for n in plan.nodes
        ],
        "warnings": plan.warnings,
    }
