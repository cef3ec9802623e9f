"""A finding: one problem a check found, with what shows it and how to fix it."""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum

from pydantic import BaseModel, ConfigDict


class Severity(IntEnum):
    """Ordered so the worst of several findings is their max; the value is the exit code."""

    WARNING = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()


class Finding(BaseModel):
    """One problem: which check, how bad, on what object, the evidence and the fix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    check: str  # the check's name, e.g. "single-strategy-mixed"
    severity: Severity
    object: str  # "node/gpu-1", "configmap/gpu-operator/plugin-configs", "clusterpolicy/x"
    summary: str  # one line: what is wrong
    evidence: str  # what in the cluster shows it (label values, messages, events)
    fix: str  # what to do about it

    def as_json(self) -> dict[str, str]:
        return {
            "check": self.check,
            "severity": str(self.severity),
            "object": self.object,
            "summary": self.summary,
            "evidence": self.evidence,
            "fix": self.fix,
        }


def exit_code(findings: Iterable[Finding]) -> int:
    """0 clean, 1 warnings only, 2 any error."""
    return max((int(f.severity) for f in findings), default=0)
