"""The exact solver: the abstract problem as an integer programme, solved by HiGHS.

Variables: a binary per bin mode, a binary per bin that costs something to open, an
integer per (bin, group, pattern) counting units, a binary per (demand, option) choosing
the demand's option, and an integer per (demand, option, bin, use) counting items.
Rows: one mode per bin; a group's units; patterns only under their modes; one option per
demand; items only through the chosen option; slot capacity per bin. Identical bins are
ordered by units used, to cut symmetric branches. The heuristic's solution is passed in as
the starting incumbent, so the answer is never worse than it.

Deterministic: one thread, a fixed seed, and a node limit rather than only a time limit.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import highspy
import numpy as np

from kubegpu.plan.core.budget import Budget
from kubegpu.plan.core.problem import Problem
from kubegpu.plan.core.solution import BinPlan, Placement, Solution, evaluate, verify


@dataclass
class Model:
    """An integer programme as it is built: columns (cost, bounds, integrality) and rows."""

    cost: list[float]
    lower: list[float]
    upper: list[float]
    integer: list[bool]
    rows: list[tuple[list[int], list[float], float, float]]

    def var(self, cost: float, lo: float, hi: float, integer: bool = True) -> int:
        self.cost.append(cost)
        self.lower.append(lo)
        self.upper.append(hi)
        self.integer.append(integer)
        return len(self.cost) - 1

    def row(self, coefs: dict[int, float], lo: float, hi: float) -> None:
        idx = sorted(k for k, v in coefs.items() if v)
        self.rows.append((idx, [coefs[i] for i in idx], lo, hi))


@contextlib.contextmanager
def _no_stdout() -> Iterator[None]:
    """HiGHS prints a banner from C++ on its first use; keep it out of our standard output."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _highs() -> highspy.Highs:
    with _no_stdout():
        h = highspy.Highs()  # type: ignore[no-untyped-call]
        h.setOptionValue("output_flag", False)
    return h


def run_model(
    m: Model, budget: Budget, node_limit: int, start: list[float] | None = None
) -> highspy.Highs:
    """Solve a model with HiGHS: one thread, a fixed seed, `start` as the first incumbent;
    it stops when the budget's CPU time is spent (checked between branch-and-bound steps)
    or its wall-clock ceiling passes (HiGHS's own time limit)."""
    h = _highs()
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("time_limit", max(1e-3, budget.wall_left()))

    def interrupt(
        _kind: highspy.cb.HighsCallbackType,
        _message: str,
        _out: highspy.cb.HighsCallbackOutput,
        into: highspy.cb.HighsCallbackInput,
        _data: object,
    ) -> None:
        if budget.left() <= 0:
            into.user_interrupt = True

    h.setCallback(interrupt, None)
    h.startCallback(highspy.cb.HighsCallbackType.kCallbackMipInterrupt)
    h.setOptionValue("mip_max_nodes", int(node_limit))
    # HiGHS's gaps are measured on the model's objective, which leaves out the constant
    # (every item's weight): a relative gap of 1e-6 on -353 let it stop 2.8e-4 above the
    # optimum of a plan costing 21 (issue 30). An absolute gap, below the tie-breakers,
    # means what "optimal" says.
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", PROOF_GAP)
    lp = highspy.HighsLp()
    n = len(m.cost)
    lp.num_col_ = n
    lp.num_row_ = len(m.rows)
    lp.col_cost_ = np.array(m.cost, dtype=np.float64)
    lp.col_lower_ = np.array(m.lower, dtype=np.float64)
    lp.col_upper_ = np.array(m.upper, dtype=np.float64)
    lp.row_lower_ = np.array([r[2] for r in m.rows], dtype=np.float64)
    lp.row_upper_ = np.array([r[3] for r in m.rows], dtype=np.float64)
    starts = [0]
    index: list[int] = []
    value: list[float] = []
    for idx, vals, _, _ in m.rows:
        index += idx
        value += vals
        starts.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = len(m.rows)
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=np.float64)
    lp.integrality_ = [
        highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in m.integer
    ]
    h.passModel(lp)
    if start is not None:
        hs = highspy.HighsSolution()
        hs.col_value = start
        hs.value_valid = True
        h.setSolution(hs)
    h.run()
    return h


# How close HiGHS's lower bound must come to a plan's cost for the plan to be called
# optimal: below the smallest tie-breaking cost differences the provider sets.
PROOF_GAP = 1e-7


def proven_optimal(h: highspy.Highs, bound: float | None, objective: float) -> bool:
    """A plan is optimal when HiGHS says so *and* its lower bound reaches the plan's cost:
    HiGHS's "optimal" is about its own incumbent within its tolerances, which need not be
    the plan we return."""
    return (
        h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        and bound is not None
        and bound >= objective - PROOF_GAP
    )


