"""`make_plan`: the provider, the core and the reporter put together, and what to do about
whatever did not fit."""

from __future__ import annotations

import time
from collections.abc import Callable

from kubegpu.catalog import GpuModel, all_models
from kubegpu.catalog.models import driver_at_least, parse_driver_version
from kubegpu.plan import core, rules
from kubegpu.plan.core.heuristic import solve_heuristic
from kubegpu.plan.emit import assign_configs
from kubegpu.plan.inputs import FleetNode, PlanInput, ServerType, Workload
from kubegpu.plan.provider import GpuProvider
from kubegpu.plan.reporter import PlanReporter
from kubegpu.plan.result import Plan, WorkloadPlan, build_plan

# Growing the fleet to find the smallest addition that fits the leftovers: at most this
# many extra nodes of one shape are tried.
MAX_EXTRA_NODES = 256
# All "would fit with" searches of one plan together stop after this many seconds.
SUGGEST_BUDGET_S = 10.0
# Greedy passes of one "would it fit" check of the suggestion search: the starting orders
# and a few repairs. The default effort (100 passes at 20 nodes x 30 workloads) made each
# check 1.5 s and the search 10 s of a 20-node plan (bench_plan_midsize, issue 30).
FIT_CHECK_EFFORT = 16
# Cards tried, smallest first, for a workload no card in the fleet can serve.
MAX_CARDS_TRIED = 12
# Plans made at most for one input: the first; one with the workloads that sat on several
# GPU models (where names are per model) held to one model; one with every workload held.
MODEL_ROUNDS = 3


def make_plan(
    inp: PlanInput,
    *,
    solver: core.Method | None = None,
    reporter: PlanReporter | None = None,
    suggest: bool = True,
) -> Plan:
    rep = reporter or PlanReporter()
    method = solver or inp.options.solver
    one_model: frozenset[str] = frozenset()
    for attempt in range(MODEL_ROUNDS):
        provider = GpuProvider(inp, rep, one_model)
        problem, sol = core.solve(provider, rep, method=method, time_limit=inp.options.time_limit)
        plan = build_plan(provider, problem, sol, rep)
        if not plan.split or attempt == MODEL_ROUNDS - 1:
            break
        # a pod requests one resource name, and a node with several models names each
        # model's GPUs apart: the workloads that sit on several models are planned again,
        # held to one model each (the last round holds every workload that could split)
        if attempt + 2 < MODEL_ROUNDS:
            one_model |= frozenset(plan.split)
        else:
            one_model = frozenset(w.name for w in inp.workloads)
        rep.reset()
    if one_model:
        rep.note(
            "plan",
            "",
            f"held to one GPU model each (their pods request one resource name): "
            f"{', '.join(sorted(one_model))}",
        )
    assign_configs(plan)
    servable = {problem.demands[d].key for d, _o in problem.offered()}
    deadline = time.monotonic() + SUGGEST_BUDGET_S if suggest else None
    left = [wp for wp in plan.workloads if wp.left]
    for wp in left:
        _explain_leftover(inp, provider, wp, rep, deadline, wp.name in servable, plan.optimal)
        if wp.name in one_model and wp.name in servable:
            wp.left_reason += (
                " (held to one GPU model: a node with several models names each model's GPUs "
                "apart, and its pods request one name)"
            )
    if deadline is None or not left:
        return plan
    # then the dearer search (the whole fleet again) for looser isolation, while time is left
    for wp in left:
        relaxed = _relaxed_isolation(inp, provider.workloads[wp.name], deadline)
        if relaxed:
            wp.suggestions.append(relaxed)
            rep.note(f"workload {wp.name}", "", f"would fit with: {relaxed}")
    if time.monotonic() > deadline:
        rep.note(
            "plan",
            "",
            f"the search for changes that fit the leftovers stopped after {SUGGEST_BUDGET_S:.0f} s",
        )
    return plan


def placed_all(inp: PlanInput, names: set[str], deadline: float | None = None) -> bool:
    """Whether the heuristic places every replica of these workloads for this input: the
    same provider, so the same rules, as a plan."""
    provider = GpuProvider(inp, PlanReporter())
    problem = core.Problem.compile(provider)
    sol = solve_heuristic(problem, deadline=deadline, effort=FIT_CHECK_EFFORT)
    left = sol.unplaced(problem)
    return all(left[i] == 0 for i, d in enumerate(problem.demands) if d.key in names)


