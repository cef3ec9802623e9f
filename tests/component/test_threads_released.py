"""A stopped component leaves no thread behind: its NVML event thread ends and its GPU
state file is no longer watched, also when the task running it is cancelled (as a
simulated node's in-process components are) rather than asked to stop."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubegpu.device_plugin import DevicePlugin, PluginOptions
from kubegpu.exporter.server import Exporter, ExporterConfig
from kubegpu.nvml.sim import SimNvml, watch

SETTLE_S = 5.0


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


async def settled(baseline: set[threading.Thread], state: Path) -> tuple[set[str], bool]:
    """The names of threads started since `baseline` still alive once given a few seconds
    to end, and whether `state` is still watched."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_S
    while True:
        extra = {t.name for t in threads() - baseline if t.is_alive()}
        # the loop's idle executor workers and gRPC's one poller per process are not ours
        extra = {n for n in extra if not n.startswith("asyncio_") and "_poll_wrapper" not in n}
        still = str(state) in watch.watched()
        if (not extra and not still) or loop.time() > deadline:
            return extra, still
        await asyncio.sleep(0.05)


async def cancel_hard(task: asyncio.Task[None]) -> None:
    """Once it has started, cancel `task` again and again while it unwinds, as a hurried
    shutdown does."""
    await asyncio.sleep(0)
    for _ in range(20):
        if task.done():
            break
        task.cancel()
        await asyncio.sleep(0)
    await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kg-", dir="/tmp"))  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_cancelled_device_plugin_ends_its_event_thread(root: Path) -> None:
    SimNvml.create(root / "gpus.json", "h100-80gb:2")
    baseline = threads()
    nvml = SimNvml(root / "gpus.json")
    plugin = DevicePlugin(
        nvml,
        PluginOptions(
            plugin_dir=root / "dp",
            kubelet_socket=root / "dp/kubelet.sock",
            cdi_root=root / "cdi",
            poll_s=0.05,
            retry_s=0.2,
            event_wait_s=0.1,
        ),
    )
    task = asyncio.create_task(plugin.run())
    await asyncio.wait_for(plugin.ready.wait(), 30)
    assert "nvml-events" in {t.name for t in threads() - baseline}
    await cancel_hard(task)
    nvml.close()
    assert await settled(baseline, root / "gpus.json") == (set(), False)


async def test_a_stopped_exporter_ends_its_xid_thread(root: Path) -> None:
    SimNvml.create(root / "gpus.json", "l4:1")
    baseline = threads()
    nvml = SimNvml(root / "gpus.json")
    exporter = Exporter(ExporterConfig(address="127.0.0.1:0", hostname="h", xid_poll_s=0.05), nvml)
    task = asyncio.create_task(exporter.run())
    for _ in range(500):
        if exporter.port:
            break
        await asyncio.sleep(0.01)
    assert "xid-events" in {t.name for t in threads() - baseline}
    stopping = asyncio.create_task(exporter.stop())
    await cancel_hard(stopping)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    nvml.close()
    assert await settled(baseline, root / "gpus.json") == (set(), False)
