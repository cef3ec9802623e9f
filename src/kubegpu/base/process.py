"""Whether a process still exists: for locks and addresses whose holder may have died."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while `pid` names a process (ours or another user's); False once it is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
