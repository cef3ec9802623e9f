"""The simulated kubelet under a loaded API server: requests that time out are tried again.

Found at 1,000 simulated nodes: a service-account token request or a pod status write
that timed out ended the pod's start (or its run) for good, so the pod stayed Pending, or
showed an init container running long after it had finished. A kubelet keeps at both: it
retries the pod's volumes and resends its status until the API server has it. The API
server's failures are played here by a client that times out on the first calls.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2 as httpx
import pytest
from sim_kubelet import node_context

from kubegpu.sim.kubelet import podworkers, status
from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig
from kubegpu.sim.kubelet.podworkers import PodRunner


class TimingOutClient:
    """Answers token requests and status writes, after `failures` timeouts of each."""

    def __init__(self, failures: int) -> None:
        self.failures = {"create": failures, "patch": failures}
        self.statuses: list[dict[str, Any]] = []

    def _maybe_time_out(self, call: str) -> None:
        if self.failures[call] > 0:
            self.failures[call] -= 1
            raise httpx.ReadTimeout("timed out")

    async def create(self, obj: Any, name: str, namespace: str) -> Any:
        self._maybe_time_out("create")
        return SimpleNamespace(status=SimpleNamespace(token="a-token"))

    async def patch(self, kind: Any, name: str, body: dict[str, Any], **kw: Any) -> Any:
        self._maybe_time_out("patch")
        self.statuses.append(body["status"])
        return SimpleNamespace(metadata=SimpleNamespace(resourceVersion=str(len(self.statuses))))


async def _nothing() -> None:
    return None


POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
    "spec": {
        "restartPolicy": "Always",
        "initContainers": [{"name": "init", "image": "registry.k8s.io/pause:3.10"}],
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        "volumes": [
            {
                "name": "token",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
            }
        ],
    },
}


async def test_a_pod_starts_and_reports_running_through_timeouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (podworkers, status):  # container backoff, status writes
        monkeypatch.setattr(module, "BACKOFF_START_S", 0.01)
    client = TimingOutClient(failures=3)
    node = node_context(tmp_path, client)
    runner = PodRunner(node, POD, lambda r: _nothing())
    try:
        await runner.start()

        async def running() -> None:
            while not (
                client.statuses
                and client.statuses[-1]["phase"] == "Running"
                and client.statuses[-1]["containerStatuses"][0]["ready"]
            ):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(running(), timeout=30)
        last = client.statuses[-1]
        assert last["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        assert (tmp_path / "var/lib/kubelet/pods/u-1/volumes/token/token").read_text() == (
            "a-token"
        )
        assert client.failures == {"create": 0, "patch": 0}  # every timeout was met
    finally:
        await runner.stop(0)


async def test_a_deleted_pod_is_removed_for_good_through_timeouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubelet's last word on a deleted pod (a delete with no grace left once its containers
    are gone) is sent until the API server has it: lost to a timeout, the pod would stay
    Terminating for good (seen at 300 nodes)."""
    for module in (podworkers, status):  # container backoff, status writes
        monkeypatch.setattr(module, "BACKOFF_START_S", 0.01)
    deletes: list[str] = []

    class DeleteTimingOut:
        async def delete(self, kind: Any, name: str, namespace: str, grace_period: int) -> None:
            deletes.append(name)
            if len(deletes) < 3:
                raise httpx.ConnectTimeout("timed out")

    node = SimNode(SimNodeConfig(name="n", root=tmp_path), tmp_path / "kubeconfig")
    node.client = DeleteTimingOut()  # type: ignore[assignment]
    pod = {"metadata": {"name": "gone", "namespace": "ns", "uid": "u-9"}}
    node._terminating.add("u-9")
    await asyncio.wait_for(node._terminate(pod), timeout=10)
    assert deletes == ["gone", "gone", "gone"]
    assert "u-9" not in node._terminating  # a later event for it is handled again
