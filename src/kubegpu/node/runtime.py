"""`run(component)`: how every node component runs as a program.

A component is an object with `async run()` that returns once `stop()` was called (and
optionally `reload()`, for SIGHUP). `run()` sets up logging, builds the component inside
the event loop, turns SIGTERM, SIGINT and SIGQUIT into `stop()` and SIGHUP into `reload()`,
and maps the way it ended onto the exit status:

- 0: `run()` returned (after a stop signal, or because the work was done);
- `ComponentError.exit_code` (1 unless set), with `error: <message>` on stderr: the
  component refused to start or failed in a way the user must fix;
- 128 + N: a one-shot task (`OneShot`) was cancelled by signal N before it finished, the
  status a shell reports for a process that signal ended.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
RELOAD_SIGNAL = signal.SIGHUP
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVELS = ("debug", "info", "warning", "error")
# one line per API request is noise in a long-running agent's log
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore")


class ComponentError(Exception):
    """The component cannot run (bad input, missing credentials, no GPUs): the message says
    what to fix; the program exits with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@runtime_checkable
class Component(Protocol):
    async def run(self) -> None: ...

    def stop(self) -> None: ...


@runtime_checkable
class Reloadable(Protocol):
    def reload(self) -> None: ...


class OneShot:
    """A piece of work with an end (a validation, a wait) as a component: `stop()` cancels
    it, and the program then exits 128 + the signal's number."""

    def __init__(self, work: Callable[[], Awaitable[None]]) -> None:
        self._work = work
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    async def run(self) -> None:
        if self._stopped:
            raise asyncio.CancelledError
        self._task = asyncio.ensure_future(self._work())
        await self._task

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()


def log_level_problem(level: str) -> str | None:
    """Why `level` is no log level (any case; `warn` and `critical` as Python's logging
    reads them), or None when it is one."""
    if level.lower() in (*LOG_LEVELS, "warn", "critical"):
        return None
    return f"--log-level / LOG_LEVEL {level!r}: use one of {', '.join(LOG_LEVELS)}"


def setup_logging(level: str = "info") -> None:
    """Log lines `time LEVEL logger: message` to stderr at `level` (debug...error)."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr, format=LOG_FORMAT
    )
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))


def print_error(message: str) -> None:
    """`error: ...` on stderr, one line per problem (what the CLI prints too)."""
    for line in message.splitlines() or [""]:
        print(f"error: {line}", file=sys.stderr, flush=True)


# A host that runs components inside its own event loop (the simulator's in-process pods,
# kubegpu.sim.inprocess) sets this: `run()` then hands it `make` and returns 0 at once,
# so the command's flag and env parsing is the same code in a pod process and in-process.
HOST: ContextVar[Callable[[Callable[[], Component]], None] | None] = ContextVar(
    "kubegpu_component_host", default=None
)


def run(make: Callable[[], Component], *, log_level: str = "info") -> int:
    """Run the component `make()` builds until it finishes or is stopped; the exit status.

    `make` is called inside the event loop, so it may create asyncio objects and clients;
    a `ComponentError` it raises is reported like one from `run()`.
    """
    if (problem := log_level_problem(log_level)) is not None:
        # an unknown level would otherwise log at info, as if it had been taken
        print_error(problem)
        return 1
    host = HOST.get()
    if host is not None:
        host(make)
        return 0
    setup_logging(log_level)
    received: list[int] = []
    try:
        asyncio.run(_drive(make, received))
    except ComponentError as exc:
        print_error(str(exc))
        return exc.exit_code
    except asyncio.CancelledError:
        if received:
            log.info("stopped by %s before finishing", signal.Signals(received[-1]).name)
            return 128 + received[-1]
        raise
    return 0


async def _drive(make: Callable[[], Component], received: list[int]) -> None:
    loop = asyncio.get_running_loop()
    component = make()

    def stop(signum: int) -> None:
        received.append(signum)
        component.stop()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    if isinstance(component, Reloadable):
        loop.add_signal_handler(RELOAD_SIGNAL, component.reload)
    try:
        await component.run()
    finally:
        for sig in (*STOP_SIGNALS, RELOAD_SIGNAL):
            loop.remove_signal_handler(sig)