def highs_bound(h: highspy.Highs, const: float) -> float | None:
    """HiGHS's lower bound plus the model's constant; None when it has none ("no bound yet"
    is a huge number rather than infinity)."""
    bound = h.getInfo().mip_dual_bound
    return bound + const if math.isfinite(bound) and abs(bound) < 1e15 else None


def solve_exact(
    problem: Problem,
    start: Solution | None = None,
    *,
    time_limit: float = 30.0,
    node_limit: int = 1_000,
    budget: Budget | None = None,
) -> Solution:
    """The per-bin programme; `budget` (default: `time_limit` CPU seconds) bounds it."""
    budget = budget or Budget(time_limit)
    m = Model([], [], [], [], [])
    inf = highspy.kHighsInf
    v: dict[tuple[int, str], int] = {}
    opened: dict[int, int] = {}
    z: dict[tuple[int, int, int], int] = {}
    y: dict[tuple[int, int], int] = {}
    x: dict[tuple[int, int, int, int], int] = {}
    const = 0.0

    for b, bn in enumerate(problem.bins):
        modes = [bn.fixed_mode] if bn.fixed_mode is not None else list(bn.modes)
        for mode in modes:
            v[b, mode] = m.var(0.0, 0, 1)
        m.row({v[b, mode]: 1.0 for mode in modes}, 1, 1)
        pinned_any = any(n for g in bn.groups for _, n in g.fixed)
        if bn.open_cost:
            opened[b] = m.var(bn.open_cost, 1 if pinned_any else 0, 1)
        for gi, g in enumerate(bn.groups):
            fixed = dict(g.fixed)
            row: dict[int, float] = {}
            for pi, p in enumerate(g.patterns):
                z[b, gi, pi] = m.var(g.unit_cost + p.cost, fixed.get(p.key, 0), g.count)
                row[z[b, gi, pi]] = 1.0
                if p.modes is not None:
                    allowed = [mode for mode in modes if mode in p.modes]
                    coefs = {z[b, gi, pi]: 1.0}
                    for mode in allowed:
                        coefs[v[b, mode]] = -float(g.count)
                    m.row(coefs, -inf, 0)
            if b in opened:
                row[opened[b]] = -float(g.count)
                m.row(row, -inf, 0)
            else:
                m.row(row, -inf, g.count)

    offered = problem.offered()
    for d, dem in enumerate(problem.demands):
        const += dem.weight * dem.quantity
        options = sorted(o for o in range(len(dem.options)) if (d, o) in offered)
        for o in options:
            y[d, o] = m.var(0.0, 0, 1)
        if options:
            m.row({y[d, o]: 1.0 for o in options}, -inf, 1)

    capacity: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)
    per_option: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for (d, o, b), uses in sorted(problem.uses.items()):
        dem = problem.demands[d]
        for ui, u in enumerate(uses):
            x[d, o, b, ui] = col = m.var(dem.option_cost(o) - dem.weight, 0, dem.quantity)
            per_option[d, o][col] = 1.0
            capacity[b, u.slot][col] = float(u.amount)
    for (d, o), coefs in per_option.items():
        coefs[y[d, o]] = -float(problem.demands[d].quantity)
        m.row(coefs, -inf, 0)
    for b, bn in enumerate(problem.bins):
        used = dict(bn.used)
        slots = {s for (bb, s) in capacity if bb == b}
        for g in bn.groups:
            for p in g.patterns:
                slots.update(s for s, _ in p.offers)
        for s in sorted(slots):
            coefs = dict(capacity.get((b, s), {}))
            for gi, g in enumerate(bn.groups):
                for pi, p in enumerate(g.patterns):
                    k = p.offered(s)
                    if k:
                        coefs[z[b, gi, pi]] = -float(k)
            if capacity.get((b, s)):
                m.row(coefs, -inf, -float(used.get(s, 0)))

    # identical bins (one class, nothing pinned) are used in order
    for members in problem.by_class.values():
        free = [b for b in members if not problem.bins[b].used and not any(
            n for g in problem.bins[b].groups for _, n in g.fixed)]  # fmt: skip
        for a, b in itertools.pairwise(free):
            order: dict[int, float] = {}
            for gi, g in enumerate(problem.bins[a].groups):
                for pi in range(len(g.patterns)):
                    order[z[a, gi, pi]] = 1.0
                    order[z[b, gi, pi]] = order.get(z[b, gi, pi], 0.0) - 1.0
            m.row(order, 0, inf)

    n = len(m.cost)
    h = run_model(
        m,
        budget,
        node_limit,
        None if start is None else _start_values(problem, start, n, v, opened, z, y, x),
    )
    status = h.getModelStatus()
    info = h.getInfo()
    values = list(h.getSolution().col_value)
    if len(values) != n or info.primal_solution_status == 0:
        if start is None:
            raise RuntimeError(f"HiGHS found no solution ({h.modelStatusToString(status)})")
        return start
    sol = _read(problem, values, v, z, y, x)
    sol.objective = evaluate(problem, sol)
    bound = highs_bound(h, const)
    sol.note = f"HiGHS {h.modelStatusToString(status)}, {info.mip_node_count} nodes" + spent(budget)
    if verify(problem, sol):  # HiGHS's answer does not hold: only its bound is of use
        if start is None:
            raise RuntimeError(f"HiGHS's solution breaks the problem's rules ({sol.note})")
        return settle(start, bound, proven=False)
    if start is not None and start.objective < sol.objective - 1e-7:
        # HiGHS stopped on a worse plan: the start is optimal only if the bound reaches it
        return settle(start, bound, proven=proven_optimal(h, bound, start.objective))
    return settle(sol, bound, proven=proven_optimal(h, bound, sol.objective))


