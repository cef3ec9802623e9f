"""`make_plan`: the provider, the core and the reporter put together, and what to do about
whatever did not fit."""

from __future__ import annotations

from kubegpu.catalog import all_models
from kubegpu.plan import core, rules
from kubegpu.plan.emit import assign_configs
from kubegpu.plan.inputs import FleetNode, PlanInput, ServerType, Workload
from kubegpu.plan.provider import GpuProvider
from kubegpu.plan.reporter import PlanReporter
from kubegpu.plan.result import Plan, WorkloadPlan, build_plan

# Growing the fleet to find the smallest addition that fits the leftovers: at most this
# many extra nodes of one shape are tried.
MAX_EXTRA_NODES = 256


def make_plan(
    inp: PlanInput,
    *,
    solver: core.Method | None = None,
    reporter: PlanReporter | None = None,
    suggest: bool = True,
) -> Plan:
    rep = reporter or PlanReporter()
    provider = GpuProvider(inp, rep)
    method = solver or inp.options.solver
    problem, sol = core.solve(provider, rep, method=method, time_limit=inp.options.time_limit)
    plan = build_plan(provider, problem, sol, rep)
    assign_configs(plan)
    servable = {problem.demands[d].key for d, _o, _b in problem.uses}
    for wp in plan.workloads:
        if wp.left:
            _explain_leftover(inp, provider, wp, rep, suggest, wp.name in servable)
    return plan


def placed_all(inp: PlanInput, names: set[str]) -> bool:
    """Whether the heuristic places every replica of these workloads for this input."""
    provider = GpuProvider(inp, PlanReporter())
    problem = core.Problem.compile(provider)
    sol = core.solve_problem(problem, method="heuristic")
    left = sol.unplaced(problem)
    return all(left[i] == 0 for i, d in enumerate(problem.demands) if d.key in names)


def _serving_methods(provider: GpuProvider, w: Workload) -> list[str]:
    return [m for m in provider.methods[w.name] if m != "mig" or provider.mig_profiles.get(w.name)]


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
    suggest: bool,
    servable: bool,
) -> None:
    w = provider.workloads[wp.name]
    subject = f"workload {w.name}"
    if not servable:
        wp.left_reason = f"no card in the fleet can serve it: {_why_no_card(provider, w)}"
    else:
        wp.left_reason = f"not enough room: {wp.left} of {wp.replicas} replicas do not fit"
    rep.note(subject, "", wp.left_reason)
    if not suggest:
        return
    for text in _suggestions(inp, provider, w, servable):
        wp.suggestions.append(text)
        rep.note(subject, "", f"would fit with: {text}")


def _suggestions(inp: PlanInput, provider: GpuProvider, w: Workload, servable: bool) -> list[str]:
    out: list[str] = []
    if servable:
        grow = _grow_fleet(inp, w)
        if grow:
            out.append(grow)
    else:
        bigger = [m for m in all_models() if rules.whole_rejection(w, m) is None]
        if bigger:
            best = min(bigger, key=lambda m: (m.memory_mib, m.id))
            out.append(
                f"a card with room for it, such as {best.id} ({best.memory_mib / 1024:.0f} GiB)"
            )
        most = max((m.memory_mib for n in provider.nodes for m in n.models), default=0)
        if w.memory_mib > most and most:
            out.append(f"memory: {most // 1024}GiB or less per GPU (the largest card in the fleet)")
    relaxed = _relaxed_isolation(inp, w)
    if relaxed:
        out.append(relaxed)
    return out


def _relaxed_isolation(inp: PlanInput, w: Workload) -> str | None:
    order = ["hardware", "memory", "none"]
    i = order.index(w.isolation)
    for looser in order[i + 1 :]:
        if looser == "none" and w.kind == "training":
            break
        changed = w.model_copy(update={"isolation": looser})
        trial = inp.model_copy(
            update={"workloads": tuple(changed if x.name == w.name else x for x in inp.workloads)}
        )
        if placed_all(trial, {w.name}):
            how = "MPS" if looser == "memory" else "time-slicing"
            return f"isolation: {looser} (then {how} may share GPUs for it)"
    return None


def _grow_fleet(inp: PlanInput, w: Workload) -> str | None:
    """The fewest extra GPUs, as copies of one node shape (or one more server), that fit it."""
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
            return inp.model_copy(update={"fleet": (*inp.fleet, extra)})

        k = _smallest(lambda k, f=with_extra: placed_all(f(k), {w.name}))
        if k is not None and (best is None or k * per_node < best[0]):
            best = (
                k * per_node,
                f"{k} more node(s) like {spec.name} ({gpus}): {k * per_node} GPUs",
            )
    for st in inp.buy:
        if st.max_servers is None:
            continue

        def with_more(k: int, st: ServerType = st) -> PlanInput:
            more = st.model_copy(update={"max_servers": (st.max_servers or 0) + k})
            return inp.model_copy(
                update={"buy": tuple(more if x.name == st.name else x for x in inp.buy)}
            )

        k = _smallest(lambda k, f=with_more: placed_all(f(k), {w.name}))
        if k is not None and (best is None or k * st.max_cards < best[0]):
            best = (k * st.max_cards, f"max_servers of {st.name} raised by {k}")
    return best[1] if best else None


def _smallest(fits: object) -> int | None:
    """The smallest k in 1..MAX_EXTRA_NODES with fits(k), assuming more never hurts."""
    assert callable(fits)
    hi = 1
    while hi <= MAX_EXTRA_NODES and not fits(hi):
        hi *= 2
    if hi > MAX_EXTRA_NODES:
        if not fits(MAX_EXTRA_NODES):
            return None
        hi = MAX_EXTRA_NODES
    lo = hi // 2 + 1 if hi > 1 else 1
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi
