"""The simulated pod processes of a node, found by the marker every one of them carries.

What a node that is stopped or killed must leave behind is none of them: cluster files and
tests kill what a killed run left.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from kubegpu.sim.kubelet.podenv import ENV_NODE_ROOT


def pod_processes(under: Path) -> list[int]:
    """Pids of simulated pod processes of the node rooted at `under`, or of every node below
    it (found by the KUBEGPU_SIM_NODE_ROOT variable every simulated pod process carries)."""
    root = str(under.resolve())
    marker = f"{ENV_NODE_ROOT}=".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(marker):
                value = item[len(marker) :].decode(errors="replace")
                if value == root or value.startswith(root + "/"):
                    found.append(int(proc.name))
                break
    return found


def kill_pod_processes(under: Path) -> int:
    """SIGKILL every pod process `pod_processes` finds; returns how many there were."""
    killed = 0
    for pid in pod_processes(under):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed
