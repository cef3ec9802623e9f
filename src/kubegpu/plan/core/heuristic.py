"""A fast greedy for the abstract problem, with multi-start and option re-selection.

Demands are taken one at a time, hardest first (fewest options, biggest footprint). For
each, every option is tried on a scratch copy of the touched bins: free slots first, then
new units in bins already opened, then new bins, cheapest per slot first. A unit gets the
pattern that covers most of what is still wanted ("largest coverage", valued by slot size),
so mixed patterns are chosen when other demands can fill the rest. The option with the
lowest score wins: cost added, minus the value of free slots later demands want, plus the
weight of items left over. Small problems get several orders and a pass that forces each
demand onto each other option; the best solution is kept. Everything is deterministic.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field

from kubegpu.plan.core.budget import Budget
from kubegpu.plan.core.problem import Bin, Problem, Use
from kubegpu.plan.core.reporter import BaseReporter
from kubegpu.plan.core.solution import BinPlan, Placement, Solution, evaluate

_EPS = 1e-9


@dataclass
class _BinState:
    modes: frozenset[str]
    free_units: list[int]
    config: list[dict[int, int]]  # per group: pattern index -> units
    free: dict[str, int]
    opened: bool

    def copy(self) -> _BinState:
        return _BinState(
            self.modes, list(self.free_units), [dict(c) for c in self.config], dict(self.free),
            self.opened,
        )  # fmt: skip


def _initial(b: Bin) -> _BinState:
    modes = frozenset([b.fixed_mode]) if b.fixed_mode is not None else frozenset(b.modes)
    free: dict[str, int] = defaultdict(int)
    config: list[dict[int, int]] = []
    free_units: list[int] = []
    opened = False
    for g in b.groups:
        cfg: dict[int, int] = {}
        pinned = 0
        for key, n in g.fixed:
            if not n:
                continue
            pi = next(i for i, p in enumerate(g.patterns) if p.key == key)
            p = g.patterns[pi]
            cfg[pi] = cfg.get(pi, 0) + n
            pinned += n
            if p.modes is not None:
                modes = modes & p.modes
            for s, k in p.offers:
                free[s] += k * n
            opened = True
        config.append(cfg)
        free_units.append(g.count - pinned)
    for s, n in b.used:
        free[s] -= n
    return _BinState(modes, free_units, config, dict(free), opened)


@dataclass
class _Trial:
    """Placements of one demand through one option, on copies of the bins it touches."""

    touched: dict[int, _BinState] = field(default_factory=dict)
    placements: list[tuple[int, str, int]] = field(default_factory=list)  # bin, slot, items
    configured: list[tuple[int, int, int, int]] = field(
        default_factory=list
    )  # bin, group, pattern, n
    cost: float = 0.0
    placed: int = 0


_Offer = tuple[int, int, frozenset[str] | None, float, tuple[tuple[str, int, float], ...]]


class _Static:
    """Tables every greedy pass of one problem shares (built once)."""

    def __init__(self, problem: Problem) -> None:
        # per (demand, option): the classes of bins that can serve it (a class, not a bin
        # list, so that a fleet of many alike nodes costs its classes)
        classes_for: dict[tuple[int, int], set[int]] = defaultdict(set)
        fp = [math.inf] * len(problem.demands)
        opts: list[set[int]] = [set() for _ in problem.demands]
        cls_of = [b.cls or b.key for b in problem.bins]
        self.slots_for: dict[tuple[int, int], set[str]] = defaultdict(set)
        self.share: dict[tuple[int, int], float] = {}
        sizes = problem.slot_sizes
        # demands of one shape share their uses' tuples: each tuple is read once
        seen: dict[int, tuple[frozenset[str], float]] = {}
        for (d, o, c), uses in problem.uses.by_class.items():
            classes_for[d, o].add(c)
            opts[d].add(o)
            known = seen.get(id(uses))
            if known is None:
                known = seen[id(uses)] = (
                    frozenset(u.slot for u in uses),
                    min(u.amount * sizes.get(u.slot, 1.0) for u in uses),
                )
            slots, size = known
            self.slots_for[d, o].update(slots)
            if size < self.share.get((d, o), math.inf):
                self.share[d, o] = size
            fp[d] = min(fp[d], size)
        self.class_sets = {k: frozenset(v) for k, v in classes_for.items()}
        self.class_of = problem.class_of
        members = problem.members
        self.fp = [0.0 if f == math.inf else f for f in fp]
        self.n_opts = [len(o) for o in opts]
        self.options_of = [sorted(o) for o in opts]
        self.cls_of = cls_of
        self.unit_value = [max((g.unit_cost for g in b.groups), default=1.0) for b in problem.bins]
        # per bin class: per group, slot -> (modes any pattern offering it allows, best offer)
        self.slot_modes: dict[str, list[dict[str, tuple[frozenset[str] | None, int]]]] = {}
        for bn in problem.bins:
            name = bn.cls or bn.key
            if name in self.slot_modes:
                continue
            per_group = []
            for g in bn.groups:
                table: dict[str, tuple[frozenset[str] | None, int]] = {}
                for pat in g.patterns:
                    for s, k in pat.offers:
                        modes, best = table.get(s, (frozenset(), 0))
                        allowed = None if modes is None or pat.modes is None else modes | pat.modes
                        table[s] = (allowed, max(best, k))
                per_group.append(table)
            self.slot_modes[name] = per_group
        self.first_need: dict[int, tuple[str, int]] = {}
        for d, dem in enumerate(problem.demands):
            for o in range(len(dem.options)):
                cs = self.class_sets.get((d, o))
                if cs:
                    u = problem.uses.by_class[d, o, min(cs, key=lambda c: members[c][0])][0]
                    self.first_need[d] = (u.slot, u.amount * dem.quantity)
                    break
        self.initial = [_initial(b) for b in problem.bins]
        # per slot, the most of it any pattern offers: a pattern's value reads how much of a
        # slot is wanted only up to this, so wants above it are all alike (see _grow)
        self.slot_cap: dict[str, int] = defaultdict(int)
        for group in members:
            for g in problem.bins[group[0]].groups:
                for pat in g.patterns:
                    for s, k in pat.offers:
                        self.slot_cap[s] = max(self.slot_cap[s], k)
        self.opening: dict[tuple[str, str, int], float] = {}
        self._offering: dict[tuple[str, int], dict[str, list[_Offer]]] = {}

    def offering(self, problem: Problem, b: int, gi: int) -> dict[str, list[_Offer]]:
        """slot -> the patterns of bin b's group gi that offer it, with their offers sized."""
        key = (self.cls_of[b], gi)
        found = self._offering.get(key)
        if found is None:
            found = {}
            for pi, pat in enumerate(problem.bins[b].groups[gi].patterns):
                offers = tuple((s, k, problem.slot_sizes.get(s, 0.0)) for s, k in pat.offers)
                for s, k in pat.offers:
                    if k > 0:
                        found.setdefault(s, []).append((pi, k, pat.modes, pat.cost, offers))
            self._offering[key] = found
        return found


