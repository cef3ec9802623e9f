"""What one chaos run did and saw: every fault injected, the seconds until every invariant
held again, and the invariants still violated when the settle time ran out."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

SEED_ENV = "KUBEGPU_CHAOS_SEED"
REPORT_ENV = "KUBEGPU_CHAOS_REPORT"  # a path: the run's record is written there as JSON
ROUNDS_ENV = "KUBEGPU_CHAOS_ROUNDS"  # multiplies every fault count (a longer soak)


def _env_int(name: str, default: int, minimum: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    if not text.isdigit() or int(text) < minimum:
        raise ValueError(f"${name}: value {text[:40]!r}: not an integer >= {minimum}")
    return int(text)


def chosen_seed() -> int:
    """$KUBEGPU_CHAOS_SEED (a replay), else a fresh one."""
    return _env_int(SEED_ENV, time.time_ns() % 1_000_000, 0)


def rounds() -> int:
    return _env_int(ROUNDS_ENV, 1, 1)


@dataclass
class FaultRecord:
    kind: str
    node: str
    what: str  # the fault and its random point, in words
    settle_s: float
    violations: dict[str, list[str]]


@dataclass
class ChaosRun:
    seed: int
    started: float = field(default_factory=time.monotonic)
    faults: list[FaultRecord] = field(default_factory=list)
    setup_s: float = 0.0
    say: Callable[[str], None] = print  # the terminal reporter's write_line under pytest

    def add(self, record: FaultRecord) -> None:
        self.faults.append(record)

    def progress(self, f: FaultRecord) -> None:
        """One line per fault as it settles, past pytest's capture: a long run shows where
        it is, and a stuck one where it stuck."""
        mark = "VIOLATED " + "; ".join(f.violations) if f.violations else "ok"
        self.say(
            f"chaos {len(self.faults)}: {f.kind} on {f.node}: {f.what}; "
            f"settled {f.settle_s:.1f} s {mark}"
        )

    def summary_lines(self) -> list[str]:
        kinds = Counter(f.kind for f in self.faults)
        violated = [f for f in self.faults if f.violations]
        lines = [
            f"seed {self.seed} (replay: {SEED_ENV}={self.seed}); "
            f"{len(self.faults)} faults, {len(violated)} with invariant violations; "
            f"stack up {self.setup_s:.0f} s, whole run {time.monotonic() - self.started:.0f} s"
        ]
        for kind, count in sorted(kinds.items()):
            times = [f.settle_s for f in self.faults if f.kind == kind]
            bad = sum(1 for f in self.faults if f.kind == kind and f.violations)
            lines.append(
                f"  {kind:28} x{count:<3} violations {bad}  settle median "
                f"{statistics.median(times):5.1f} s, max {max(times):5.1f} s"
            )
        for i, f in enumerate(self.faults, 1):
            mark = "VIOLATED" if f.violations else "ok"
            lines.append(
                f"  {i:2}. {f.kind} on {f.node}: {f.what}; settled {f.settle_s:.1f} s {mark}"
            )
        for f in violated:
            lines.append(f"  VIOLATED after {f.kind} on {f.node} ({f.what}):")
            lines += [f"    {name}: {'; '.join(p)}" for name, p in f.violations.items()]
        return lines

    def write(self, path: Path) -> None:
        data = {
            "seed": self.seed,
            "setup_s": round(self.setup_s, 1),
            "run_s": round(time.monotonic() - self.started, 1),
            "faults": [asdict(f) for f in self.faults],
        }
        path.write_text(json.dumps(data, indent=1) + "\n")
