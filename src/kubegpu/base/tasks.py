"""Background tasks of a long-running object, stopped together, and stops that must end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

#: How long a shutdown waits for one part before it goes on without it.
STOP_WAIT_S = 15.0


def start_kept(
    tasks: list[asyncio.Task[None]], coro: Coroutine[Any, Any, None], name: str | None = None
) -> asyncio.Task[None]:
    """Start `coro` as a task kept in `tasks` (for `cancel_all`), forgetting the ones that
    have ended, so a list fed for an object's whole life does not grow without bound."""
    tasks[:] = [t for t in tasks if not t.done()]
    task = asyncio.create_task(coro, name=name)
    tasks.append(task)
    return task


async def cancel_all(tasks: list[asyncio.Task[None]], wait_s: float = STOP_WAIT_S) -> None:
    """Cancel background tasks, wait until each has ended (at most `wait_s` in all: a task
    that does not end once cancelled is logged and left), and forget them."""
    for t in tasks:
        t.cancel()
    if tasks:
        done, pending = await asyncio.wait(tasks, timeout=wait_s)
        for t in done:  # a task's own failure is not the stop's: retrieve it, raise nothing
            if not t.cancelled():
                t.exception()
        for t in pending:
            log.warning("task %s did not end %.0fs after it was cancelled", t.get_name(), wait_s)
    tasks.clear()


async def bounded_stop(stop: Awaitable[object], what: str, wait_s: float = STOP_WAIT_S) -> None:
    """Await one part's stop for at most `wait_s`. A gRPC server or channel stop has been
    seen never to finish (its completion not delivered to the loop), and a shutdown that
    hangs on one part leaves every part after it running: log it and go on."""
    try:
        await asyncio.wait_for(stop, wait_s)
    except TimeoutError:
        log.warning("%s did not stop in %.0fs; going on without it", what, wait_s)


async def finish_even_if_cancelled(cleanup: Coroutine[Any, Any, None]) -> None:
    """Run a component's cleanup to its end even when the task running it is cancelled
    meanwhile: a hurried shutdown cancels again while the first cancellation unwinds, and a
    cleanup cut short leaves threads and servers running. The cancellation is raised once
    the cleanup is done."""
    task = asyncio.ensure_future(cleanup)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    task.result()
