"""One control plane process: its error, its launch record, its readiness probe over HTTP.

As envtest's ``process`` package: what starting, probing and naming a failed component
needs, whatever the component is.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubegpu.sim.controlplane.pids import PidRecord

_PROBE_TIMEOUT_S: Final = 2.0
_LOG_TAIL_LINES: Final = 25


# --- errors ------------------------------------------------------------------------------


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


class ControlPlaneError(RuntimeError):
    """A control plane component could not be found, started or made ready.

    The message names the component, says why, and for a process that ran gives its log
    file and the last lines of that log.
    """

    def __init__(self, component: str, reason: str, log_path: Path | None = None) -> None:
        self.component = component
        self.reason = reason
        self.log_path = log_path
        message = f"{component}: {reason}"
        if log_path is not None:
            message += f"\n  log: {log_path}"
            tail = _tail(log_path)
            if tail:
                message += f"\n  last {len(tail)} lines of the log:\n" + "\n".join(
                    f"    {line}" for line in tail
                )
        super().__init__(message)


# --- HTTP probes -------------------------------------------------------------------------


def probe_get(
    url: str, context: ssl.SSLContext | None, timeout_s: float = _PROBE_TIMEOUT_S
) -> tuple[int, bytes] | str:
    """GET a URL: (status, body), or the reason it could not be fetched."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{url}: {reason}"


def json_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_offset: int  # where this launch's output starts in the log

    def record(self) -> PidRecord:
        return PidRecord.of(self.name, self.popen.pid)


@dataclass
class Stage:
    """A component to launch: its port names, its command line, its readiness probe."""

    name: str
    ports: tuple[str, ...]
    args: Callable[[], list[str]]
    probe: Callable[[], str | None]  # None when ready, else what it still waits for
    attempts: int = 0
    waiting_for: str = "starting"
