"""The simulated kubelet keeps a pod's status its own, as kubelet's status manager does.

When someone else changes the phase or the conditions it wrote (the node controller marks
the pods of a lagging node not Ready), it writes its view again, even when that change
arrived while one of its own writes was under way. Its own writes and older versions the
watch delivers late cause no write: there is no write loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sim_kubelet import node_context

from kubegpu.sim.kubelet.podworkers import PodRunner


class GatedClient:
    """Takes status writes, each answered with the next resourceVersion; the first write
    waits for `gate`."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.version = 10

    async def patch(self, kind: Any, name: str, body: dict[str, Any], **kw: Any) -> Any:
        self.entered.set()
        await self.gate.wait()
        self.writes.append(body["status"])
        self.version += 1
        return SimpleNamespace(metadata=SimpleNamespace(resourceVersion=str(self.version)))


POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
    "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
}


def _seen(version: int, runner: PodRunner, **ready: str) -> dict[str, Any]:
    """The pod as the watch shows it: the runner's own status, conditions overridden."""
    status = runner.status()
    status["conditions"] = [
        {**c, "status": ready.get(c["type"], c["status"])} for c in status["conditions"]
    ]
    return {"metadata": {"resourceVersion": str(version)}, "status": status}


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_status_changed_by_someone_else_is_written_again(tmp_path: Path) -> None:
    client = GatedClient()
    node = node_context(tmp_path, client)
    runner = PodRunner(node, POD, lambda r: asyncio.sleep(0))
    runner.observe(_seen(9, runner, Ready="False"))  # before any write: nothing to compare
    first = asyncio.create_task(runner._push_status())
    await client.entered.wait()
    # the node controller writes while our write is under way; its version is newer
    runner.observe(_seen(12, runner, Ready="Unknown"))
    client.gate.set()
    await first
    await _settle()
    assert len(client.writes) == 2  # written again once our own write was done

    runner.observe(_seen(12, runner))  # our write's own version, as we wrote it
    runner.observe(_seen(11, runner, Ready="Unknown"))  # an older version, late
    runner.observe(_seen(14, runner))  # a newer version that agrees (a label changed)
    await _settle()
    assert len(client.writes) == 2

    runner.observe(_seen(15, runner, Ready="Unknown"))  # someone else again
    await _settle()
    assert len(client.writes) == 3
    await runner.stop(0)


async def test_a_finished_pod_frees_its_devices_before_its_phase_is_written(
    tmp_path: Path,
) -> None:
    """Once the API server has the terminal phase the scheduler may bind the next pod to
    the same devices; its admission on this node must find them free."""
    client = GatedClient()
    client.gate.set()
    node = node_context(tmp_path, client)
    freed_before: list[int] = []  # how many writes the API server had when devices were freed

    async def exited(runner: PodRunner) -> None:
        freed_before.append(len(client.writes))

    pod = {
        "metadata": {"name": "job", "namespace": "ns", "uid": "u-2"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "kubegpu:dev", "command": ["true"]}],
        },
    }
    runner = PodRunner(node, pod, exited)
    await runner.start()

    async def succeeded() -> None:
        while not (client.writes and client.writes[-1]["phase"] == "Succeeded"):
            await asyncio.sleep(0.01)

    await asyncio.wait_for(succeeded(), timeout=30)
    assert len(freed_before) == 1
    assert all(w["phase"] != "Succeeded" for w in client.writes[: freed_before[0]])
    await runner.stop(0)
