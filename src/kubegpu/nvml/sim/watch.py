"""Waiting for a simulated GPU state file to change, without every waiter polling it.

NVML event waits (the device plugin's health checks, the exporter's XID tracker) used to
re-read and parse the whole state file every 20 ms each. With a thousand simulated nodes'
components in one process that was thousands of parses a second: the simulator's whole
core. Instead, a write made in this process wakes the file's waiters at once, and one
watcher thread per process notices writes made by other processes (a `stat` per watched
file per poll, no read, no lock). Writes replace the file by rename, so its inode, size and
modification time together change with every write.

A `Watch` is often closed by a `weakref.finalize` when the object that owned it is
collected, and the collector runs wherever an allocation triggers it: inside `register`
with the registry's lock held, for one. So `close` never takes that lock: it queues the
release, and whoever holds the lock next (a `register`, the watcher thread) applies it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

POLL_S = 0.1  # how soon another process's write is seen (this process's: at once)

Signature = tuple[int, int, int] | None  # inode, size, mtime in ns; None: no file


def signature(path: str) -> Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class _Watched:
    seen: Signature
    waiters: int = 0
    generation: int = 0  # bumped on every change noticed
    cond: threading.Condition = field(default_factory=threading.Condition)

    def bump(self, now: Signature) -> None:
        with self.cond:
            self.seen = now
            self.generation += 1
            self.cond.notify_all()


class Watch:
    """A registered interest in one file: `generation` now, `wait` for a later one;
    `close()` when done (a handle that waits again and again keeps one open). A closed
    handle still answers, but no longer hears of other processes' writes."""

    def __init__(self, registry: _Registry, key: str, entry: _Watched) -> None:
        self._registry = registry
        self._key = key
        self._entry = entry
        self._closed = False

    @property
    def generation(self) -> int:
        return self._entry.generation

    def wait(self, since: int, timeout_s: float) -> bool:
        """Block until the file changed after `since` was read, or the time is up."""
        entry = self._entry
        with entry.cond:
            return entry.cond.wait_for(lambda: entry.generation != since, timeout_s)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._registry.release(self._key, self._entry)


class _Registry:
    """The files waited on in this process, and the one thread that stats them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[str, _Watched] = {}
        self._released: deque[tuple[str, _Watched]] = deque()  # appended without the lock
        self._thread: threading.Thread | None = None

    def register(self, path: Path) -> Watch:
        key = os.path.abspath(path)
        with self._lock:
            self._apply_releases()
            entry = self._watched.get(key)
            if entry is None:
                entry = self._watched[key] = _Watched(signature(key))
            entry.waiters += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="sim-gpu-state-watch", daemon=True
                )
                self._thread.start()
        return Watch(self, key, entry)

    def release(self, key: str, entry: _Watched) -> None:
        """Queue one waiter's release. Takes no lock (see the module's docstring): a
        finalizer may call this from inside `register`, on the thread holding the lock."""
        self._released.append((key, entry))

    def _apply_releases(self) -> None:
        """With the lock held: drop the waiters released since (a release that a
        collection queues while this runs is applied by the same loop)."""
        while self._released:
            key, entry = self._released.popleft()
            entry.waiters -= 1
            if entry.waiters == 0 and self._watched.get(key) is entry:
                del self._watched[key]

    def watched(self) -> set[str]:
        """The files watched now (releases applied)."""
        with self._lock:
            self._apply_releases()
            return set(self._watched)

    def changed(self, path: Path) -> None:
        key = os.path.abspath(path)
        entry = self._watched.get(key)
        if entry is not None:
            entry.bump(signature(key))

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._apply_releases()
                if not self._watched:
                    self._thread = None
                    return
                entries = list(self._watched.items())
            for key, entry in entries:
                now = signature(key)
                if now != entry.seen:
                    entry.bump(now)
            time.sleep(POLL_S)


_REGISTRY = _Registry()


def register(path: Path) -> Watch:
    """Watch `path` until the returned watch is closed (shared with other waiters on it)."""
    return _REGISTRY.register(path)


def changed(path: Path) -> None:
    """Called by a writer in this process after it replaced `path`: wake its waiters now."""
    _REGISTRY.changed(path)


def watched() -> set[str]:
    """The files this process watches now: what tests check a stopped component released."""
    return _REGISTRY.watched()
