"""The GPU provider: hardware facts and rules, in the algorithm core's terms.

- a node is a bin; its GPUs of one model are a group of units (a GPU with state of its own,
  such as running work or a current MIG layout, is a group of one);
- a node's mode is its device-plugin sharing: `none`, `ts:<replicas>` or `mps:<replicas>`;
- a GPU's pattern is what it becomes: `whole` (slot `gpu:<model>`), a MIG mix
  (`mig:<profile>*<n>+...`, slots `mig:<profile>`, allowed unless the node runs MPS), or a
  shared GPU (`ts:<r>` / `mps:<r>`, slot `<kind>:<r>:<model>`, only under that mode);
- a workload is a demand; its options are `whole`, `mig:<profile>`, `mps`, `time-slicing`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache

from kubegpu.catalog import GpuModel, get_model
from kubegpu.mig.geometry import Layout, iter_layouts, mix_of, place
from kubegpu.plan import rules
from kubegpu.plan.core import Bin, Demand, Group, Pattern, Use
from kubegpu.plan.inputs import (
    MAX_NODES,
    Current,
    CurrentGpu,
    NodeFacts,
    PlanInput,
    ServerType,
    Workload,
)
from kubegpu.plan.reporter import PlanReporter

# Small costs that only break ties between plans using as many GPUs: changing a GPU's
# MIG configuration, and isolating less than a whole GPU or MIG does.
CHANGE_COST = 1e-3
MPS_COST = 2e-5
TIME_SLICING_COST = 4e-5
# ...and, among cards that serve alike, using the smaller one (memory over the largest card's).
# Opening a node of the fleet costs nothing (a cost there makes the exact solver much slower
# to prove optimality for little gain).
SIZE_COST = 1e-3
NODE_COST = 0.0

# NVLink joins the GPUs of SXM boards (NVSwitch) and NVL boards (bridges); the PCIe cards
# in the catalog have none. The catalog has no NVLink field, so this is the planner's
# default; a node's `nvlink:` overrides it.
NVLINK_MODELS = frozenset(
    {"a100-40gb", "a100-80gb", "h100-80gb", "h100-nvl", "gh200", "gh200-144gb", "h200",
     "h200-nvl", "b200", "gb200"}
)  # fmt: skip


@dataclass
class NodeGroup:
    key: str
    model: GpuModel
    indexes: tuple[int, ...]


@dataclass
class Node:
    """One node (or candidate server) as the planner sees it."""

    name: str
    models: tuple[GpuModel, ...]  # per GPU index
    facts: NodeFacts
    current: Current | None = None
    server: ServerType | None = None
    groups: list[NodeGroup] = field(default_factory=list)
    mig_ok: dict[str, bool] = field(default_factory=dict)  # model id -> MIG usable here
    profiles: dict[str, tuple[str, ...]] = field(default_factory=dict)  # model id -> usable
    cls: str = ""

    @property
    def nvlink(self) -> bool:
        if self.facts.nvlink is not None:
            return self.facts.nvlink
        return all(m.id in NVLINK_MODELS for m in self.models)

    def count(self, model: GpuModel) -> int:
        return sum(1 for m in self.models if m.id == model.id)

    def distinct(self) -> list[GpuModel]:
        found = self.__dict__.get("_distinct")
        if found is None:
            found = self.__dict__["_distinct"] = list({m.id: m for m in self.models}.values())
        return found


def mix_key(mix: dict[str, int] | Counter[str]) -> str:
    return "mig:" + "+".join(f"{p}*{n}" for p, n in sorted(mix.items()) if n)


def parse_mix_key(key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in key.removeprefix("mig:").split("+"):
        if part:
            name, _, n = part.rpartition("*")
            out[name] = int(n)
    return out


@cache
def maximal_mixes(
    model: GpuModel, profiles: frozenset[str], driver: str | None = None
) -> tuple[dict[str, int], ...]:
    """Every maximal placeable mix of these profiles on one GPU (geometry, not slice counts)
    that the node's driver can create (some pairs need a newer driver than the model)."""
    assert model.mig is not None
    ps = [p for p in model.mig.gpu_instance_profiles if p.name in profiles]
    if not ps:
        return ()
    seen: dict[tuple[tuple[str, int], ...], None] = {}
    for layout in iter_layouts(model, ps, maximal_only=True, driver=driver):
        seen.setdefault(mix_of(layout), None)
    mixes = [dict(m) for m in seen]
    # drop mixes another mix offers all of (same cost, fewer slots)
    out = [
        m
        for m in mixes
        if not any(
            o is not m and o != m and all(o.get(k, 0) >= v for k, v in m.items()) for o in mixes
        )
    ]
    return tuple(sorted(out, key=lambda m: sorted(m.items())))


