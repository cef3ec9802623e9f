"""Background tasks of a long-running object, stopped together."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel background tasks, wait until each has ended, and forget them."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
    tasks.clear()
