"""Waiting helpers for tests against the real control plane."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]], timeout: float = 30.0, interval: float = 0.2
) -> T:
    """Poll `check` until it returns a truthy value without raising; return that value."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = await check()
            if value:
                return value
        except AssertionError as exc:
            last = exc
        except Exception as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")
        await asyncio.sleep(interval)
