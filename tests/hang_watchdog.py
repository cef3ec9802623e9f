"""A hang costs minutes, not the run: a pytest plugin that ends the process with every
thread's stack printed when one test (setup, call and teardown, module and session fixture
teardowns included) runs far past its own timeout, or the whole run past its limit.

pytest-timeout's per-test timer interrupts the main thread with a signal, which cannot end
a deadlock between threads, nor a join in a fixture's teardown that never returns. This
uses `faulthandler`'s C-level timer instead: it needs neither the GIL nor the main thread,
prints all threads' Python stacks to the original stderr (not pytest's capture) and exits.

    KUBEGPU_TEST_RUN_LIMIT_S    the whole run (default 4500: CI's 90 minutes less setup)
    KUBEGPU_TEST_HANG_MARGIN_S  how far past its own timeout a test may run (default 300)
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from collections.abc import Generator
from typing import IO, Any

import pytest

RUN_LIMIT_ENV = "KUBEGPU_TEST_RUN_LIMIT_S"
MARGIN_ENV = "KUBEGPU_TEST_HANG_MARGIN_S"
DEFAULT_RUN_LIMIT_S = 4500.0
DEFAULT_MARGIN_S = 300.0
DEFAULT_TEST_TIMEOUT_S = 300.0  # a test with no timeout of its own (pytest-timeout absent)


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise pytest.UsageError(f"${name}: {raw!r} is not a number of seconds") from None
    if not value > 0:
        raise pytest.UsageError(f"${name}: {raw!r} must be above 0")
    return value


def _original_stderr(config: pytest.Config) -> IO[str]:
    """A file on the stderr pytest started with: fd capture redirects fd 2 to a temporary
    file, and what is written there is lost when the process exits."""
    capman = config.pluginmanager.getplugin("capturemanager")
    capturing = getattr(capman, "_global_capturing", None)
    saved = getattr(getattr(capturing, "err", None), "targetfd_save", None)
    stderr = sys.__stderr__
    assert stderr is not None  # the interpreter was started with a stderr
    fd = saved if isinstance(saved, int) else stderr.fileno()
    return os.fdopen(os.dup(fd), "w", buffering=1)


class Watchdog:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.margin_s = _seconds(MARGIN_ENV, DEFAULT_MARGIN_S)
        self.run_limit_s = _seconds(RUN_LIMIT_ENV, DEFAULT_RUN_LIMIT_S)
        self.deadline = time.monotonic() + self.run_limit_s
        self.out = _original_stderr(config)
        self._arm(self.run_limit_s)

    def _arm(self, after_s: float) -> None:
        """(Re)start the one faulthandler timer: `after_s` from now, never past the run's
        deadline. The stacks it prints name the test (or fixture) that hung."""
        after_s = min(after_s, self.deadline - time.monotonic())
        faulthandler.cancel_dump_traceback_later()
        faulthandler.dump_traceback_later(max(after_s, 1.0), exit=True, file=self.out)

    def _timeout_of(self, item: pytest.Item) -> float:
        """The test's own pytest-timeout budget: its marker, else the ini value."""
        marker = item.get_closest_marker("timeout")
        value: Any = None
        if marker is not None:
            value = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
        if value is None:
            try:
                value = self.config.getini("timeout")
            except ValueError:  # pytest-timeout not loaded: no ini key of that name
                value = None
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            return DEFAULT_TEST_TIMEOUT_S
        return seconds if seconds > 0 else DEFAULT_TEST_TIMEOUT_S

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        self._arm(self._timeout_of(item) + self.margin_s)
        yield
        self._arm(self.run_limit_s)

    def close(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        self.out.close()


_KEY = "kubegpu-hang-watchdog"


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.get_plugin(_KEY) is None:
        config.pluginmanager.register(Watchdog(config), _KEY)


def pytest_unconfigure(config: pytest.Config) -> None:
    watchdog = config.pluginmanager.get_plugin(_KEY)
    if isinstance(watchdog, Watchdog):
        watchdog.close()
        config.pluginmanager.unregister(watchdog, _KEY)