class GpuProvider:
    """Implements the core's Provider protocol for a fleet and its workloads."""

    def __init__(
        self,
        inp: PlanInput,
        reporter: PlanReporter | None = None,
        one_model: frozenset[str] = frozenset(),
    ) -> None:
        self.inp = inp
        # workloads whose full-GPU replicas (whole or shared) must all sit on one GPU model:
        # their options are split per model (`whole@l4`), one of which the solver chooses
        self.one_model = one_model
        self.rep = reporter or PlanReporter()
        self.workloads = {w.name: w for w in inp.workloads}
        self._shape = {w.name: _shape(w) for w in inp.workloads}
        self.nodes: list[Node] = self._fleet() + self._candidates()
        self._by_key = {n.name: n for n in self.nodes}
        self.methods = {w.name: self._methods(w) for w in inp.workloads}
        self._check_nodes()
        self.representatives = list({n.cls: n for n in reversed(self.nodes)}.values())[::-1]
        self._slot_sizes: dict[str, float] = {}
        self._uses: dict[tuple[tuple[object, ...], str, str], tuple[Use, ...]] = {}
        self.mig_profiles = self._mig_options()
        self._demanded = frozenset(p for ps in self.mig_profiles.values() for p in ps)
        # nodes of one class are alike: their replica choices and bins are computed once
        by_class = {n.cls: self._replica_choices(n) for n in self.representatives}
        self.replica_choices = {n.name: by_class[n.cls] for n in self.nodes}
        self._bins: list[Bin] = []
        self.layouts: dict[tuple[str, str], Layout] = {}  # (model, pattern) -> layout
        self.weight_base = self._weight_base()
        made: dict[str, Bin] = {}
        for n in self.nodes:
            first = made.get(n.cls)
            if first is None:
                first = made[n.cls] = self._bin(n)
                self._bins.append(first)
            else:
                self._bins.append(replace(first, key=n.name))

    # -- fleet --------------------------------------------------------------------------

    def _fleet(self) -> list[Node]:
        out = []
        for spec in self.inp.fleet:
            models = tuple(m for m, n in spec.models() for _ in range(n))
            names = (
                [spec.name]
                if spec.count == 1
                else [f"{spec.name}-{i}" for i in range(1, spec.count + 1)]
            )
            for name in names:
                out.append(Node(name, models, spec.facts(), spec.current))
        return out

    def _candidates(self) -> list[Node]:
        """Buy mode: candidate servers of each type, as many as the demand could need."""
        out = []
        for st in self.inp.buy:
            model = get_model(st.model)
            need = 0
            for w in self.inp.workloads:
                if rules.whole_rejection(w, model) is None and w.gpus <= st.max_cards:
                    need += math.ceil(w.replicas / (st.max_cards // w.gpus))
                elif model.mig is not None and w.gpus == 1:
                    need += math.ceil(w.replicas / st.max_cards)
            # without max_servers, as many as max_servers could say: the demand (replicas
            # are unbounded) never expands into more candidates than a fleet may have nodes
            limit = min(need, MAX_NODES if st.max_servers is None else st.max_servers)
            facts = NodeFacts(driver=st.driver, display=st.display, nvlink=st.nvlink)
            taken = set(self.inp.node_names())
            prefix = (
                st.name if not any(n.startswith(f"{st.name}-") for n in taken) else f"{st.name}-buy"
            )
            for i in range(1, limit + 1):
                out.append(Node(f"{prefix}-{i}", (model,) * st.max_cards, facts, None, st))
        return out

    def _check_nodes(self) -> None:
        for node in self.nodes:
            for model in node.distinct():
                ok = self._mig_usable(node, model)
                node.mig_ok[model.id] = ok
                node.profiles[model.id] = (
                    tuple(p.name for p in rules.usable_profiles(model, node.facts.driver))
                    if ok
                    else ()
                )
            self._groups(node)
            node.cls = self._signature(node)

    def _mig_usable(self, node: Node, model: GpuModel) -> bool:
        subject = f"node {node.name}"
        if model.mig is None:
            return False
        unconfirmed = rules.mig_unconfirmed(model)
        if unconfirmed and not self.inp.options.allow_unconfirmed_mig:
            self.rep.note(
                subject,
                "mig-unconfirmed",
                f"MIG on {model.id} not used: its geometry is unconfirmed "
                f"({', '.join(unconfirmed)}); allow_unconfirmed_mig: true plans with the catalog's inferred values",
            )
            return False
        problem = rules.mig_driver_problem(model, node.facts.driver)
        if problem:
            self.rep.note(subject, "mig-driver", f"MIG not used: {problem}")
            return False
        return True

    def _groups(self, node: Node) -> None:
        current = node.current.gpus if node.current else {}
        by_model: dict[str, list[int]] = {}
        for i, m in enumerate(node.models):
            if i in current:
                node.groups.append(NodeGroup(f"gpu{i}", m, (i,)))
            else:
                by_model.setdefault(m.id, []).append(i)
        for mid, idx in by_model.items():
            model = next(m for m in node.models if m.id == mid)
            node.groups.append(NodeGroup(mid, model, tuple(idx)))
        node.groups.sort(key=lambda g: g.indexes[0])

    def _signature(self, node: Node) -> str:
        if node.current is not None:
            return f"node:{node.name}"
        server = node.server.name if node.server else ""
        models = ",".join(m.id for m in node.models)
        f = node.facts
        return f"{server}|{models}|{f.driver}|{f.display}|{node.nvlink}"

    # -- workloads ----------------------------------------------------------------------

    def _methods(self, w: Workload) -> list[rules.Method]:
        out: list[rules.Method] = []
        for method in rules.METHODS:
            why = rules.method_rejection(w, method)
            if why is None:
                out.append(method)
            else:
                self.rep.refused(w.name, method, why[0], why[1])
        return out

    def _mig_options(self) -> dict[str, list[str]]:
        """Per workload, the MIG profiles (by name) it fits on some node, smallest first."""
        out: dict[str, list[str]] = {}
        by_shape: dict[tuple[object, ...], tuple[dict[str, float], bool]] = {}
        for w in self.inp.workloads:
            if "mig" not in self.methods[w.name]:
                continue
            known = by_shape.get(self._shape[w.name])
            if known is None:
                known = by_shape[self._shape[w.name]] = self._mig_sizes(w)
            sizes, seen_capable = known
            if not seen_capable:
                self.rep.refused(w.name, "mig", "mig-capable", "no MIG-capable model in the fleet")
            elif not sizes:
                self.rep.refused(
                    w.name, "mig", "fits", "no usable MIG profile holds its memory and compute"
                )
            if w.profile is not None:  # the pods' request names the profile
                sizes = {n: s for n, s in sizes.items() if n == w.profile}
                if not sizes:
                    self.rep.refused(
                        w.name, "mig", "fits", f"no node can hold a MIG {w.profile} instance"
                    )
            out[w.name] = sorted(sizes, key=lambda n: (sizes[n], n))
        return out

    def _mig_sizes(self, w: Workload) -> tuple[dict[str, float], bool]:
        """The MIG profiles that hold the workload on some node, by share of a GPU; and
        whether the fleet has a MIG-capable model at all."""
        sizes: dict[str, float] = {}
        seen_capable = False
        for node in self.representatives:
            for model in node.distinct():
                if model.mig is None:
                    continue
                seen_capable = True
                for name in node.profiles.get(model.id, ()):
                    p = model.mig.profile(name)
                    if rules.profile_rejection(w, model, p) is None:
                        sizes[name] = min(sizes.get(name, 9e9), _slot_size(model, name))
        return sizes, seen_capable

    def _replica_choices(self, node: Node) -> dict[str, list[int]]:
        """Replica counts worth offering on this node, per sharing kind, largest first."""
        out: dict[str, set[int]] = {"ts": set(), "mps": set()}
        for w in self.inp.workloads:
            for method, kind in (("mps", "mps"), ("time-slicing", "ts")):
                if method not in self.methods[w.name]:
                    continue
                for model in node.distinct():
                    r = rules.replicas_for(w, model)
                    if r >= 2:
                        out[kind].add(r)
        if node.current is not None and node.current.sharing != "none":
            kind = "mps" if node.current.sharing == "mps" else "ts"
            assert node.current.replicas is not None
            out[kind].add(node.current.replicas)
        return {k: sorted(v, reverse=True) for k, v in out.items()}

    def _weight_base(self) -> float:
        worst = 1.0
        for node in self.nodes:
            unit = node.server.card_price if node.server else 1.0
            opening = node.server.server_price if node.server else 0.0
            worst = max(worst, opening + unit * len(node.models))
        return 2.0 * worst + 1.0

    # -- bins ---------------------------------------------------------------------------

    def _modes(self, node: Node) -> tuple[str, ...]:
        choices = self.replica_choices[node.name]
        return ("none", *(f"ts:{r}" for r in choices["ts"]), *(f"mps:{r}" for r in choices["mps"]))

    def _demanded_profiles(self) -> frozenset[str]:
        return self._demanded

    def _patterns(self, node: Node, group: NodeGroup, modes: tuple[str, ...]) -> list[Pattern]:
        model = group.model
        pats = [Pattern("whole", ((f"gpu:{model.id}", 1),), frozenset({"none"}))]
        not_mps = frozenset(m for m in modes if not m.startswith("mps:"))
        for kind in ("ts", "mps"):
            for r in self.replica_choices[node.name][kind]:
                if kind == "mps" and r > rules.mps_max_clients(model):
                    continue
                pats.append(
                    Pattern(
                        f"{kind}:{r}", ((f"{kind}:{r}:{model.id}", r),), frozenset({f"{kind}:{r}"})
                    )
                )
        if node.mig_ok.get(model.id):
            usable = frozenset(node.profiles[model.id]) & self._demanded_profiles()
            for mix in maximal_mixes(model, usable, node.facts.driver):
                key = mix_key(mix)
                offers = tuple((f"mig:{p}", n) for p, n in sorted(mix.items()))
                pats.append(Pattern(key, offers, not_mps, CHANGE_COST))
        return pats

    def _bin(self, node: Node) -> Bin:
        modes = self._modes(node)
        groups = []
        largest = max(m.memory_mib for n in self.nodes for m in n.models)
        fixed_mode: str | None = None
        used: list[tuple[str, int]] = []
        cur = node.current
        for g in node.groups:
            pats = self._patterns(node, g, modes)
            fixed: tuple[tuple[str, int], ...] = ()
            state = (
                cur.gpus.get(g.indexes[0]) if cur is not None and g.key.startswith("gpu") else None
            )
            if state is not None:
                pats, fixed, mode, busy_slots = self._current_gpu(node, g, state, pats)
                if mode is not None:
                    fixed_mode = mode
                used += busy_slots
            unit_cost = node.server.card_price if node.server else 1.0
            unit_cost += SIZE_COST * g.model.memory_mib / largest
            groups.append(Group(g.key, len(g.indexes), tuple(pats), unit_cost, fixed))
        if fixed_mode is not None and fixed_mode not in modes:
            modes = (*modes, fixed_mode)
        return Bin(
            node.name,
            tuple(groups),
            modes,
            open_cost=node.server.server_price if node.server else NODE_COST,
            cls=node.cls,
            used=tuple(used),
            fixed_mode=fixed_mode,
        )

    def _current_gpu(
        self, node: Node, g: NodeGroup, state: CurrentGpu, pats: list[Pattern]
    ) -> tuple[list[Pattern], tuple[tuple[str, int], ...], str | None, list[tuple[str, int]]]:
        assert node.current is not None
        model = g.model
        subject = f"node {node.name}"
        cur = node.current
        if state.busy == "whole":
            self.rep.note(
                subject, "", f"GPU {g.indexes[0]} is busy with running work: kept as it is"
            )
            return [Pattern("busy", (), frozenset({"none"}))], (("busy", 1),), "none", []
        if isinstance(state.busy, int) and state.busy:
            kind = "mps" if cur.sharing == "mps" else "ts"
            assert cur.replicas is not None
            key = f"{kind}:{cur.replicas}"
            pat = Pattern(key, ((f"{key}:{model.id}", cur.replicas),), frozenset({key}))
            self.rep.note(
                subject,
                "",
                f"GPU {g.indexes[0]} has {state.busy} shared replicas in use: the node keeps {cur.sharing} x{cur.replicas}",
            )
            return [pat], ((key, 1),), key, [(f"{key}:{model.id}", state.busy)]
        if state.mig is None:
            return pats, (), None, []
        if model.mig is None:
            raise ValueError(
                f"node {node.name}: GPU {g.indexes[0]} ({model.id}) is not MIG-capable"
            )
        layout = place(model, {k: v for k, v in state.mig.items() if v})
        if layout is None:
            raise ValueError(
                f"node {node.name}: GPU {g.indexes[0]}: current MIG layout {state.mig} does not fit a {model.id}"
            )
        busy = dict(state.busy) if isinstance(state.busy, dict) else {}
        current_key = mix_key(Counter(pi.profile.name for pi in layout))
        if any(busy.values()) or state.keep:
            free = Counter(pi.profile.name for pi in layout)
            free.subtract(busy)
            key = "keep:" + current_key.removeprefix("mig:")
            offers = tuple((f"mig:{p}", n) for p, n in sorted(free.items()) if n > 0)
            self.rep.note(
                subject, "mig-in-use",
                f"GPU {g.indexes[0]} keeps its MIG layout ({current_key[4:].replace('*', 'x')}): instances are in use",
            )  # fmt: skip
            self.layouts[model.id, key] = layout
            not_mps = frozenset({"none"}) | frozenset(
                m for m in self._modes(node) if m.startswith("ts:")
            )
            return [Pattern(key, offers, not_mps)], ((key, 1),), None, []
        # re-plannable: the current layout costs nothing to keep, anything else a change
        out = [
            p
            if not p.key.startswith("mig:") or p.key != current_key
            else Pattern(p.key, p.offers, p.modes, 0.0)
            for p in pats
        ]
        if all(p.key != current_key for p in out):
            offers = tuple(
                (f"mig:{p}", n)
                for p, n in sorted(Counter(pi.profile.name for pi in layout).items())
            )
            out.append(
                Pattern(
                    current_key,
                    offers,
                    frozenset(m for m in self._modes(node) if not m.startswith("mps:")),
                    0.0,
                )
            )
            self.layouts[model.id, current_key] = layout
        out = [
            Pattern(p.key, p.offers, p.modes, CHANGE_COST if p.key == "whole" else p.cost)
            for p in out
        ]
        return out, (), None, []

    # -- the Provider protocol ----------------------------------------------------------

    def bins(self) -> Sequence[Bin]:
        return self._bins

    def demands(self) -> Sequence[Demand]:
        out = []
        most: dict[tuple[str, tuple[object, ...]], int] = {}  # shared replicas, per shape
        for w in self.inp.workloads:
            options: list[tuple[float, str, float]] = []  # (share of a GPU, option, cost)
            split = w.name in self.one_model
            for method in self.methods[w.name]:
                if w.profile is not None and method != "mig":
                    continue  # the pods' request names a MIG profile
                if method == "whole":
                    for model in self._models(w, method) if split else [None]:
                        options.append((float(w.gpus), model_option("whole", model), 0.0))
                elif method == "mig":
                    for p in self.mig_profiles.get(w.name, []):
                        options.append((self.slot_size(f"mig:{p}"), f"mig:{p}", 0.0))
                else:
                    kind = "mps" if method == "mps" else "ts"
                    best = most.get((kind, self._shape[w.name]))
                    if best is None:
                        best = most[kind, self._shape[w.name]] = self._most_replicas(w, kind)
                    cost = MPS_COST if method == "mps" else TIME_SLICING_COST
                    for model in self._models(w, method) if split else [None]:
                        options.append((1.0 / best, model_option(method, model), cost))
            # smallest share first: the core reads the first option as the likely one
            options.sort(key=lambda o: (o[0], o[2], o[1]))
            weight = self.weight_base * w.gpus * w.priority
            out.append(
                Demand(
                    w.name,
                    w.replicas,
                    weight,
                    tuple(o[1] for o in options),
                    tuple(o[2] for o in options),
                )
            )
        return out

    def _models(self, w: Workload, method: str) -> list[str]:
        """The models in the fleet whose full GPUs could hold the workload by `method`."""
        models = {m.id: m for n in self.representatives for m in n.distinct()}.values()
        if method == "whole":
            return sorted(m.id for m in models if rules.whole_rejection(w, m) is None)
        return sorted(m.id for m in models if rules.replicas_for(w, m) >= 2)

    def _most_replicas(self, w: Workload, kind: str) -> int:
        """The most replicas per GPU any node offers that still hold the workload."""
        return max(
            (r for n in self.representatives for r in self.replica_choices[n.name][kind]
             if any(r <= rules.replicas_for(w, m) for m in n.distinct())),
            default=1,
        )  # fmt: skip

    def node(self, name: str) -> Node:
        return self._by_key[name]

    def uses(self, demand: Demand, option: str, bin: Bin) -> Sequence[Use]:
        w = self.workloads[demand.key]
        node = self._node_by_bin(bin)
        # workloads of one shape on nodes of one class are served alike: computed once
        key = (self._shape[w.name], option, node.cls)
        found = self._uses.get(key)
        if found is None:
            found = self._uses[key] = tuple(self._uses_of(w, option, node))
        return found

    def _uses_of(self, w: Workload, option: str, node: Node) -> Sequence[Use]:
        method, model_id = split_option(option)
        uses = self._method_uses(w, method, node)
        if model_id is None:
            return uses
        return [u for u in uses if slot_model(u.slot) == model_id]

    def _method_uses(self, w: Workload, option: str, node: Node) -> Sequence[Use]:
        out: list[Use] = []
        if option == "whole":
            if w.gpus > 1 and w.nvlink and not node.nvlink:
                return ()
            for model in sorted(node.distinct(), key=lambda m: (m.memory_mib, m.id)):
                if rules.whole_rejection(w, model) is None and node.count(model) >= w.gpus:
                    out.append(Use(f"gpu:{model.id}", w.gpus))
            return out
        if option.startswith("mig:"):
            profile = option[4:]
            for model in node.distinct():
                if profile in node.profiles.get(model.id, ()):
                    assert model.mig is not None
                    if rules.profile_rejection(w, model, model.mig.profile(profile)) is None:
                        return (Use(f"mig:{profile}", 1),)
            return ()
        kind = "mps" if option == "mps" else "ts"
        for model in node.distinct():
            fit = rules.replicas_for(w, model)
            if kind == "mps":
                fit = min(fit, rules.mps_max_clients(model))
            for r in self.replica_choices[node.name][kind]:
                if 2 <= r <= fit:
                    out.append(Use(f"{kind}:{r}:{model.id}", 1))
        return out

    def _node_by_bin(self, bin: Bin) -> Node:
        return self._by_key[bin.key]

    def slot_size(self, slot: str) -> float:
        found = self._slot_sizes.get(slot)
        if found is None:
            found = self._slot_sizes[slot] = self._size(slot)
        return found

    def _size(self, slot: str) -> float:
        kind, _, rest = slot.partition(":")
        if kind == "gpu":
            return 1.0
        if kind in ("ts", "mps"):
            return 1.0 / int(rest.split(":")[0])
        sizes = [
            _slot_size(m, rest)
            for n in self.representatives
            for m in n.distinct()
            if m.mig is not None and any(p.name == rest for p in m.mig.gpu_instance_profiles)
        ]
        return min(sizes) if sizes else 1.0


def model_option(method: str, model: str | None) -> str:
    """A full-GPU option held to one model (`whole@l4`), or the method itself."""
    return method if model is None else f"{method}@{model}"


def split_option(option: str) -> tuple[str, str | None]:
    """`whole@l4` -> ("whole", "l4"); `mps` -> ("mps", None); `mig:1g.10gb` as it is."""
    method, _, model = option.partition("@")
    return method, model or None


def slot_model(slot: str) -> str | None:
    """The model whose full GPUs a slot is on (`gpu:<model>`, `<ts|mps>:<r>:<model>`)."""
    kind, _, rest = slot.partition(":")
    if kind == "gpu":
        return rest
    if kind in ("ts", "mps"):
        return rest.partition(":")[2]
    return None


def _shape(w: Workload) -> tuple[object, ...]:
    """What the rules read of a workload to decide where its replicas fit."""
    return (w.gpus, w.nvlink, w.memory_mib, w.compute_fraction, w.compute_sms)


def _slot_size(model: GpuModel, profile: str) -> float:
    """The share of a GPU one instance takes: the larger of its memory and compute shares."""
    assert model.mig is not None
    p = model.mig.profile(profile)
    return max(p.slices / model.mig.placement_units, p.compute_slices / model.mig.compute_slices)