class Greedy:
    """One greedy pass over the demands in a given order."""

    def __init__(
        self,
        problem: Problem,
        order: list[int],
        forced: dict[int, int | None] | None = None,
        static: _Static | None = None,
    ) -> None:
        self.p = problem
        self.order = order
        self.forced = forced or {}
        st = self.static = static or _Static(problem)
        self.state = [x.copy() for x in st.initial]
        self.class_sets = st.class_sets
        self.unit_value = st.unit_value
        self.slot_modes = st.slot_modes
        self.fp = st.fp
        self.first_need = st.first_need
        self.free_units = sum(sum(x.free_units) for x in self.state)
        self.future_weight = sum(d.weight * d.quantity for d in problem.demands)
        self.future_eq = sum(self.fp[i] * d.quantity for i, d in enumerate(problem.demands))
        self.free_value = sum(
            (g.count - sum(n for _, n in g.fixed)) * g.unit_cost
            for b in problem.bins
            for g in b.groups
        )
        self.need: dict[str, int] = defaultdict(int)
        for slot, amount in self.first_need.values():
            self.need[slot] += amount
        # _grow's pattern choices, valid while no want changes below a slot's cap
        self._picks: dict[tuple[object, ...], int | None] = {}
        self._splits: dict[tuple[int, float], tuple[tuple[Use, ...], tuple[Use, ...]]] = {}
        # indexes kept current on commit: bins with free slots, open bins with free units,
        # and the closed bins of each class (lowest index first)
        self.with_free: dict[str, set[int]] = defaultdict(set)
        self.open_with_units: set[int] = set()
        self.closed: dict[int, list[int]] = defaultdict(list)
        for b, x in enumerate(self.state):
            self._index(b, x)
        for c in self.closed:
            self.closed[c].sort(reverse=True)  # pop() gives the lowest index

    def _index(self, b: int, x: _BinState) -> None:
        for s, n in x.free.items():
            if n > 0:
                self.with_free[s].add(b)
            else:
                self.with_free[s].discard(b)
        if x.opened and any(x.free_units):
            self.open_with_units.add(b)
        else:
            self.open_with_units.discard(b)
        if not x.opened:
            self.closed[self.static.class_of[b]].append(b)

    # -- state access -------------------------------------------------------------------

    def _read(self, t: _Trial, b: int) -> _BinState:
        return t.touched.get(b) or self.state[b]

    def _write(self, t: _Trial, b: int) -> _BinState:
        st = t.touched.get(b)
        if st is None:
            st = t.touched[b] = self.state[b].copy()
        return st

    # -- one trial ----------------------------------------------------------------------

    def _take(self, t: _Trial, b: int, u: Use, remaining: int) -> int:
        st = self._read(t, b)
        k = min(remaining, max(0, st.free.get(u.slot, 0)) // u.amount)
        if k:
            st = self._write(t, b)
            st.free[u.slot] -= k * u.amount
            t.placements.append((b, u.slot, k))
            t.placed += k
        return remaining - k

    def _pick(self, b: int, gi: int, u: Use, bin_modes: frozenset[str], wanted: int) -> int | None:
        best: tuple[float, int, float, int] | None = None
        chosen = None
        need = self.need
        table = self.static.offering(self.p, b, gi)
        for pi, own, modes, cost, offers in table.get(u.slot, ()):
            if modes is not None and not (modes & bin_modes):
                continue
            value = 0.0
            for s, k, size in offers:
                want = need.get(s, 0) + (wanted if s == u.slot else 0)
                if want > 0:
                    value += (k if k < want else want) * size
            key = (value, min(own, max(wanted, 0)), -cost, -pi)
            if best is None or key > best:
                best, chosen = key, pi
        return chosen

    def _configure(self, t: _Trial, b: int, gi: int, pi: int, n: int) -> None:
        st = self._write(t, b)
        bn = self.p.bins[b]
        g = bn.groups[gi]
        pat = g.patterns[pi]
        if not st.opened:
            st.opened = True
            t.cost += bn.open_cost
        st.free_units[gi] -= n
        st.config[gi][pi] = st.config[gi].get(pi, 0) + n
        if pat.modes is not None:
            st.modes = st.modes & pat.modes
        for s, k in pat.offers:
            st.free[s] = st.free.get(s, 0) + k * n
        t.cost += n * (g.unit_cost + pat.cost)
        t.configured.append((b, gi, pi, n))

    def _grow(self, t: _Trial, b: int, uses: tuple[Use, ...], remaining: int) -> int:
        """New units of bin b for the items left, each in the pattern that covers most of
        what is wanted. The choice is memoised: it depends only on the bin's class, group
        and modes and on the wants as far as any pattern can serve them (`slot_cap`)."""
        groups = self.p.bins[b].groups
        touched = t.touched
        picks = self._picks
        need = self.need
        static = self.static
        cls = static.cls_of[b]
        for u in uses:
            slot, amount = u.slot, u.amount
            cap = static.slot_cap[slot]
            for gi in range(len(groups)):
                while remaining > 0:
                    st = touched.get(b) or self.state[b]
                    if st.free_units[gi] <= 0:
                        break
                    wanted = remaining * amount - max(0, st.free.get(slot, 0))
                    key = (
                        cls, gi, slot, st.modes,
                        max(0, min(need.get(slot, 0) + wanted, cap)), min(max(wanted, 0), cap),
                    )  # fmt: skip
                    pi = picks.get(key, -1)
                    if pi == -1:
                        pi = picks[key] = self._pick(b, gi, u, st.modes, wanted)
                    if pi is None:
                        break
                    offer = groups[gi].patterns[pi].offered(slot)
                    units = max(1, math.ceil(wanted / offer))
                    # the last unit may want another pattern: configure it on its own
                    n = min(units - 1 if units > 1 else 1, st.free_units[gi])
                    self._configure(t, b, gi, pi, n)
                    st = touched[b]
                    k = min(remaining, max(0, st.free.get(slot, 0)) // amount)
                    if k:
                        st.free[slot] -= k * amount
                        t.placements.append((b, slot, k))
                        t.placed += k
                        remaining -= k
                if remaining == 0:
                    return 0
        return remaining

    def _try(self, d: int, o: int, quantity: int) -> _Trial:
        t = _Trial()
        remaining = quantity
        member = self.static.class_sets.get((d, o), frozenset())
        class_of = self.static.class_of
        by_class = self.p.uses.by_class
        candidates: set[int] = set()
        for slot in self.static.slots_for.get((d, o), ()):
            candidates |= self.with_free.get(slot, set())
        # free slots no larger than the densest way to serve this option (others stay for
        # demands that need them; they are used last)
        limit = self.static.share.get((d, o), math.inf) * 1.5 + 1e-9
        if self.free_units < 1.25 * (self.future_eq + self.fp[d] * quantity):
            limit = math.inf  # units are scarce: take whatever is free
        sizes = self.p.slot_sizes
        later: list[tuple[int, Use]] = []
        for b in sorted(b for b in candidates if class_of[b] in member):
            for u in by_class[d, o, class_of[b]]:
                if u.amount * sizes.get(u.slot, 1.0) > limit:
                    later.append((b, u))
                    continue
                remaining = self._take(t, b, u, remaining)
                if remaining == 0:
                    return t
        grow_later: list[tuple[int, tuple[Use, ...]]] = []
        # more units in bins already open
        for b in sorted(b for b in self.open_with_units if class_of[b] in member):
            dense, loose = self._split(d, o, class_of[b], limit)
            if loose:
                grow_later.append((b, loose))
            if dense:
                remaining = self._grow(t, b, dense, remaining)
                if remaining == 0:
                    return t
        # new bins: the cheapest class first, its bins in index order
        classes = []
        for c, closed in self.closed.items():
            if closed and c in member:
                first = closed[-1]
                classes.append((self._opening_cost(first, by_class[d, o, c][0]), first, c))
        for _, _, c in sorted(classes):
            for b in reversed(self.closed[c]):
                remaining = self._grow(t, b, by_class[d, o, c], remaining)
                if remaining == 0:
                    return t
        for b, u in later:  # larger free slots, when nothing else is left
            remaining = self._take(t, b, u, remaining)
            if remaining == 0:
                return t
        for b, loose in grow_later:
            remaining = self._grow(t, b, loose, remaining)
            if remaining == 0:
                return t
        return t

    def _split(
        self, d: int, o: int, c: int, limit: float
    ) -> tuple[tuple[Use, ...], tuple[Use, ...]]:
        """A class's uses for (d, o): those no larger than `limit`, and the rest."""
        uses = self.p.uses.by_class[d, o, c]
        key = (id(uses), limit)  # demands of one shape share their uses' tuples
        found = self._splits.get(key)
        if found is None:
            sizes = self.p.slot_sizes
            dense = tuple(u for u in uses if u.amount * sizes.get(u.slot, 1.0) <= limit)
            loose = tuple(u for u in uses if u not in dense)
            found = self._splits[key] = (dense, loose)
        return found

    def _opening_cost(self, b: int, u: Use) -> float:
        """Cost per item of opening bin b for this use (bin cost spread over its capacity)."""
        key = (self.static.cls_of[b], u.slot, u.amount)
        cached = self.static.opening.get(key)
        if cached is not None:
            return cached
        bn = self.p.bins[b]
        best = math.inf
        total_units = sum(g.count for g in bn.groups) or 1
        for g in bn.groups:
            for pat in g.patterns:
                k = pat.offered(u.slot)
                if k:
                    per_unit = (g.unit_cost + pat.cost) * u.amount / k
                    best = min(best, per_unit + bn.open_cost / (total_units * k) * u.amount)
        self.static.opening[key] = best
        return best

    def _score(self, t: _Trial, d: int, o: int) -> float:
        dem = self.p.demands[d]
        credit = 0.0
        need = dict(self.need)
        for b, st in sorted(t.touched.items()):
            before = self.state[b].free
            grown = [(s, n) for s, n in st.free.items() if n > 0 and n > before.get(s, 0)]
            for s, n in sorted(grown):
                extra = n - max(0, before.get(s, 0))
                if extra > 0 and need.get(s, 0) > 0:
                    used = min(extra, need[s])
                    need[s] -= used
                    credit += used * self.p.slot_sizes.get(s, 0.0) * self.unit_value[b]
        unplaced = dem.quantity - t.placed
        units = sum(n for _b, _g, _p, n in t.configured)
        return (
            t.cost - credit + self._mode_loss(t, need) + dem.weight * unplaced
            + units * self._scarcity_price()
            + dem.option_cost(o) * t.placed
        )  # fmt: skip

    def _scarcity_price(self) -> float:
        """When later demands cannot all fit, a unit is worth what they would pay for it."""
        if self.future_eq <= 0:
            return 0.0
        excess = (self.future_eq - self.free_units) / self.future_eq
        if excess <= 0:
            return 0.0
        return min(1.0, excess) * self.future_weight / self.future_eq

    def _mode_loss(self, t: _Trial, need: dict[str, int]) -> float:
        """What narrowing bins' modes costs later demands: nothing while the rest of the
        fleet can still take what they want, otherwise the free units that can no longer
        offer a slot someone still wants (as far as the rest falls short)."""
        state = self.state
        changed = [b for b, st in t.touched.items() if st.modes is not state[b].modes]
        if not changed:  # most trials narrow no bin's modes
            return 0.0
        lost = 0.0
        for b in sorted(changed):
            st = t.touched[b]
            before = state[b].modes
            if st.modes == before:
                continue
            bn = self.p.bins[b]
            for gi, table in enumerate(self.slot_modes[bn.cls or bn.key]):
                free = st.free_units[gi]
                if not free:
                    continue
                for s, (modes, _offer) in table.items():
                    if (
                        need.get(s, 0) > 0
                        and modes is not None
                        and modes & before
                        and not modes & st.modes
                    ):
                        lost += free * bn.groups[gi].unit_cost
                        break
        if lost <= 0:  # most trials change no bin's modes: the sum below is skipped
            return 0.0
        wanted = sum(n * self.p.slot_sizes.get(s, 0.0) for s, n in need.items() if n > 0)
        if wanted <= 0:
            return 0.0
        short = wanted - (self.free_value - lost)
        return min(max(short, 0.0), lost)

    def _commit(self, t: _Trial) -> None:
        for b, st in t.touched.items():
            bn = self.p.bins[b]
            for gi, g in enumerate(bn.groups):
                taken = self.state[b].free_units[gi] - st.free_units[gi]
                self.free_value -= taken * g.unit_cost
                self.free_units -= taken
            was_open = self.state[b].opened
            self.state[b] = st
            for slot in set(st.free) | set(self.state[b].free):
                if st.free.get(slot, 0) > 0:
                    self.with_free[slot].add(b)
                else:
                    self.with_free[slot].discard(b)
            if st.opened and any(st.free_units):
                self.open_with_units.add(b)
            else:
                self.open_with_units.discard(b)
            if st.opened and not was_open:
                self.closed[self.static.class_of[b]].remove(b)

    def _want_less(self, slot: str, amount: int) -> None:
        cap = self.static.slot_cap[slot]
        before = self.need[slot]
        self.need[slot] = before - amount
        if max(0, min(before, cap)) != max(0, min(before - amount, cap)):
            self._picks.clear()  # a pattern's value may change

    # -- the pass -----------------------------------------------------------------------

    def run(self) -> tuple[list[int | None], list[Placement], list[tuple[int, int, int, int]]]:
        chosen: list[int | None] = [None] * len(self.p.demands)
        placements: list[Placement] = []
        configured: list[tuple[int, int, int, int]] = []
        for d in self.order:
            dem = self.p.demands[d]
            options = [o for o in range(len(dem.options)) if (d, o) in self.class_sets]
            if d in self.forced:
                f = self.forced[d]
                options = [] if f is None else [o for o in options if o == f]
            slot, amount = self.first_need.get(d, ("", 0))
            if slot:
                self._want_less(slot, amount)
            self.future_weight -= dem.weight * dem.quantity
            self.future_eq -= self.fp[d] * dem.quantity
            best: tuple[float, int, _Trial] | None = None
            for o in options:
                t = self._try(d, o, dem.quantity)
                score = self._score(t, d, o)
                if best is None or score < best[0] - _EPS:
                    best = (score, o, t)
            if best is None or best[2].placed == 0:
                continue
            _, o, t = best
            self._commit(t)
            chosen[d] = o
            placements += [Placement(d, o, b, s, k) for b, s, k in t.placements]
            configured += t.configured
        return chosen, placements, configured

    def solution(self, solver: str) -> Solution:
        chosen, placements, _ = self.run()
        return self.to_solution(chosen, placements, solver)

    def to_solution(
        self, chosen: list[int | None], placements: list[Placement], solver: str
    ) -> Solution:
        plans = []
        for bn, st in zip(self.p.bins, self.state, strict=True):
            mode = next((m for m in bn.modes if m in st.modes), bn.modes[0])
            pats: dict[str, dict[str, int]] = {}
            for g, cfg in zip(bn.groups, st.config, strict=True):
                counts = {g.patterns[pi].key: n for pi, n in sorted(cfg.items()) if n}
                if counts:
                    pats[g.key] = counts
            plans.append(BinPlan(mode, pats))
        merged: dict[tuple[int, int, int, str], int] = defaultdict(int)
        for pl in placements:
            merged[pl.demand, pl.option, pl.bin, pl.slot] += pl.count
        pls = [Placement(d, o, b, s, n) for (d, o, b, s), n in sorted(merged.items())]
        sol = Solution(plans, chosen, pls, solver)
        sol.objective = evaluate(self.p, sol)
        return sol


def orders(problem: Problem, static: _Static | None = None) -> list[list[int]]:
    """Demand orders to try, best first."""
    st = static or _Static(problem)
    n = len(problem.demands)
    n_opts, fp, dem = st.n_opts, st.fp, problem.demands
    by_rigid = sorted(range(n), key=lambda d: (n_opts[d], -fp[d], -dem[d].weight, d))
    by_size = sorted(range(n), key=lambda d: (-fp[d], n_opts[d], d))
    by_volume = sorted(range(n), key=lambda d: (-fp[d] * dem[d].quantity, d))
    by_weight = sorted(range(n), key=lambda d: (-dem[d].weight / max(fp[d], 1e-6), d))
    out: list[list[int]] = []
    for o in (by_rigid, by_size, by_volume, by_weight):
        if o not in out:
            out.append(o)
    return out


def solve_heuristic(
    problem: Problem,
    *,
    effort: int | None = None,
    deadline: float | None = None,
    budget: Budget | None = None,
) -> Solution:
    """The best of several greedy passes. `effort` caps the passes (default: by size);
    passes stop at `deadline` (time.monotonic) and when `budget` is spent."""
    size = len(problem.bins) * max(1, len(problem.demands))
    if effort is None:
        effort = 400 if size <= 500 else 100 if size <= 5_000 else 20 if size <= 20_000 else 1
    runs = 0

    def out_of_time() -> bool:
        return (
            runs >= effort
            or (deadline is not None and time.monotonic() > deadline)
            or (budget is not None and budget.spent())
        )

    static = _Static(problem)

    def run(order: list[int], forced: dict[int, int | None]) -> Solution:
        nonlocal runs
        runs += 1
        return Greedy(problem, order, forced, static=static).solution("heuristic")

    best: Solution | None = None
    best_order: list[int] = []
    best_forced: dict[int, int | None] = {}
    # starts: each order as it is, then each order with every demand on its densest option
    densest: dict[int, int | None] = {
        d: min(static.options_of[d], key=lambda o: (static.share[d, o], o))
        for d in range(len(problem.demands))
        if static.options_of[d]
    }
    for start in ({}, densest):
        for order in orders(problem, static):
            sol = run(order, start)
            if best is None or sol.objective < best.objective - _EPS:
                best, best_order, best_forced = sol, order, dict(start)
            if out_of_time():
                break
        if out_of_time():
            break
    assert best is not None
    forced: dict[int, int | None] = best_forced
    rng = random.Random(0)
    improved = True
    while improved and not out_of_time():
        improved = False
        # repair: a demand left (partly) unplaced goes first, and then also ahead of the
        # least valuable demands that sit where it could (they go last)
        left = best.unplaced(problem)
        for d in sorted(range(len(left)), key=lambda d: (-left[d] * problem.demands[d].weight, d)):
            if not left[d] or out_of_time():
                continue
            trials = [] if best_order[0] == d else [[d] + [x for x in best_order if x != d]]
            where = {c for (dd, _o), cs in static.class_sets.items() if dd == d for c in cs}
            rivals = sorted(
                {
                    pl.demand
                    for pl in best.placements
                    if problem.class_of[pl.bin] in where and pl.demand != d
                },
                key=lambda r: (problem.demands[r].weight / max(static.fp[r], 1e-6), r),
            )
            for r in rivals[:3]:
                trials.append([d] + [x for x in best_order if x not in (d, r)] + [r])
            for order in trials:
                if out_of_time():
                    break
                sol = run(order, forced)
                if sol.objective < best.objective - _EPS:
                    best, best_order, improved = sol, order, True
                    break
            if improved:
                break
        if improved:
            continue
        # re-selection: force one demand onto another option (or onto nothing)
        for d in range(len(problem.demands)):
            n_opts = len(problem.demands[d].options)
            choices: list[int | None] = [o for o in range(n_opts) if o != best.chosen[d]]
            if best.chosen[d] is not None:
                choices.append(None)
            for o in choices:
                if out_of_time():
                    break
                trial = dict(forced)
                trial[d] = o
                sol = run(best_order, trial)
                if sol.objective < best.objective - _EPS:
                    best, forced, improved = sol, trial, True
        if improved or out_of_time():
            continue
        # perturbation: move one demand elsewhere in the order (a seeded, repeatable walk)
        n = len(best_order)
        for _ in range(min(4 * n, 200)):
            if out_of_time() or n < 2:
                break
            i, j = rng.randrange(n), rng.randrange(n)
            if i == j:
                continue
            order = list(best_order)
            order.insert(j, order.pop(i))
            sol = run(order, forced)
            if sol.objective < best.objective - _EPS:
                best, best_order, improved = sol, order, True
                break
    best.note = f"{runs} greedy passes"
    return best


def report_solution(problem: Problem, sol: Solution, reporter: BaseReporter) -> None:
    """The decisions of a finished solution, as reporter events (both solvers use this)."""
    for bn, plan in zip(problem.bins, sol.bins, strict=True):
        if plan.units_used() or bn.fixed_mode is not None:
            reporter.setting_mode(bn.key, plan.mode)
        for group, counts in plan.patterns.items():
            for pattern, n in counts.items():
                reporter.configuring(bn.key, group, pattern, n)
    unplaced = sol.unplaced(problem)
    by_demand: dict[int, list[Placement]] = defaultdict(list)
    for pl in sol.placements:
        by_demand[pl.demand].append(pl)
    for d, dem in enumerate(problem.demands):
        o = sol.chosen[d]
        reporter.choosing(
            dem.key, dem.options[o] if o is not None else None, dem.quantity - unplaced[d],
            dem.quantity,
        )  # fmt: skip
        for pl in by_demand[d]:
            reporter.placing(
                dem.key, dem.options[pl.option], problem.bins[pl.bin].key, pl.slot, pl.count
            )
        if unplaced[d]:
            reporter.leaving(dem.key, unplaced[d])
