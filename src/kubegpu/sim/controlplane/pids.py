"""Pid records: the processes a control plane started, written where a later run finds them.

A killed run leaves its processes behind; the next start (or
:meth:`~kubegpu.sim.controlplane.plane.ControlPlane.cleanup_stale`) reads the ``pids`` file
and kills the recorded processes that still run, and no unrelated one that reused a pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubegpu.base.process import pid_alive

# --- pid records -------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ... starttime(22nd field)"; comm may hold spaces and parens.
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[19])


def _have_proc() -> bool:
    return Path("/proc/self/stat").exists()


@dataclass(frozen=True)
class PidRecord:
    """One process recorded in a work directory's ``pids`` file.

    ``start_ticks`` (the process's start time from ``/proc``) tells the recorded process from
    an unrelated one that got the same pid later; without it the pid alone is trusted.
    """

    name: str
    pid: int
    start_ticks: int | None

    @classmethod
    def of(cls, name: str, pid: int) -> PidRecord:
        """Record a running process, with its start time."""
        stat = _proc_stat(pid)
        return cls(name, pid, stat[1] if stat else None)

    def line(self) -> str:
        """The record as a line of the pids file."""
        ticks = "-" if self.start_ticks is None else str(self.start_ticks)
        return f"{self.name} {self.pid} {ticks}"

    @classmethod
    def parse(cls, line: str) -> PidRecord | None:
        """Read a line of the pids file; None for a blank or malformed line."""
        parts = line.split()
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        ticks = None if parts[2] == "-" else int(parts[2]) if parts[2].isdigit() else None
        return cls(parts[0], int(parts[1]), ticks)

    def alive(self) -> bool:
        """Whether the recorded process still runs (a zombie counts as gone)."""
        if self.pid <= 1:
            return False
        if not _have_proc():
            return pid_alive(self.pid)
        stat = _proc_stat(self.pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        return self.start_ticks is None or stat[1] == self.start_ticks


def read_pid_file(path: Path) -> list[PidRecord]:
    """The records of a pids file (empty if there is none)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [r for r in map(PidRecord.parse, text.splitlines()) if r is not None]


def write_pid_file(path: Path, records: Iterable[PidRecord]) -> None:
    """Replace a pids file atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(r.line() + "\n" for r in records))
    tmp.replace(path)


def _signal(record: PidRecord, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(record.pid, sig)


def _terminate_records(records: Sequence[PidRecord], timeout: float) -> None:
    """SIGTERM the live ones, wait up to ``timeout``, SIGKILL what is left, wait again."""
    live = [r for r in records if r.alive()]
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        for r in live:
            _signal(r, sig)
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            time.sleep(0.05)
            live = [r for r in live if r.alive()]
        if not live:
            return


def terminate_in_reverse(records: Sequence[PidRecord], timeout: float) -> None:
    """Terminate recorded processes last-started first (the API server before etcd)."""
    for record in reversed(records):
        _terminate_records([record], timeout)
