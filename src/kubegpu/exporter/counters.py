"""The counters file (DCGM exporter's CSV format) that selects the exported metrics.

Each line is `DCGM field name, Prometheus type, help text`; `#` starts a comment line and
fields are trimmed. Types are gauge, counter, histogram, summary and label; a `label`
field's value becomes a label on every series instead of a series of its own.

A file with any bad line is rejected whole, with every problem named by file, line and
field. Known DCGM fields kubegpu cannot read (fields.unsupported_reason) are skipped and
reported, not rejected, so DCGM exporter's own files load. A file with no field at all is
refused too (it would export nothing). The file is bounded like every input
(`kubegpu.base.loader`, docs/limits.md): at most 1 MiB of UTF-8 text, and an error quotes at
most a short excerpt of a line and lists at most `MAX_PROBLEMS` problems.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kubegpu.base import loader
from kubegpu.base.loader import excerpt
from kubegpu.exporter import fields

TYPES = ("gauge", "counter", "histogram", "summary", "label")
DEFAULT_COUNTERS = "default-counters.csv"
MAX_PROBLEMS = 20


class CountersError(loader.InputError):
    """A counters file that cannot be used; the message names file, line and field."""


@dataclass(frozen=True)
class Counter:
    field: str
    type: str  # one of TYPES
    help: str
    line: int


@dataclass(frozen=True)
class Skipped:
    counter: Counter
    reason: str


@dataclass(frozen=True)
class CounterSet:
    source: str
    metrics: tuple[Counter, ...]  # fields exported as series, in file order
    labels: tuple[Counter, ...]  # fields attached as labels
    skipped: tuple[Skipped, ...]  # known DCGM fields kubegpu does not supply

    def warnings(self) -> list[str]:
        return [
            f"{self.source}:{s.counter.line}: {s.counter.field} skipped: {s.reason}"
            for s in self.skipped
        ]


def parse_counters(
    text: str, source: str = "<counters>", limits: loader.Limits = loader.DEFAULT_LIMITS
) -> CounterSet:
    loader.check_size(text, source, CountersError, limits)
    problems: list[str] = []
    metrics: list[Counter] = []
    labels: list[Counter] = []
    skipped: list[Skipped] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            (row,) = list(csv.reader([line], skipinitialspace=True))
        except (csv.Error, ValueError) as exc:
            problems.append(f"{where}: not a CSV line: {loader.clip(str(exc), 80)}")
            continue
        row = [cell.strip() for cell in row]
        if len(row) != 3:
            problems.append(
                f"{where}: expected 3 comma-separated fields (DCGM field, type, help), "
                f"got {len(row)}: {excerpt(line)}"
            )
            continue
        name, kind, help_text = row
        counter = Counter(name, kind, help_text, number)
        if kind not in TYPES:
            problems.append(
                f"{where}: {excerpt(name)[1:-1]}: type {excerpt(kind)} is not one of "
                f"{', '.join(TYPES)}"
            )
            continue
        if name in seen:
            problems.append(f"{where}: {name} is already listed on line {seen[name]}")
            continue
        seen[name] = number
        if name in fields.LABELS:
            if kind != "label":
                problems.append(
                    f"{where}: {name} is a text field; list it with type 'label', not {excerpt(kind)}"
                )
                continue
            labels.append(counter)
        elif name in fields.METRICS:
            if kind == "label":
                problems.append(
                    f"{where}: {name} is a number; export it as a gauge or counter, not a label"
                )
                continue
            metrics.append(counter)
        elif (reason := fields.unsupported_reason(name)) is not None:
            skipped.append(Skipped(counter, reason))
        else:
            problems.append(f"{where}: unknown DCGM field {excerpt(name)}")
    if len(problems) > MAX_PROBLEMS:
        problems[MAX_PROBLEMS:] = [f"{source}: (and {len(problems) - MAX_PROBLEMS} more problems)"]
    if problems:
        raise CountersError("\n".join(problems))
    if not (metrics or labels or skipped):
        raise CountersError(f"{source}: lists no DCGM field; nothing would be exported")
    return CounterSet(source, tuple(metrics), tuple(labels), tuple(skipped))


def default_counters_text() -> str:
    return resources.files("kubegpu.exporter").joinpath(DEFAULT_COUNTERS).read_text()


def load_counters(path: Path | str | None = None) -> CounterSet:
    """Read a counters file; None: the default set shipped with kubegpu."""
    if path is None:
        return parse_counters(default_counters_text(), f"(built-in) {DEFAULT_COUNTERS}")
    limits = loader.DEFAULT_LIMITS
    try:
        with open(path, "rb") as f:
            data = f.read(limits.max_bytes + 1)
    except OSError as exc:
        raise CountersError(f"{path}: cannot read counters file: {exc.strerror}") from None
    return parse_counters(loader.decode(data, str(path), CountersError, limits), str(path))