def _why_no_card(provider: GpuProvider, w: Workload) -> str:
    reasons = []
    models = {m.id: m for n in provider.nodes for m in n.models}
    for m in sorted(models.values(), key=lambda m: -m.memory_mib):
        why = rules.whole_rejection(w, m)
        if why:
            reasons.append(f"{m.id}: {why}")
        elif w.gpus > 1:
            most = max(n.count(m) for n in provider.nodes if m.id in {x.id for x in n.models})
            if most < w.gpus:
                reasons.append(f"{m.id}: at most {most} on one node, {w.gpus} needed")
            elif w.nvlink:
                reasons.append(f"{m.id}: no node with {w.gpus} of them joined by NVLink")
    return "; ".join(reasons[:4]) or "no node offers any method it allows"


def _explain_leftover(
    inp: PlanInput,
    provider: GpuProvider,
    wp: WorkloadPlan,
    rep: PlanReporter,
    deadline: float | None,
    servable: bool,
    proven: bool,
) -> None:
    """Why replicas are left over and, until `deadline` (None: no search), what would fit
    them. "Not enough room" only from a plan proven optimal: a search stopped early (or the
    heuristic alone) may have missed a plan that places them."""
    w = provider.workloads[wp.name]
    subject = f"workload {w.name}"
    if not servable:
        wp.left_reason = f"no card in the fleet can serve it: {_why_no_card(provider, w)}"
    elif proven:
        wp.left_reason = f"not enough room: {wp.left} of {wp.replicas} replicas do not fit"
    else:
        wp.left_reason = (
            "not placed, but not proven not to fit: the search stopped at its budget before "
            "proving the plan optimal, and a plan that places them may exist"
        )
    rep.note(subject, "", wp.left_reason)
    if deadline is None:
        return
    for text in _suggestions(inp, provider, w, wp.left, servable, deadline):
        wp.suggestions.append(text)
        rep.note(subject, "", f"would fit with: {text}")


def _leftovers(inp: PlanInput, w: Workload, left: int, **update: object) -> PlanInput:
    """The replicas left over, alone, on the given fleet: a change that fits them there
    fits them next to the plan as it stands (the search is incremental)."""
    rest = w.model_copy(update={"replicas": left})
    return inp.model_copy(update={"fleet": (), "buy": (), "workloads": (rest,), **update})


def _suggestions(
    inp: PlanInput, provider: GpuProvider, w: Workload, left: int, servable: bool, deadline: float
) -> list[str]:
    out: list[str] = []
    upgrade = _driver_upgrade(inp, w, deadline)
    if upgrade:
        out.append(upgrade)  # no new hardware: the smallest change when it fits them
    if servable:
        grow = _grow_fleet(inp, w, left, deadline)
        if grow:
            out.append(grow)
    else:
        card = _card_for(inp, w, left, deadline)
        if card:
            out.append(card)
        most = max((m.memory_mib for n in provider.nodes for m in n.models), default=0)
        if w.memory_mib > most and most:
            out.append(f"memory: {most // 1024}GiB or less per GPU (the largest card in the fleet)")
    return out


def _gate_versions(w: Workload, models: list[GpuModel]) -> list[str]:
    """The driver versions a MIG rule of these models gates on that could matter to `w`:
    MIG itself, a profile that serves it, or a pair of profiles one of which serves it;
    oldest first."""
    versions: set[str] = set()
    for m in models:
        if m.mig is None:
            continue
        versions.add(m.mig.min_driver)
        serving = {
            p.nvml for p in m.mig.gpu_instance_profiles if rules.profile_rejection(w, m, p) is None
        }
        versions.update(
            p.min_driver for p in m.mig.gpu_instance_profiles if p.min_driver and p.nvml in serving
        )
        versions.update(r.min_driver for r in m.mig.combination_rules if r.profiles & serving)
    return sorted(versions, key=parse_driver_version)


def _driver_upgrade(inp: PlanInput, w: Workload, deadline: float) -> str | None:
    """The oldest driver, among the versions the catalog's MIG rules gate on, that places
    every replica of `w` when the nodes whose driver is older get it: a driver gate (a
    profile or a pair of profiles a newer driver allows) is what blocks their layout."""
    gates = {
        n.name: _gate_versions(w, [m for m, _ in n.models()])
        for n in inp.fleet
        if n.driver is not None
    }
    candidates = sorted({v for vs in gates.values() for v in vs}, key=parse_driver_version)
    for version in candidates:
        if time.monotonic() > deadline:
            return None
        behind = [
            n
            for n in inp.fleet
            if n.driver is not None
            and version in gates[n.name]
            and not driver_at_least(n.driver, version)
        ]
        if not behind:
            continue
        upgraded = tuple(
            n.model_copy(update={"driver": version}) if n in behind else n for n in inp.fleet
        )
        if placed_all(inp.model_copy(update={"fleet": upgraded}), {w.name}, deadline):
            names = ", ".join(sorted({f"{n.name} ({n.driver})" for n in behind})[:5])
            return f"driver R{version}+ on {names}: the MIG layout it needs is gated on the driver"
    return None