def spent(budget: Budget) -> str:
    """The CPU and wall-clock time a search took, for the plan's note."""
    text = f", {budget.used():.1f} s CPU in {budget.elapsed():.1f} s"
    if budget.starved():
        text += " (stopped by the wall clock: the machine was busy)"
    return text


def settle(sol: Solution, bound: float | None, *, proven: bool) -> Solution:
    """Give a solution its bound: never above its own cost (HiGHS's bound holds within its
    tolerances, and a plan costs what it costs), and equal to it when proven optimal
    (within `PROOF_GAP`, which `proven_optimal` checks)."""
    sol.optimal = proven
    if proven:
        sol.bound = sol.objective
    elif bound is None:
        sol.bound = None
    else:
        sol.bound = min(bound, sol.objective)
    return sol


def _start_values(
    problem: Problem,
    sol: Solution,
    n: int,
    v: dict[tuple[int, str], int],
    opened: dict[int, int],
    z: dict[tuple[int, int, int], int],
    y: dict[tuple[int, int], int],
    x: dict[tuple[int, int, int, int], int],
) -> list[float]:
    col = [0.0] * n
    for b, plan in enumerate(sol.bins):
        bn = problem.bins[b]
        if (b, plan.mode) in v:
            col[v[b, plan.mode]] = 1.0
        if b in opened and plan.units_used():
            col[opened[b]] = 1.0
        for gi, g in enumerate(bn.groups):
            for pi, p in enumerate(g.patterns):
                col[z[b, gi, pi]] = float(plan.patterns.get(g.key, {}).get(p.key, 0))
    for d, o in enumerate(sol.chosen):
        if o is not None and (d, o) in y:
            col[y[d, o]] = 1.0
    for pl in sol.placements:
        uses = problem.uses[pl.demand, pl.option, pl.bin]
        ui = next(i for i, u in enumerate(uses) if u.slot == pl.slot)
        col[x[pl.demand, pl.option, pl.bin, ui]] += float(pl.count)
    return col


def _read(
    problem: Problem,
    values: list[float],
    v: dict[tuple[int, str], int],
    z: dict[tuple[int, int, int], int],
    y: dict[tuple[int, int], int],
    x: dict[tuple[int, int, int, int], int],
) -> Solution:
    def val(i: int) -> int:
        return round(values[i])

    plans = []
    for b, bn in enumerate(problem.bins):
        modes = [bn.fixed_mode] if bn.fixed_mode is not None else list(bn.modes)
        mode = next((mm for mm in modes if val(v[b, mm]) == 1), modes[0])
        pats: dict[str, dict[str, int]] = {}
        for gi, g in enumerate(bn.groups):
            counts = {p.key: val(z[b, gi, pi]) for pi, p in enumerate(g.patterns)}
            counts = {k: c for k, c in counts.items() if c}
            if counts:
                pats[g.key] = counts
        plans.append(BinPlan(mode, pats))
    chosen: list[int | None] = [None] * len(problem.demands)
    for (d, o), col in y.items():
        if val(col) == 1:
            chosen[d] = o
    placements = []
    for (d, o, b, ui), col in sorted(x.items()):
        k = val(col)
        if k:
            placements.append(Placement(d, o, b, problem.uses[d, o, b][ui].slot, k))
    # an option chosen with nothing placed is no choice
    for d in range(len(chosen)):
        if chosen[d] is not None and not any(p.demand == d for p in placements):
            chosen[d] = None
    return Solution(plans, chosen, placements, "exact")
