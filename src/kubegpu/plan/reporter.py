"""The planner's reporter: every decision, in words, for `kubegpu plan --explain`.

It receives two kinds of events: the rule book's (a method refused for a workload, a
prerequisite on a node, a flagged fact), sent by the provider, and the algorithm core's
(an option chosen, units configured, items placed or left over), whose keys it turns back
into GPU terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubegpu.plan.core import BaseReporter, Solution


@dataclass(frozen=True)
class Reason:
    subject: str  # "workload chat", "node gpu-h200", "plan"
    rule: str  # a rule id from kubegpu.plan.rules, or "" for the solver's own steps
    text: str


def describe_option(option: str | None) -> str:
    if option is None:
        return "nothing"
    if option.startswith("mig:"):
        return f"MIG {option[4:]}"
    method, _, model = option.partition("@")
    text = {"whole": "whole GPUs", "mps": "MPS", "time-slicing": "time-slicing"}.get(method, method)
    return f"{text} on {model} only" if model else text


def describe_pattern(pattern: str) -> str:
    if pattern.startswith("mig:"):
        return "MIG " + pattern[4:].replace("*", "x")
    if pattern.startswith(("ts:", "mps:")):
        kind, _, r = pattern.partition(":")
        return f"{'time-slicing' if kind == 'ts' else 'MPS'} x{r}"
    return {"whole": "whole GPU", "busy": "busy (running work)"}.get(pattern, pattern)


def describe_mode(mode: str) -> str:
    if mode == "none":
        return "no sharing"
    kind, _, r = mode.partition(":")
    return f"{'time-slicing' if kind == 'ts' else 'MPS'} with {r} replicas per GPU"


@dataclass
class PlanReporter(BaseReporter):
    reasons: list[Reason] = field(default_factory=list)
    solver: str = ""
    _seen: set[Reason] = field(default_factory=set, repr=False)

    def add(self, subject: str, rule: str, text: str) -> None:
        r = Reason(subject, rule, text)
        if r not in self._seen:
            self._seen.add(r)
            self.reasons.append(r)

    # rule-book events (from the provider)

    def refused(self, workload: str, method: str, rule: str, why: str) -> None:
        self.add(f"workload {workload}", rule, f"not {describe_option(method)}: {why}")

    def note(self, subject: str, rule: str, text: str) -> None:
        self.add(subject, rule, text)

    # core events

    def starting(self, bins: int, demands: int, solver: str) -> None:
        self.solver = solver
        self.add("plan", "", f"{demands} workloads on {bins} nodes, solved by the {solver} solver")

    def unavailable(self, demand: str, option: str) -> None:
        self.add(
            f"workload {demand}",
            "",
            f"not {describe_option(option)}: no node in the fleet offers it",
        )

    def choosing(self, demand: str, option: str | None, placed: int, quantity: int) -> None:
        if option is None:
            if quantity:
                self.add(f"workload {demand}", "", "nothing placed")
            return
        self.add(
            f"workload {demand}",
            "",
            f"{describe_option(option)}: {placed} of {quantity} replicas placed",
        )

    def configuring(self, bin: str, group: str, pattern: str, units: int) -> None:
        self.add(f"node {bin}", "", f"{units} {group} GPU(s) as {describe_pattern(pattern)}")

    def setting_mode(self, bin: str, mode: str) -> None:
        self.add(f"node {bin}", "", f"device plugin: {describe_mode(mode)}")

    def leaving(self, demand: str, count: int) -> None:
        self.add(f"workload {demand}", "", f"{count} replicas left over")

    def ending(self, solution: Solution) -> None:
        proof = "optimal" if solution.optimal else "not proven optimal"
        bound = f", bound {solution.bound:.4g}" if solution.bound is not None else ""
        self.add(
            "plan",
            "",
            f"objective {solution.objective:.4g} ({proof}{bound}; {solution.note})",
        )

    def reset(self) -> None:
        """Forget every reason: the plan is made again."""
        self.reasons.clear()
        self._seen.clear()
        self.solver = ""

    def by_subject(self) -> dict[str, list[Reason]]:
        out: dict[str, list[Reason]] = {}
        for r in self.reasons:
            out.setdefault(r.subject, []).append(r)
        return out
