"""The simulated GPU state watch: waiters wake on writes, and a handle collected by the
garbage collector at any moment never deadlocks the registry."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import pytest

from kubegpu.nvml.sim import SimNvml, watch

JOIN_S = 10.0


def _in_thread(fn: object) -> threading.Thread:
    assert callable(fn)
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    thread.join(JOIN_S)
    return thread


def test_a_write_in_this_process_wakes_a_waiter_at_once(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{}")
    handle = watch.register(path)
    try:
        since = handle.generation
        watch.changed(path)
        assert handle.wait(since, timeout_s=0.0)
    finally:
        handle.close()


def test_a_handle_closed_by_the_collector_inside_register_does_not_deadlock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hang CI met: `register` holds the registry's lock while it builds a new entry;
    the collector runs the finalizer of a dead SimNvml's watch right there, and the
    finalizer's `close` must not wait for that same lock."""
    gc.disable()  # only the collection forced below may free the old SimNvml
    try:
        old = SimNvml.create(tmp_path / "old.json", "h100-80gb:1")
        old.wait_for_event(0.0)  # registers its watch and the finalizer that closes it
        old.cycle = old  # type: ignore[attr-defined]  # only the collector can free it now
        alive = weakref.ref(old)
        del old
        assert alive() is not None

        real_entry = watch._Watched

        def collect_then_build(seen: watch.Signature) -> watch._Watched:
            gc.collect()  # the old watch's finalizer runs here, the registry's lock held
            return real_entry(seen)

        monkeypatch.setattr(watch, "_Watched", collect_then_build)
        fresh = tmp_path / "fresh.json"
        fresh.write_text("{}")
        handles: list[watch.Watch] = []
        thread = _in_thread(lambda: handles.append(watch.register(fresh)))
    finally:
        gc.enable()
    assert not thread.is_alive(), "register deadlocked on its own finalizer"
    assert alive() is None, "the finalizer was not forced inside register"
    handles[0].close()
    assert not {str(tmp_path / "old.json"), str(fresh)} & watch.watched()
