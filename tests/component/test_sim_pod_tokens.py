"""Service-account tokens in simulated pods, kept as kubelet's token manager keeps them.

A token is asked for once and reused until 80% of its life has passed, then a new one is
written into the pod's volume; a rewrite of a volume for another reason (a ConfigMap in the
same projected volume changed) does not ask for a new token. The audience a projected
source names is the one the token is issued for.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sim_kubelet import node_context

from kubegpu.sim.kubelet import podworkers, status
from kubegpu.sim.kubelet.mounted import MountedObjects
from kubegpu.sim.kubelet.podworkers import PodRunner
from kubegpu.sim.kubelet.volumes import PodObjects


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TokenClient:
    """Issues numbered tokens and takes status writes."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def create(self, obj: Any, name: str, namespace: str) -> Any:
        self.requests.append(obj.spec)
        return SimpleNamespace(status=SimpleNamespace(token=f"token-{len(self.requests)}"))

    async def patch(self, kind: Any, name: str, body: dict[str, Any], **kw: Any) -> Any:
        return SimpleNamespace(metadata=SimpleNamespace(resourceVersion="1"))


def _objects(client: TokenClient, clock: Clock) -> PodObjects:
    return PodObjects(client, "ns", "default", MountedObjects(client), clock)  # type: ignore[arg-type]


async def test_a_token_is_reused_until_80_percent_of_its_life_then_renewed() -> None:
    client, clock = TokenClient(), Clock()
    objects = _objects(client, clock)
    assert objects.token_refresh_in() is None  # none handed out yet
    assert await objects.token(3600) == "token-1"
    assert await objects.token(3600) == "token-1"
    assert objects.token_refresh_in() == pytest.approx(2880)
    clock.now += 2879
    assert await objects.token(3600) == "token-1"
    clock.now += 1
    assert objects.token_refresh_in() == 0.0
    assert await objects.token(3600) == "token-2"
    assert [r.expirationSeconds for r in client.requests] == [3600, 3600]


async def test_a_token_is_issued_for_the_audience_and_lifetime_asked() -> None:
    client, clock = TokenClient(), Clock()
    objects = _objects(client, clock)
    await objects.token(3600, "vault")
    await objects.token(60)  # the API server takes no less than ten minutes
    await objects.token(60)
    assert [(r.audiences, r.expirationSeconds) for r in client.requests] == [
        (["vault"], 3600),
        ([], 600),
    ]
    assert objects.token_refresh_in() == pytest.approx(480)  # the shorter one first


async def test_a_running_pod_gets_a_new_token_written_when_its_token_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (podworkers, status):  # container backoff, status writes
        monkeypatch.setattr(module, "BACKOFF_START_S", 0.01)
    client, clock = TokenClient(), Clock()
    node = node_context(tmp_path, client)
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "volumes": [
                {
                    "name": "token",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "t", "expirationSeconds": 1000}}
                        ]
                    },
                }
            ],
        },
    }
    runner = PodRunner(node, pod, lambda r: asyncio.sleep(0))
    runner._objects = PodObjects(client, "ns", "default", node.mounted, clock)  # type: ignore[arg-type]
    written = tmp_path / "var/lib/kubelet/pods/u-1/volumes/token/t"
    try:
        await runner.start()
        assert written.read_text() == "token-1"
        await asyncio.sleep(0.2)  # the refresh loop is waiting for the token's due time
        assert len(client.requests) == 1
        clock.now += 800
        runner._volumes_changed.set()  # wake the loop early, as its timer would

        async def renewed() -> None:
            while written.read_text() != "token-2":
                await asyncio.sleep(0.01)

        await asyncio.wait_for(renewed(), timeout=10)
        assert len(client.requests) == 2
    finally:
        await runner.stop(0)
