"""The doctor's report: a rich table for people, JSON for tools, and the exit code."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from rich.table import Table

from kubegpu.doctor.checks import CHECKS
from kubegpu.doctor.facts import is_gpu_node
from kubegpu.doctor.findings import Finding, Severity, exit_code
from kubegpu.doctor.snapshot import Snapshot
from kubegpu.doctor.why import Verdict

_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow"}


def summary_line(findings: Sequence[Finding], snapshot: Snapshot) -> str:
    errors = sum(1 for f in findings if f.severity is Severity.ERROR)
    warnings = len(findings) - errors
    where = f"{len(snapshot.nodes)} node(s)"
    if not any(is_gpu_node(n) for n in snapshot.nodes):
        where += ", none of them a GPU node"
    if not findings:
        return f"no problems found: {len(CHECKS)} checks on {where}"
    return f"{errors} error(s), {warnings} warning(s): {len(CHECKS)} checks on {where}"


def render_table(findings: Sequence[Finding]) -> Table:
    """One row per finding: severity, object, what is wrong, the evidence and the fix."""
    table = Table(title="kubegpu doctor", show_lines=True)
    for column in ("severity", "check", "object", "problem", "evidence", "fix"):
        table.add_column(column, overflow="fold")
    for f in findings:
        style = _STYLE[f.severity]
        table.add_row(
            f"[{style}]{f.severity}[/{style}]", f.check, f.object, f.summary, f.evidence, f.fix
        )
    return table


def report_json(findings: Sequence[Finding], snapshot: Snapshot) -> str:
    """`{"exit_code", "errors", "warnings", "checks", "source", "taken_at", "findings"}`."""
    doc = {
        "exit_code": exit_code(findings),
        "errors": sum(1 for f in findings if f.severity is Severity.ERROR),
        "warnings": sum(1 for f in findings if f.severity is Severity.WARNING),
        "checks": [name for name, _ in CHECKS],
        "source": snapshot.source,
        "taken_at": snapshot.taken_at,
        "findings": [f.as_json() for f in findings],
    }
    return json.dumps(doc, indent=2) + "\n"


def verdict_text(verdict: Verdict) -> str:
    """`kubegpu why`'s answer for people: the pod, the sentence, the evidence, the fix."""
    lines = [f"{verdict.pod}: {verdict.reason} [{verdict.kind}]"]
    lines += [f"  - {e}" for e in verdict.evidence]
    if verdict.fix:
        lines.append(f"  fix: {verdict.fix}")
    return "\n".join(lines) + "\n"


def print_verdict(verdict: Verdict, *, json_out: bool) -> None:
    sys.stdout.write(
        json.dumps(verdict.to_json(), indent=2) + "\n" if json_out else verdict_text(verdict)
    )
