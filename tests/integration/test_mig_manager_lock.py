"""The MIG manager shares the node's MIG lock with every other MIG writer.

While `kubegpu mig apply` (here: the test, holding the lock as it would) changes the GPUs,
the manager waits before touching them; if the other writer keeps the lock past the
timeout, the change fails naming the holder, with the labels restored and the GPUs as
they were.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from lightkube import AsyncClient

from kubegpu.mig.lock import MigLock, lock_path
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.kubelet.node import SimNode

from .test_mig_manager import (  # noqa: F401 - `env` is a fixture
    PAUSED,
    Env,
    deploy_labels,
    env,
    events,
    label,
    layout,
    settled,
)

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]


async def test_the_manager_waits_for_another_writer_then_applies(
    env: Callable[..., Awaitable[Env]],  # noqa: F811
    akube: AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBEGPU_MIG_LOCK_TIMEOUT", "60")
    e = await env("mm-lock-wait")
    node: SimNode = e["node"]
    other = MigLock(lock_path(SimNvml(node.gpu_state)), "kubegpu mig apply")
    await e["start"]()
    other.acquire()
    try:
        await label(akube, node.name, "all-1g.18gb")
        await asyncio.sleep(3)  # paused operands are gone by now; the manager waits
        assert e["recorder"].states == ["pending"]
        assert layout(node) == [None] * 8  # not one GPU touched while the other writer works
    finally:
        other.release()
    assert await settled(akube, node.name) == "success"
    assert layout(node) == [Counter({"1g.18gb": 7})] * 8


async def test_a_writer_holding_the_lock_too_long_fails_the_change_naming_it(
    env: Callable[..., Awaitable[Env]],  # noqa: F811
    akube: AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBEGPU_MIG_LOCK_TIMEOUT", "1")
    e = await env("mm-lock-timeout")
    node: SimNode = e["node"]
    before = await deploy_labels(akube, node.name)
    await e["start"]()
    with MigLock(lock_path(SimNvml(node.gpu_state)), "kubegpu mig apply"):
        await label(akube, node.name, "all-1g.18gb")
        assert await settled(akube, node.name) == "failed"
    assert PAUSED not in (await deploy_labels(akube, node.name)).values()
    assert await deploy_labels(akube, node.name) == before
    assert layout(node) == [None] * 8
    (message,) = [m for r, m in await events(akube, node.name) if r == "MigConfigFailed"]
    assert "another MIG writer holds this node's MIG lock" in message
    assert "kubegpu mig apply (pid " in message
