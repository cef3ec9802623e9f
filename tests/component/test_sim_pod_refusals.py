"""The simulated kubelet leaves waiting what a kubelet leaves waiting: a container whose
image reference does not parse (InvalidImageName), one that runAsNonRoot forbids, and one
whose env names a ConfigMap or Secret key that does not exist
(CreateContainerConfigError). The pod
is never ready, so nothing reports an operand ready that a cluster would never run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sim_kubelet import node_context

from kubegpu.sim.kubelet.podenv import container_env
from kubegpu.sim.kubelet.podworkers import PodRunner


class RecordingClient:
    """Takes status writes."""

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []

    async def patch(self, kind: Any, name: str, body: dict[str, Any], **kw: Any) -> Any:
        self.statuses.append(body["status"])
        return SimpleNamespace(metadata=SimpleNamespace(resourceVersion=str(len(self.statuses))))


def pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"restartPolicy": "Always", "containers": [{"name": "main", **container}], **spec},
    }


async def waiting_reason(
    tmp_path: Path, manifest: dict[str, Any]
) -> tuple[str, str, dict[str, Any]]:
    client = RecordingClient()
    runner = PodRunner(node_context(tmp_path, client), manifest, lambda r: asyncio.sleep(0))
    await runner.start()
    try:
        for _ in range(200):
            for status in client.statuses:
                waiting = status["containerStatuses"][0]["state"].get("waiting") or {}
                if waiting.get("reason") not in (None, "ContainerCreating"):
                    return waiting["reason"], waiting.get("message", ""), status
            await asyncio.sleep(0.01)
        raise AssertionError(f"never refused: {client.statuses[-1:]}")
    finally:
        await runner.stop(0)


def ready(status: dict[str, Any]) -> str:
    return cast(str, next(c["status"] for c in status["conditions"] if c["type"] == "Ready"))


async def test_an_image_reference_that_does_not_parse_is_invalid_image_name(
    tmp_path: Path,
) -> None:
    # issue 29: this operand image ran and the policy reported ready
    image = "ghcr.io/kubegpu/kubegpu:0.1.0 rc1"
    reason, message, status = await waiting_reason(tmp_path, pod({"image": image}))
    assert reason == "InvalidImageName"
    assert message.endswith("invalid reference format")
    assert status["phase"] == "Pending"
    assert ready(status) == "False"


async def test_run_as_non_root_with_user_0_is_create_container_config_error(
    tmp_path: Path,
) -> None:
    manifest = pod(
        {"image": "registry.k8s.io/pause:3.10"},
        securityContext={"runAsNonRoot": True, "runAsUser": 0},
    )
    reason, message, status = await waiting_reason(tmp_path, manifest)
    assert reason == "CreateContainerConfigError"
    assert "container's runAsUser breaks non-root policy" in message
    assert ready(status) == "False"


class OneConfigMap:
    """The pod's objects: ConfigMap `cm` and Secret `s`, each with the one key `present`."""

    async def configmap_files(self, source: dict[str, Any]) -> dict[str, bytes]:
        return {"present": b"yes"}

    async def secret_files(self, source: dict[str, Any]) -> dict[str, bytes]:
        return {"present": b"yes"}

    def mounted(self, volume: dict[str, Any]) -> set[Any]:
        return set()


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (
            {"configMapKeyRef": {"name": "cm", "key": "absent"}},
            "couldn't find key absent in ConfigMap cm",
        ),
        ({"secretKeyRef": {"name": "s", "key": "absent"}}, "couldn't find key absent in Secret s"),
        ({"configMapKeyRef": {"name": "cm", "key": "absent", "optional": True}}, None),
        ({"secretKeyRef": {"name": "s", "key": "present"}}, None),
    ],
)
async def test_an_env_key_the_object_lacks_is_create_container_config_error(
    ref: dict[str, Any], message: str | None
) -> None:
    # a ValueError is what the pod runner reports as CreateContainerConfigError
    container = {"name": "main", "env": [{"name": "X", "valueFrom": ref}]}
    if message is None:  # optional: left unset, as a kubelet leaves it
        env = await container_env(container, {}, OneConfigMap(), str, None)  # type: ignore[arg-type]
        key = next(iter(ref.values()))["key"]
        assert env.get("X") == ("yes" if key == "present" else None)
        return
    with pytest.raises(ValueError, match=r"^couldn.t find key absent in ") as err:
        await container_env(container, {}, OneConfigMap(), str, None)  # type: ignore[arg-type]
    assert str(err.value) == message


async def test_a_config_error_keeps_its_reason_while_it_is_retried(tmp_path: Path) -> None:
    # a kubelet retries a container it could not create without counting a restart, and
    # its status keeps saying why (not CrashLoopBackOff: nothing crashed)
    client = RecordingClient()
    ref = {"configMapKeyRef": {"name": "cm", "key": "absent"}}
    manifest = pod(
        {"image": "ghcr.io/kubegpu/kubegpu:0.1.0", "env": [{"name": "X", "valueFrom": ref}]}
    )
    runner = PodRunner(node_context(tmp_path, client), manifest, lambda r: asyncio.sleep(0))
    runner._objects = OneConfigMap()  # type: ignore[assignment]
    await runner.start()
    try:
        await asyncio.sleep(2.5)  # past the first back-off (1 s) and into the second
        reasons = {
            s["containerStatuses"][0]["state"].get("waiting", {}).get("reason")
            for s in client.statuses
        }
        assert "CreateContainerConfigError" in reasons
        assert "CrashLoopBackOff" not in reasons
        assert all(s["containerStatuses"][0]["restartCount"] == 0 for s in client.statuses)
    finally:
        await runner.stop(0)
