"""GPU events from NVML, read on a thread and handed to the event loop.

Any failure to wait for events (an NVML error or anything else the GPU layer raises) is
handed on as a fault on every wait that fails, and its end once a wait succeeds again: the
plugin marks the GPUs unhealthy and logs the fault once, when it starts and when it clears.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from functools import partial

from kubegpu.nvml import GpuEvent, Nvml

log = logging.getLogger(__name__)


class EventReader:
    """Waits for NVML events (blocking calls) on a thread; calls back on the loop."""

    def __init__(
        self,
        nvml: Nvml,
        loop: asyncio.AbstractEventLoop,
        on_event: Callable[[GpuEvent], None],
        on_error: Callable[[Exception], None],
        wait_s: float = 1.0,
        on_clear: Callable[[], None] | None = None,
    ) -> None:
        self.nvml = nvml
        self.loop = loop
        self.on_event = on_event
        self.on_error = on_error
        self.on_clear = on_clear
        self.wait_s = wait_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Tell the thread to end, without waiting: safe on the event loop, and what a
        cancelled `stop` still leaves done."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.wait_s + 5)

    def _deliver(self, fn: Callable[[], None]) -> None:
        try:
            self.loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop closed under us: we are shutting down
            self._stop.set()

    def _run(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                event = self.nvml.wait_for_event(self.wait_s)
            except Exception as exc:  # NVML's or not, the GPUs cannot be read: a fault
                if not failing:
                    log.debug("waiting for GPU events failed", exc_info=exc)
                failing = True
                self._deliver(partial(self.on_error, exc))
                self._stop.wait(self.wait_s)
                continue
            if failing and self.on_clear is not None:
                self._deliver(self.on_clear)
            failing = False
            if event is not None:
                self._deliver(partial(self.on_event, event))