def _card_for(inp: PlanInput, w: Workload, left: int, deadline: float) -> str | None:
    """The smallest card a node of which would serve it, checked by planning on it."""
    fits = sorted(
        (m for m in all_models() if rules.whole_rejection(w, m) is None),
        key=lambda m: (m.memory_mib, m.id),
    )
    for m in fits[:MAX_CARDS_TRIED]:
        if time.monotonic() > deadline:
            return None
        node = FleetNode(name="plan-extra", gpus=f"{m.id}:{max(1, w.gpus)}")
        if placed_all(_leftovers(inp, w, 1, fleet=(node,)), {w.name}, deadline):
            return f"a card with room for it, such as {m.id} ({m.memory_mib / 1024:.0f} GiB)"
    return None


def _relaxed_isolation(inp: PlanInput, w: Workload, deadline: float) -> str | None:
    order = ["hardware", "memory", "none"]
    i = order.index(w.isolation)
    for looser in order[i + 1 :]:
        if looser == "none" and w.kind == "training":
            break
        if time.monotonic() > deadline:
            return None
        changed = w.model_copy(update={"isolation": looser})
        trial = inp.model_copy(
            update={"workloads": tuple(changed if x.name == w.name else x for x in inp.workloads)}
        )
        if placed_all(trial, {w.name}, deadline):
            how = "MPS" if looser == "memory" else "time-slicing"
            return f"isolation: {looser} (then {how} may share GPUs for it)"
    return None


def _grow_fleet(inp: PlanInput, w: Workload, left: int, deadline: float) -> str | None:
    """The fewest extra GPUs, as copies of one node shape (or more servers), that fit the
    replicas left over."""
    best: tuple[int, str] | None = None
    shapes: dict[str, FleetNode] = {}
    for n in inp.fleet:
        shapes.setdefault(n.gpus, n)
    for gpus, spec in sorted(shapes.items()):
        per_node = sum(k for _, k in spec.models())

        def with_extra(k: int, spec: FleetNode = spec) -> PlanInput:
            extra = FleetNode(
                name="plan-extra",
                gpus=spec.gpus,
                count=k,
                driver=spec.driver,
                display=spec.display,
                nvlink=spec.nvlink,
            )
            return _leftovers(inp, w, left, fleet=(extra,))

        k = _smallest(_fits(with_extra, w.name, deadline), deadline)
        if k is not None and (best is None or k * per_node < best[0]):
            best = (
                k * per_node,
                f"{k} more node(s) like {spec.name} ({gpus}): {k * per_node} GPUs",
            )
    for st in inp.buy:
        if st.max_servers is None:
            continue

        def with_more(k: int, st: ServerType = st) -> PlanInput:
            return _leftovers(inp, w, left, buy=(st.model_copy(update={"max_servers": k}),))

        k = _smallest(_fits(with_more, w.name, deadline), deadline)
        if k is not None and (best is None or k * st.max_cards < best[0]):
            best = (k * st.max_cards, f"max_servers of {st.name} raised by {k}")
    return best[1] if best else None


def _fits(trial: Callable[[int], PlanInput], name: str, deadline: float) -> Callable[[int], bool]:
    return lambda k: placed_all(trial(k), {name}, deadline)


def _smallest(fits: Callable[[int], bool], deadline: float) -> int | None:
    """The smallest k in 1..MAX_EXTRA_NODES with fits(k), assuming more never hurts; None
    when none fits or the deadline passes first."""
    if time.monotonic() > deadline:
        return None
    hi = 1
    while hi <= MAX_EXTRA_NODES and not fits(hi):
        if time.monotonic() > deadline:
            return None
        hi *= 2
    if hi > MAX_EXTRA_NODES:
        if time.monotonic() > deadline or not fits(MAX_EXTRA_NODES):
            return None
        hi = MAX_EXTRA_NODES
    lo = hi // 2 + 1 if hi > 1 else 1
    while lo < hi:
        if time.monotonic() > deadline:
            return hi  # hi is known to fit
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi
