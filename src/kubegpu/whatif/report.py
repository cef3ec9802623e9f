"""What a change did to the twin, from two observations of it (pure).

`TwinState` is what the twin showed at one moment: each node's GPUs as the simulated NVML
has them, what it advertises, its MIG config label and state, which pods hold devices on
which GPU, and which GPUs are still not in the layout the label asks for. `build_report`
compares the state before the change with the state after it; `render` and `report_json`
present the result.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kubegpu.doctor.findings import Finding, exit_code
from kubegpu.mig.holders import busy_gpus

# exit codes of `kubegpu what-if run`
CLEAN = 0  # the change goes through, and the doctor finds nothing on the result
WARNINGS = 1  # it goes through; the doctor warns about the result
BLOCKED = 2  # part of it does not go through (blocked, pods Pending, not settled) or errors


@dataclass(frozen=True)
class GpuLayout:
    index: int
    model: str
    mig_capable: bool
    mig_enabled: bool
    devices: tuple[tuple[str, int], ...] = ()  # MIG profile -> count, sorted

    def text(self) -> str:
        if not self.mig_enabled:
            return f"{self.index}: {self.model} whole"
        parts = " + ".join(f"{n}x {p}" for p, n in self.devices) or "no MIG devices"
        return f"{self.index}: {self.model} MIG {parts}"


@dataclass(frozen=True)
class NodeState:
    name: str
    layout: tuple[GpuLayout, ...] = ()
    advertised: dict[str, str] = field(default_factory=dict)  # nvidia.com/* allocatable
    mig_config: str | None = None
    mig_state: str | None = None
    mig_message: str = ""  # the MIG manager's last event about the node
    device_plugin_config: str | None = None
    holders: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pod key -> GPU indexes
    # GPUs whose layout is not (yet) what the node's mig.config label asks for
    changing: tuple[int, ...] = ()


@dataclass(frozen=True)
class PendingPod:
    pod: str
    reason: str


@dataclass(frozen=True)
class PodOutcome:
    """A pod that was Pending in the snapshot, and what became of it on the twin."""

    pod: str
    phase: str  # after the change ("" when the twin has no such pod)
    node: str  # where the twin's scheduler placed it ("" if nowhere)
    reason: str = ""  # why it is still Pending, the scheduler's words

    @property
    def ran(self) -> bool:
        return self.phase == "Running"


@dataclass(frozen=True)
class TwinState:
    nodes: tuple[NodeState, ...]
    pending: tuple[PendingPod, ...] = ()
    settled: bool = True
    unsettled: tuple[str, ...] = ()  # what was still moving when the wait ended
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (phase, node)

    def node(self, name: str) -> NodeState | None:
        return next((n for n in self.nodes if n.name == name), None)


@dataclass(frozen=True)
class BlockedPod:
    pod: str
    node: str
    gpus: tuple[int, ...]  # the GPUs it holds devices on that the change must repartition
    reason: str  # what the MIG manager said


@dataclass(frozen=True)
class NodeReport:
    name: str
    layout_before: tuple[str, ...]
    layout_after: tuple[str, ...]
    repartitioned: bool
    mig_config: tuple[str | None, str | None]  # label before, after
    mig_state: str | None  # after
    not_applied: tuple[int, ...]  # GPUs still not in the layout the label asks for
    advertised_before: dict[str, str]
    advertised_after: dict[str, str]

    @property
    def resources_changed(self) -> bool:
        return self.advertised_before != self.advertised_after


@dataclass(frozen=True)
class Report:
    change: tuple[str, ...]
    nodes: tuple[NodeReport, ...]
    blocked: tuple[BlockedPod, ...]
    pending: tuple[PendingPod, ...]
    findings: tuple[Finding, ...]  # the doctor's, on the twin after the change
    new_findings: tuple[Finding, ...]  # of those, the ones not there before it
    settled: bool
    unsettled: tuple[str, ...]
    notes: tuple[str, ...] = ()
    # the pods Pending in the snapshot (recreated unbound on the twin), after the change
    was_pending: tuple[PodOutcome, ...] = ()

    @property
    def still_pending(self) -> tuple[PodOutcome, ...]:
        """Of the pods Pending in the snapshot, those that do not run after the change."""
        return tuple(p for p in self.was_pending if not p.ran)

    @property
    def exit_code(self) -> int:
        if self.blocked or self.pending or not self.settled:
            return BLOCKED
        if any(n.not_applied for n in self.nodes):
            return BLOCKED
        return exit_code(self.findings)


def build_report(
    before: TwinState,
    after: TwinState,
    *,
    change: Iterable[str] = (),
    findings_before: Iterable[Finding] = (),
    findings_after: Iterable[Finding] = (),
    notes: Iterable[str] = (),
    was_pending: Iterable[str] = (),
) -> Report:
    """What the change did: per node the layout and resources before and after, the pods
    that keep a GPU from being repartitioned, the pods left Pending and the doctor's
    findings on the result; for each pod in `was_pending` (Pending in the snapshot),
    whether it runs after the change."""
    nodes = []
    blocked = []
    for a in after.nodes:
        b = before.node(a.name) or NodeState(a.name)
        nodes.append(
            NodeReport(
                name=a.name,
                layout_before=tuple(g.text() for g in b.layout),
                layout_after=tuple(g.text() for g in a.layout),
                repartitioned=b.layout != a.layout,
                mig_config=(b.mig_config, a.mig_config),
                mig_state=a.mig_state,
                not_applied=a.changing,
                advertised_before=dict(b.advertised),
                advertised_after=dict(a.advertised),
            )
        )
        blocked += blocking_pods(a)
    earlier = {_key(f) for f in findings_before}
    found = tuple(findings_after)
    return Report(
        change=tuple(change),
        nodes=tuple(nodes),
        blocked=tuple(sorted(blocked, key=lambda p: (p.node, p.pod))),
        pending=tuple(sorted(after.pending, key=lambda p: p.pod)),
        findings=found,
        new_findings=tuple(f for f in found if _key(f) not in earlier),
        settled=after.settled,
        unsettled=after.unsettled,
        notes=tuple(notes),
        was_pending=tuple(_outcome(after, key) for key in sorted(was_pending)),
    )


def _outcome(after: TwinState, key: str) -> PodOutcome:
    phase, node = after.pods.get(key, ("", ""))
    reason = next((p.reason for p in after.pending if p.pod == key), "")
    return PodOutcome(key, phase, node, reason)


def blocking_pods(node: NodeState) -> list[BlockedPod]:
    """Pods holding devices on GPUs the node's layout label asks to repartition and that
    were not: the MIG manager refuses to repartition a GPU in use."""
    busy = busy_gpus(node.holders, node.changing)  # the MIG manager's own judgement
    reason = first_line(node.mig_message) if node.mig_state == "failed" else ""
    out = []
    for pod in sorted(node.holders):
        held = tuple(sorted(i for i, holders in busy.items() if pod in holders))
        if held:
            out.append(BlockedPod(pod, node.name, held, reason))
    return out


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _key(f: Finding) -> tuple[str, str, str]:
    return (f.check, f.object, f.summary)


# -- presenting -------------------------------------------------------------------------------


def resource_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """`nvidia.com/gpu: 2 -> 0` for every resource whose count changed; unchanged ones as
    `nvidia.com/gpu: 2`."""
    out = []
    for res in sorted(set(before) | set(after)):
        b, a = before.get(res, "0"), after.get(res, "0")
        out.append(f"{res}: {b}" if a == b else f"{res}: {b} -> {a}")
    return out


def render(report: Report) -> RenderableType:
    """The report for people: the change, a row per node, the blocked and pending pods,
    the doctor's findings on the result, and whether the twin settled."""
    parts: list[RenderableType] = []
    parts.append(Text("Change tried on the twin:", style="bold"))
    parts += [Text(f"  {line}") for line in report.change or ("(nothing)",)]
    for note in report.notes:
        parts.append(Text(f"  note: {note}", style="yellow"))
    table = Table(title="Nodes after the change")
    for column in ("node", "GPUs before", "GPUs after", "mig.config", "advertised"):
        table.add_column(column)
    for n in report.nodes:
        config_before, config_after = n.mig_config
        config = config_after or "-"
        if config_before != config_after:
            config = f"{config_before or '-'} -> {config}"
        if n.mig_state:
            config += f"\n({n.mig_state})"
        after = "\n".join(n.layout_after) or "-"
        if n.repartitioned:
            after = f"[bold]{after}[/]"
        elif n.not_applied:
            after += f"\n[red]not repartitioned: GPU {', '.join(map(str, n.not_applied))}[/]"
        table.add_row(
            n.name,
            "\n".join(n.layout_before) or "-",
            after,
            config,
            "\n".join(resource_changes(n.advertised_before, n.advertised_after)) or "-",
        )
    parts.append(table)
    if report.blocked:
        blocked = Table(title="Pods that block the change", title_style="bold red")
        for column in ("pod", "node", "GPUs", "MIG manager says"):
            blocked.add_column(column)
        for p in report.blocked:
            blocked.add_row(p.pod, p.node, ", ".join(map(str, p.gpus)), p.reason or "-")
        parts.append(blocked)
    if report.pending:
        pending = Table(title="Pods that would stay Pending", title_style="bold red")
        pending.add_column("pod")
        pending.add_column("why")
        for waiting in report.pending:
            pending.add_row(waiting.pod, waiting.reason or "-")
        parts.append(pending)
    if report.was_pending:
        outcome = Table(title="Pods Pending in the snapshot, after the change")
        for column in ("pod", "on the twin", "node"):
            outcome.add_column(column)
        for o in report.was_pending:
            shown = "[green]Running[/]" if o.ran else f"[red]{o.phase or 'absent'}[/]"
            outcome.add_row(o.pod, shown, o.node or "-")
        parts.append(outcome)
    if report.findings:
        findings = Table(title="Doctor on the result")
        for column in ("severity", "check", "object", "summary", "new"):
            findings.add_column(column)
        new = {_key(f) for f in report.new_findings}
        for f in report.findings:
            findings.add_row(
                str(f.severity), f.check, f.object, f.summary, "yes" if _key(f) in new else ""
            )
        parts.append(findings)
    else:
        parts.append(Text("Doctor on the result: no findings", style="green"))
    if not report.settled:
        parts.append(
            Text(
                "The twin did not settle: " + ("; ".join(report.unsettled) or "(no detail)"),
                style="bold red",
            )
        )
    return Group(*parts)


def report_json(report: Report) -> dict[str, Any]:
    """The report for tools (stable keys)."""
    return {
        "change": list(report.change),
        "notes": list(report.notes),
        "settled": report.settled,
        "unsettled": list(report.unsettled),
        "nodes": [
            {
                "name": n.name,
                "repartitioned": n.repartitioned,
                "layout_before": list(n.layout_before),
                "layout_after": list(n.layout_after),
                "mig_config_before": n.mig_config[0],
                "mig_config_after": n.mig_config[1],
                "mig_state": n.mig_state,
                "not_applied_gpus": list(n.not_applied),
                "advertised_before": dict(sorted(n.advertised_before.items())),
                "advertised_after": dict(sorted(n.advertised_after.items())),
            }
            for n in report.nodes
        ],
        "blocked": [
            {"pod": p.pod, "node": p.node, "gpus": list(p.gpus), "reason": p.reason}
            for p in report.blocked
        ],
        "pending": [{"pod": p.pod, "reason": p.reason} for p in report.pending],
        "was_pending": [
            {"pod": o.pod, "ran": o.ran, "phase": o.phase, "node": o.node, "reason": o.reason}
            for o in report.was_pending
        ],
        "findings": [f.as_json() for f in report.findings],
        "new_findings": [f.as_json() for f in report.new_findings],
        "exit_code": report.exit_code,
    }
