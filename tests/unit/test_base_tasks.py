"""Stopping background work: cancelled tasks are awaited, but a stop never hangs on one."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kubegpu.base.tasks import bounded_stop, cancel_all


async def test_cancelled_tasks_are_awaited_and_their_failures_do_not_escape() -> None:
    ended: list[str] = []

    async def sleeper() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            ended.append("sleeper")

    async def failing() -> None:
        raise RuntimeError("its own failure")

    tasks = [asyncio.create_task(sleeper()), asyncio.create_task(failing())]
    await asyncio.sleep(0)
    await cancel_all(tasks)
    assert ended == ["sleeper"] and tasks == []


async def test_a_task_that_will_not_end_is_logged_and_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                continue  # ignores cancellation, as a wedged library call would

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    tasks = [task]
    await cancel_all(tasks, wait_s=0.1)
    assert tasks == [] and not task.done()
    assert "task stubborn did not end" in caplog.text
    release.set()
    task.cancel()
    await asyncio.wait([task], timeout=1)


async def test_a_stop_that_never_finishes_is_given_up_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    await bounded_stop(asyncio.Event().wait(), "the plugin server", wait_s=0.05)
    assert "the plugin server did not stop in 0s" in caplog.text
    await bounded_stop(asyncio.sleep(0), "a prompt one", wait_s=1)
    assert "a prompt one" not in caplog.text
