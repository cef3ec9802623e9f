"""The exact solver on classes of identical bins: one integer programme per fleet *shape*,
not per node, then a split back into bins.

Bins of one class are interchangeable, so a solution only has to say how many of them run
each mode, how many of their units take each pattern (per mode), and how many items of
each demand sit on the class. That programme has no symmetric copies of a node to branch
over and its size does not grow with the number of nodes, so HiGHS proves optimality where
the per-bin programme runs out of nodes.

Every per-bin solution sums to a feasible class solution, so the class programme is a
relaxation: its bound is a bound for the per-bin problem too. The split back is exact for
items that take one slot each (any distribution of units over the bins of a mode works);
items taking `amount > 1` slots must sit in one bin, and the split packs them first fit
decreasing into bins filled one after another, which always succeeds when the amounts
divide the group sizes (1, 2, 4 or 8 GPUs on 4- and 8-GPU nodes). When it does not, or the
split fails `verify`, the caller falls back to the per-bin programme.

The solve runs in two phases. The objective is mostly whole numbers (GPUs used, replicas
left over) plus tie-breaking costs of a thousandth or less; proving optimality down to
those fractions makes HiGHS branch far longer before it even has the right number of GPUs
(seed 38 of the generated fleets: 3.6 s with rounded costs, 45 s with the true ones). So
the first phase solves the programme with every cost rounded *down* to a hundredth, where HiGHS
prunes by the objective's integrality; its bound is a bound for the true costs too. When
it proves its optimum in time, the second phase starts from that answer on the true costs
and breaks the ties; when it does not, its answer and bound stand, not proven optimal.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import highspy

from kubegpu.plan.core.budget import Budget
from kubegpu.plan.core.exact import (
    Model,
    highs_bound,
    proven_optimal,
    run_model,
    settle,
    spent,
)
from kubegpu.plan.core.problem import Bin, Problem
from kubegpu.plan.core.solution import BinPlan, Placement, Solution, evaluate, verify


@dataclass
class _Class:
    members: list[int]  # bin indexes
    rep: Bin  # a representative bin

    @property
    def modes(self) -> list[str]:
        b = self.rep
        return [b.fixed_mode] if b.fixed_mode is not None else list(b.modes)


def classes(problem: Problem) -> list[_Class]:
    """Classes of interchangeable bins. Bins with state of their own (slots in use, pinned
    patterns, a fixed mode) form a class with the other bins of the same state: the same
    bin apart from its name, with the same uses (the core checks, it does not trust the
    provider's class names); a 20-node fleet with current state is then a few classes, not
    20 of one (issue 30)."""
    out: list[_Class] = []
    for members in problem.by_class.values():
        alike = []
        for b in members:
            bn = problem.bins[b]
            own = bn.used or bn.fixed_mode is not None or any(g.fixed for g in bn.groups)
            if not own:
                alike.append(b)
        if alike:
            out.append(_Class(alike, problem.bins[alike[0]]))
    uses: dict[int, list[tuple[tuple[int, int], object]]] = defaultdict(list)
    for (d, o, c), found in problem.uses.by_class.items():
        uses[c].append(((d, o), found))
    stateful: dict[tuple[object, ...], list[int]] = {}
    for members in problem.by_class.values():
        for b in members:
            bn = problem.bins[b]
            if bn.used or bn.fixed_mode is not None or any(g.fixed for g in bn.groups):
                same = (
                    replace(bn, key="", cls=""),
                    tuple(sorted(uses[problem.class_of[b]], key=lambda t: t[0])),
                )
                stateful.setdefault(same, []).append(b)
    for group in stateful.values():
        out.append(_Class(group, problem.bins[group[0]]))
    out.sort(key=lambda c: c.members[0])
    return out


def single_classes(problem: Problem) -> list[_Class]:
    """Every bin with state of its own a class of one (the split of such a bin never
    fails): the fallback when a class of several stateful bins does not split."""
    out: list[_Class] = []
    for k in classes(problem):
        bn = k.rep
        if bn.used or bn.fixed_mode is not None or any(g.fixed for g in bn.groups):
            out.extend(_Class([b], problem.bins[b]) for b in k.members)
        else:
            out.append(k)
    out.sort(key=lambda c: c.members[0])
    return out


def class_size(problem: Problem) -> int:
    """Item variables of the class programme."""
    per_class: dict[int, int] = defaultdict(int)
    for (_d, _o, c), uses in problem.uses.by_class.items():
        per_class[c] += len(uses)
    return sum(per_class[problem.class_of[k.members[0]]] for k in classes(problem))


FLEX = "*"  # the "mode" of pattern columns shared by the bins of several modes


@dataclass
class _Columns:
    n: dict[tuple[int, str], int]  # class, mode -> bins used in that mode
    z: dict[tuple[int, str, int, int], int]  # class, mode, group, pattern -> units
    y: dict[tuple[int, int], int]  # demand, option -> chosen
    x: dict[tuple[int, int, int, int], int]  # demand, option, class, use -> items
    const: float
    flex: dict[tuple[int, int], list[str]] = field(default_factory=dict)  # class, group -> modes


def _build(problem: Problem, cls: list[_Class]) -> tuple[Model, _Columns]:
    m = Model([], [], [], [], [])
    inf = highspy.kHighsInf
    cols = _Columns({}, {}, {}, {}, 0.0)
    for c, k in enumerate(cls):
        b = k.rep
        size = len(k.members)
        pinned = any(n for g in b.groups for _, n in g.fixed)
        for mode in k.modes:
            cols.n[c, mode] = m.var(b.open_cost, 0, size)
        used = {cols.n[c, mode]: 1.0 for mode in k.modes}
        m.row(used, size if pinned else 0, size)  # a pinned bin stays in use
        for gi, g in enumerate(b.groups):
            allowed = [[mode for mode in k.modes if p.allowed(mode)] for p in g.patterns]
            # patterns allowed under several modes (MIG under none and time-slicing): when
            # they all share one set of modes, one column each and one row for the set
            # (the units fit iff they fit the room the set's bins leave) suffice
            sets = {frozenset(a) for a in allowed if len(a) > 1}
            flex = sorted(next(iter(sets)), key=k.modes.index) if len(sets) == 1 else []
            for mode in k.modes:
                row: dict[int, float] = {}
                for pi, p in enumerate(g.patterns):
                    if mode in allowed[pi] and not (flex and len(allowed[pi]) > 1):
                        col = m.var(g.unit_cost + p.cost, 0, g.count * size)
                        cols.z[c, mode, gi, pi] = col
                        row[col] = 1.0
                row[cols.n[c, mode]] = -float(g.count)
                m.row(row, -inf, 0)
            if flex:
                cols.flex[c, gi] = flex
                row = {}
                for pi, p in enumerate(g.patterns):
                    if len(allowed[pi]) > 1:
                        col = m.var(g.unit_cost + p.cost, 0, g.count * size)
                        cols.z[c, FLEX, gi, pi] = col
                        row[col] = 1.0
                for (cc, mode, gg, _pi), col in cols.z.items():
                    if cc == c and gg == gi and mode in flex:
                        row[col] = 1.0
                for mode in flex:
                    row[cols.n[c, mode]] = -float(g.count)
                m.row(row, -inf, 0)
            for key, count in g.fixed:
                pi = next(i for i, p in enumerate(g.patterns) if p.key == key)
                keep = {
                    cols.z[c, mode, gi, pi]: 1.0
                    for mode in (*k.modes, FLEX)
                    if (c, mode, gi, pi) in cols.z
                }
                m.row(keep, count * size, inf)
    cols.const = sum(dem.weight * dem.quantity for dem in problem.demands)
    options = sorted(problem.offered())
    for d, o in options:
        cols.y[d, o] = m.var(0.0, 0, 1)
    by_demand: dict[int, dict[int, float]] = defaultdict(dict)
    for d, o in options:
        by_demand[d][cols.y[d, o]] = 1.0
    for coefs in by_demand.values():
        m.row(coefs, -inf, 1)
    capacity: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)
    per_option: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for c, k in enumerate(cls):
        b0 = k.members[0]
        for d, dem in enumerate(problem.demands):
            for o in range(len(dem.options)):
                uses = problem.uses.get((d, o, b0))
                if not uses:
                    continue
                for ui, u in enumerate(uses):
                    cap = dem.quantity
                    col = m.var(dem.option_cost(o) - dem.weight, 0, cap)
                    cols.x[d, o, c, ui] = col
                    per_option[d, o][col] = 1.0
                    capacity[c, u.slot][col] = float(u.amount)
    for (d, o), coefs in per_option.items():
        coefs[cols.y[d, o]] = -float(problem.demands[d].quantity)
        m.row(coefs, -inf, 0)
    for (c, slot), coefs in sorted(capacity.items()):
        k = cls[c]
        row = dict(coefs)
        for (cc, _mode, gi, pi), col in cols.z.items():
            if cc == c:
                offered = k.rep.groups[gi].patterns[pi].offered(slot)
                if offered:
                    row[col] = row.get(col, 0.0) - float(offered)
        busy = dict(k.rep.used).get(slot, 0)
        m.row(row, -inf, -float(busy * len(k.members)))
    _big_item_rows(problem, cls, cols, m)
    return m, cols


def _big_item_rows(problem: Problem, cls: list[_Class], cols: _Columns, m: Model) -> None:
    """Items of `amount > 1` on a slot one pattern of one group offers, one per unit: a bin
    holds at most floor(units / a) items of amount a or more, so its class at most `size`
    times that. Valid for every per-bin plan (the class programme stays a relaxation), and
    without it the programme puts four 4-GPU items on three nodes of 6 free GPUs each."""
    for c, k in enumerate(cls):
        b = k.rep
        by_slot: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        for (d, o, cc, ui), col in cols.x.items():
            if cc != c:
                continue
            u = problem.uses[d, o, k.members[0]][ui]
            if u.amount > 1:
                by_slot[u.slot][u.amount].append(col)
        for slot, amounts in sorted(by_slot.items()):
            offerers = [
                (g, p.offered(slot)) for g in b.groups for p in g.patterns if p.offered(slot)
            ]
            if len({id(g) for g, _n in offerers}) != 1 or any(n != 1 for _g, n in offerers):
                continue
            g = offerers[0][0]
            units = g.count
            for a in sorted(amounts):
                cols_at_least = [col for aa, cs in amounts.items() if aa >= a for col in cs]
                m.row(
                    dict.fromkeys(cols_at_least, 1.0),
                    -highspy.kHighsInf,
                    float(len(k.members) * (units // a)),
                )


def _start(
    problem: Problem, cls: list[_Class], cols: _Columns, sol: Solution, n: int
) -> list[float]:
    values = [0.0] * n
    of_bin = {b: c for c, k in enumerate(cls) for b in k.members}
    for b, plan in enumerate(sol.bins):
        c = of_bin[b]
        if plan.units_used() and (c, plan.mode) in cols.n:
            values[cols.n[c, plan.mode]] += 1.0
        bn = problem.bins[b]
        for gi, g in enumerate(bn.groups):
            for pi, p in enumerate(g.patterns):
                k = plan.patterns.get(g.key, {}).get(p.key, 0)
                for mode in (plan.mode, FLEX):
                    if k and (c, mode, gi, pi) in cols.z:
                        values[cols.z[c, mode, gi, pi]] += float(k)
                        break
    for d, o in enumerate(sol.chosen):
        if o is not None and (d, o) in cols.y:
            values[cols.y[d, o]] = 1.0
    for pl in sol.placements:
        uses = problem.uses[pl.demand, pl.option, pl.bin]
        ui = next(i for i, u in enumerate(uses) if u.slot == pl.slot)
        values[cols.x[pl.demand, pl.option, of_bin[pl.bin], ui]] += float(pl.count)
    return values


# Costs are rounded down to this quantum for the first phase: the tie-breakers (1e-3 and
# less, see the provider) vanish, prices given in cents stay. Rounding down keeps the first
# phase's bound a bound for the true costs (every variable is non-negative).
COST_QUANTUM = 0.01
# The second phase (true costs) runs only when the first proved its optimum with at least
# this much of the time limit left.
MIN_POLISH_S = 0.5
# The second phase only breaks ties among plans of the first phase's cost, so it gets at
# most this many branch-and-bound nodes: on the 20-node fleet of bench_plan_midsize it spent
# 10,000 nodes (17 s of CPU) on tie-breakers of a thousandth without proving them, after the
# first phase had proved the whole-number optimum in 1.2 s. Stopped there, the plan keeps
# the first phase's bound and is not called optimal.
POLISH_NODE_LIMIT = 1_000


def floored(m: Model) -> Model | None:
    """The programme with every cost rounded down to `COST_QUANTUM`; None when that
    changes nothing (no tie-breakers to drop)."""
    cost = [math.floor(c / COST_QUANTUM + 1e-9) * COST_QUANTUM for c in m.cost]
    if all(abs(a - b) < 1e-12 for a, b in zip(cost, m.cost, strict=True)):
        return None
    return replace(m, cost=cost)


def _values(h: highspy.Highs, n: int) -> list[float] | None:
    """HiGHS's incumbent, or None when it has none."""
    values = list(h.getSolution().col_value)
    if len(values) != n or h.getInfo().primal_solution_status == 0:
        return None
    return values


def solve_classes(
    problem: Problem,
    start: Solution | None = None,
    *,
    time_limit: float = 30.0,
    node_limit: int = 10_000,
    budget: Budget | None = None,
) -> Solution | None:
    """The class programme's solution split into bins; None when the split fails (then the
    per-bin programme must decide). `budget` (default: `time_limit` CPU seconds) bounds it."""
    budget = budget or Budget(time_limit)
    cls = classes(problem)
    found = _solve_on(problem, cls, start, node_limit, budget)
    if found is None:
        singles = single_classes(problem)
        if len(singles) != len(cls) and not budget.spent():
            found = _solve_on(problem, singles, start, node_limit, budget)
    return found


def _solve_on(
    problem: Problem, cls: list[_Class], start: Solution | None, node_limit: int, budget: Budget
) -> Solution | None:
    m, cols = _build(problem, cls)
    n = len(m.cost)
    first = None if start is None else _start(problem, cls, cols, start, n)
    rough = floored(m)
    h = run_model(m if rough is None else rough, budget, node_limit, first)
    proven = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    bound = highs_bound(h, cols.const)  # floored costs never exceed the true ones: a bound
    if rough is not None and proven and budget.left() >= MIN_POLISH_S and not budget.spent():
        found = _values(h, n)
        h = run_model(
            m, budget, min(node_limit, POLISH_NODE_LIMIT), found if found is not None else first
        )
        proven = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        polished = highs_bound(h, cols.const)
        if polished is not None and (bound is None or polished > bound):
            bound = polished
    elif rough is not None:
        proven = False  # optimal for the floored costs only
    status = h.getModelStatus()
    info = h.getInfo()
    values = _values(h, n)
    if values is None:
        return None
    sol = _split(problem, cls, cols, values)
    if sol is None or verify(problem, sol):
        return None
    sol.objective = evaluate(problem, sol)
    sol.note = (
        f"HiGHS on {len(cls)} node classes: {h.modelStatusToString(status)}, "
        f"{info.mip_node_count} nodes{spent(budget)}"
    )
    best = start if start is not None and start.objective < sol.objective - 1e-7 else sol
    # optimal only when the first phase proved its optimum, the second ran on the true
    # costs, and the bound reaches the plan's cost (HiGHS's status alone is not proof)
    return settle(best, bound, proven=proven and proven_optimal(h, bound, best.objective))


def _split(
    problem: Problem, cls: list[_Class], cols: _Columns, values: list[float]
) -> Solution | None:
    def val(i: int) -> int:
        return round(values[i])

    plans: list[BinPlan | None] = [None] * len(problem.bins)
    placements: list[Placement] = []
    chosen: list[int | None] = [None] * len(problem.demands)
    for (d, o), col in cols.y.items():
        if val(col):
            chosen[d] = o
    for c, k in enumerate(cls):
        b = k.rep
        free_bins = list(k.members)
        # bins per mode, and in each the units of every group, filled one bin after another
        by_mode: list[tuple[str, list[int]]] = []
        for mode in k.modes:
            count = val(cols.n[c, mode])
            taken, free_bins = free_bins[:count], free_bins[count:]
            if len(taken) < count:
                return None
            by_mode.append((mode, taken))
            for bi in taken:
                plans[bi] = BinPlan(mode, {})
        for bi in free_bins:
            plans[bi] = BinPlan(b.fixed_mode if b.fixed_mode is not None else b.modes[0], {})
        # items that take more than one slot, largest first, decide where their slots go
        big: list[tuple[int, int, int, str, int]] = []  # amount, demand, option, slot, items
        small: list[tuple[int, int, str, int]] = []
        for (d, o, cc, ui), col in sorted(cols.x.items()):
            if cc != c or not val(col):
                continue
            u = problem.uses[d, o, k.members[0]][ui]
            if u.amount > 1:
                big.append((u.amount, d, o, u.slot, val(col)))
            else:
                small.append((d, o, u.slot, val(col)))
        big_slots = {slot for _a, _d, _o, slot, _n in big}
        # a big item's slot offered by one pattern, one per unit (whole GPUs): its items are
        # placed first fit decreasing while that pattern's units are handed out, so a bin
        # gets whole items' worth of units (6 free GPUs per node hold one 4-GPU item, not 6)
        direct: dict[str, tuple[int, int]] = {}
        for slot in big_slots:
            offerers = [
                (gi, pi, p.offered(slot))
                for gi, g in enumerate(b.groups)
                for pi, p in enumerate(g.patterns)
                if p.offered(slot)
            ]
            if len(offerers) == 1 and offerers[0][2] == 1:
                direct[slot] = (offerers[0][0], offerers[0][1])
        consumed: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for gi, g in enumerate(b.groups):
            units = {bi: g.count for _mode, bins in by_mode for bi in bins}
            # patterns that offer what big items take first, so they fill whole bins
            first = [pi for pi, p in enumerate(g.patterns) if any(p.offered(s) for s in big_slots)]
            order = first + [pi for pi in range(len(g.patterns)) if pi not in first]
            flex = cols.flex.get((c, gi), [])
            stages = [(mode, bins) for mode, bins in by_mode]
            stages.append((FLEX, [bi for mode, bins in by_mode if mode in flex for bi in bins]))
            taken_z: dict[int, int] = defaultdict(int)  # column -> units given out already
            # every bin keeps its pinned patterns first (a class of several stateful bins)
            for mode, bins in by_mode:
                for bi in bins:
                    for key, count in g.fixed:
                        pi = next(i for i, p in enumerate(g.patterns) if p.key == key)
                        need = count
                        for zm in (mode, FLEX) if mode in flex else (mode,):
                            zc = cols.z.get((c, zm, gi, pi))
                            if zc is None:
                                continue
                            take = min(need, val(zc) - taken_z[zc], units[bi])
                            if take > 0:
                                taken_z[zc] += take
                                need -= take
                        if need:
                            return None
                        plan = plans[bi]
                        assert plan is not None
                        pats = plan.patterns.setdefault(g.key, {})
                        pats[key] = pats.get(key, 0) + count
                        units[bi] -= count
            for amount, d, o, slot, items in sorted(big, key=lambda t: (-t[0], t[1])):
                if direct.get(slot, (-1, -1))[0] != gi:
                    continue
                pi = direct[slot][1]
                at: dict[int, int] = defaultdict(int)
                for _ in range(items):
                    spot = next(
                        (
                            (zc, bi)
                            for mode, bins in stages
                            if (zc := cols.z.get((c, mode, gi, pi))) is not None
                            and val(zc) - taken_z[zc] >= amount
                            for bi in bins
                            if units[bi] >= amount
                        ),
                        None,
                    )
                    if spot is None:
                        return None
                    zc, bi = spot
                    taken_z[zc] += amount
                    units[bi] -= amount
                    plan = plans[bi]
                    assert plan is not None
                    pats = plan.patterns.setdefault(g.key, {})
                    pats[g.patterns[pi].key] = pats.get(g.patterns[pi].key, 0) + amount
                    consumed[bi][slot] += amount
                    at[bi] += 1
                placements.extend(Placement(d, o, bi, slot, n) for bi, n in sorted(at.items()))
            for mode, bins in stages:
                for pi in order:
                    zc = cols.z.get((c, mode, gi, pi))
                    left = val(zc) - taken_z[zc] if zc is not None else 0
                    for bi in bins:
                        if not left:
                            break
                        take = min(left, units[bi])
                        if take:
                            plan = plans[bi]
                            assert plan is not None
                            pats = plan.patterns.setdefault(g.key, {})
                            pats[g.patterns[pi].key] = pats.get(g.patterns[pi].key, 0) + take
                            units[bi] -= take
                            left -= take
                    if left:
                        return None
        free: dict[int, dict[str, int]] = {}
        for bi in k.members:
            plan = plans[bi]
            assert plan is not None
            slots: dict[str, int] = defaultdict(int)
            for s, used in b.used:
                slots[s] -= used
            for g in b.groups:
                for key, cnt in plan.patterns.get(g.key, {}).items():
                    for s, off in g.pattern(key).offers:
                        slots[s] += off * cnt
            for slot, n in consumed[bi].items():
                slots[slot] -= n
            free[bi] = slots
        big = [t for t in big if t[3] not in direct]
        for amount, d, o, slot, items in sorted(big, key=lambda t: (-t[0], t[1])):
            if not _place(free, k.members, (d, o, slot, amount, items), placements):
                return None
        for d, o, slot, items in small:
            if not _place(free, k.members, (d, o, slot, 1, items), placements):
                return None
    for d in range(len(chosen)):
        if chosen[d] is not None and not any(p.demand == d for p in placements):
            chosen[d] = None
    final = [p for p in plans if p is not None]
    assert len(final) == len(plans)
    return Solution(
        final, chosen, sorted(placements, key=lambda p: (p.demand, p.bin, p.slot)), "exact"
    )


def _place(
    free: dict[int, dict[str, int]],
    bins: list[int],
    item: tuple[int, int, str, int, int],
    placements: list[Placement],
) -> bool:
    """Items of one demand into the first bins with room; False when some do not fit."""
    d, o, slot, amount, items = item
    for bi in bins:
        fit = min(items, max(0, free[bi].get(slot, 0)) // amount)
        if fit:
            free[bi][slot] -= fit * amount
            placements.append(Placement(d, o, bi, slot, fit))
            items -= fit
        if not items:
            return True
    return not items
