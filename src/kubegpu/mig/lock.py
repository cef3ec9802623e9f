"""One node-wide lock for everything that changes MIG state on a node.

`kubegpu mig apply`, the MIG manager (and the DRA plugin's dynamic MIG) all repartition
the same GPUs; run unserialised, two of them interleave and the node ends up matching
neither. Each holds this lock for the whole of a change: a second writer waits for it, up
to a timeout, and then fails with a message naming the holder.

The lock is an `flock` on one file, so the kernel drops it when its holder dies: a killed
writer never blocks the next one. Who holds it (pid, component, command line, since when)
is written into the same file for the message; that record may be stale after a crash,
which is why it is only ever shown, never trusted.

Where the file lives follows the NVML backend: beside a simulated node's state file, so
every process of that node shares it; on real hardware `$KUBEGPU_RUN_DIR/mig.lock`
(default `/run/kubegpu`, which a pod shares with its host through a hostPath mount).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from kubegpu.base.process import pid_alive
from kubegpu.nvml import Nvml

ENV_RUN_DIR = "KUBEGPU_RUN_DIR"
DEFAULT_RUN_DIR = Path("/run/kubegpu")
LOCK_NAME = "mig.lock"
ENV_TIMEOUT = "KUBEGPU_MIG_LOCK_TIMEOUT"
DEFAULT_TIMEOUT_S = 120.0
POLL_S = 0.05
_COMMAND_CHARS = 200


class MigLockError(RuntimeError):
    """The node's MIG lock could not be taken; the message names the holder."""


@dataclass(frozen=True)
class Holder:
    """What a lock holder records about itself."""

    pid: int
    component: str
    command: str
    host: str
    since: float  # seconds since the epoch

    def describe(self, now: float | None = None) -> str:
        when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        age = max(0.0, (now if now is not None else time.time()) - self.since)
        return (
            f"{self.component} (pid {self.pid} on {self.host}, command {self.command!r}) "
            f"since {when} ({age:.0f}s ago)"
        )


def lock_path(nvml: Nvml) -> Path:
    """The node-wide MIG lock file for the node `nvml` talks to."""
    state = nvml.state_file()
    if state is not None:
        return state.with_name(state.name + "." + LOCK_NAME)
    return Path(os.environ.get(ENV_RUN_DIR) or DEFAULT_RUN_DIR) / LOCK_NAME


def timeout_from_env(default: float = DEFAULT_TIMEOUT_S) -> float:
    """$KUBEGPU_MIG_LOCK_TIMEOUT in seconds, else `default`."""
    raw = os.environ.get(ENV_TIMEOUT)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise MigLockError(f"{ENV_TIMEOUT}={raw!r}: expected a number of seconds") from None
    return check_timeout(value, ENV_TIMEOUT)


def check_timeout(value: float, what: str) -> float:
    if not 0 <= value <= 24 * 3600:  # also rejects NaN
        raise MigLockError(f"{what} {value!r}: expected 0 to 86400 seconds")
    return value


def _this_process(component: str) -> Holder:
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "?"
    if len(command) > _COMMAND_CHARS:
        command = command[: _COMMAND_CHARS - 3] + "..."
    return Holder(os.getpid(), component, command, socket.gethostname(), time.time())


def read_holder(path: Path) -> Holder | None:
    """The holder recorded in the lock file, if it is readable (it may be stale)."""
    try:
        data = json.loads(path.read_text(errors="replace") or "null")
        return Holder(**data) if isinstance(data, dict) else None
    except (OSError, ValueError, TypeError):
        return None


class MigLock:
    """The node-wide MIG lock, re-entrant for one owner.

    Acquire and release may happen on different threads (the MIG manager's steps run in
    worker threads); nested acquires by the same owner only count.
    """

    def __init__(self, path: Path, component: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = path
        self.component = component
        self.timeout_s = timeout_s
        self._guard = threading.Lock()
        self._fd: int | None = None
        self._depth = 0

    @classmethod
    def for_node(cls, nvml: Nvml, component: str, timeout_s: float | None = None) -> MigLock:
        return cls(
            lock_path(nvml), component, timeout_from_env() if timeout_s is None else timeout_s
        )

    @property
    def held(self) -> bool:
        return self._depth > 0

    def acquire(self, stop: threading.Event | None = None) -> None:
        """Take the lock, waiting up to `timeout_s`; MigLockError naming the holder otherwise.
        Setting `stop` ends the wait early (a caller shutting down), also with MigLockError."""
        with self._guard:
            if self._depth:
                self._depth += 1
                return
            fd = self._open()
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if stop is not None and stop.is_set():
                        os.close(fd)
                        raise MigLockError(
                            f"stopped waiting for the MIG lock {self.path}"
                        ) from None
                    if time.monotonic() >= deadline:
                        os.close(fd)
                        raise MigLockError(self._busy_message()) from None
                    time.sleep(POLL_S)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(asdict(_this_process(self.component))).encode(), 0)
            except OSError:
                os.close(fd)  # closing drops the flock
                raise
            self._fd = fd
            self._depth = 1

    def release(self) -> None:
        with self._guard:
            if not self._depth:
                raise RuntimeError(f"{self.path}: released more often than acquired")
            self._depth -= 1
            if self._depth or self._fd is None:
                return
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)

    def __enter__(self) -> MigLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise MigLockError(
                f"cannot open the node's MIG lock {self.path}: {exc.strerror}"
                f" (set {ENV_RUN_DIR} to a writable directory shared by every MIG writer)"
            ) from None

    def _busy_message(self) -> str:
        holder = read_holder(self.path)
        if holder is None:
            who = "another process (it recorded no details)"
        elif holder.host == socket.gethostname() and not pid_alive(holder.pid):
            who = f"another process (the recorded holder, pid {holder.pid}, has exited)"
        else:
            who = holder.describe()
        return (
            f"another MIG writer holds this node's MIG lock {self.path}: {who}; "
            f"gave up after waiting {self.timeout_s:g}s "
            f"(set {ENV_TIMEOUT} or --lock-timeout to wait longer)"
        )
