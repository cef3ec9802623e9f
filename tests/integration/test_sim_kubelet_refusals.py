"""The simulated kubelet on the real control plane refuses what a kubelet refuses: a
DaemonSet whose image reference does not parse never has a ready pod (its container waits
in InvalidImageName), so an operand with such an image is never reported ready; a pod whose
env names a missing ConfigMap key waits in CreateContainerConfigError."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.models.apps_v1 import DaemonSetStatus
from lightkube.models.core_v1 import ContainerState
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Pod

from kube_objects import status_of
from kubegpu.sim.kubelet.node import SimNode

from .helpers import eventually
from .simnodes import sim_node

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "sim-refusals"


@pytest.fixture
async def node(control_plane: Any, akube: AsyncClient) -> AsyncIterator[SimNode]:
    async with sim_node(
        control_plane.kubeconfig_path,
        akube,
        NODE,
        labels={"pool": "refusals"},
        lease_interval_s=1.0,
    ) as sim:
        yield sim


def daemonset(name: str, image: str) -> Any:
    labels = {"app": name}
    return DaemonSet.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"pool": "refusals"},
                        "containers": [{"name": "main", "image": image}],
                    },
                },
            },
        }
    )


async def waiting(akube: AsyncClient, namespace: str, selector: dict[str, Any]) -> dict[str, Any]:
    async def refused() -> dict[str, Any] | None:
        async for pod in akube.list(Pod, namespace=namespace, labels=selector):
            for status in status_of(pod).containerStatuses or []:
                state = cast(ContainerState, status.state)
                if state.waiting and state.waiting.reason != "ContainerCreating":
                    return {
                        "reason": state.waiting.reason,
                        "message": state.waiting.message,
                        "phase": status_of(pod).phase,
                        "ready": status.ready,
                    }
        return None

    return cast(dict[str, Any], await eventually(refused, timeout=60))


async def test_a_daemonset_whose_image_does_not_parse_is_never_ready(
    node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    await akube.create(daemonset("good", "ghcr.io/kubegpu/workload:0.1.0-rc1"), namespace=namespace)  # type: ignore[call-overload]
    await akube.create(daemonset("bad", "ghcr.io/kubegpu/workload:0.1.0 rc1"), namespace=namespace)  # type: ignore[call-overload]

    async def good_ready() -> bool:
        ds = await akube.get(DaemonSet, "good", namespace=namespace)
        return ds.status is not None and ds.status.numberReady == 1

    await eventually(good_ready, timeout=60)
    seen = await waiting(akube, namespace, {"app": "bad"})
    assert seen["reason"] == "InvalidImageName"
    assert "couldn't parse image name" in seen["message"]
    assert seen["phase"] == "Pending"
    assert seen["ready"] is False
    bad = await akube.get(DaemonSet, "bad", namespace=namespace)
    assert cast(DaemonSetStatus, bad.status).desiredNumberScheduled == 1
    assert not cast(DaemonSetStatus, bad.status).numberReady


async def test_an_env_key_a_configmap_lacks_is_create_container_config_error(
    node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    await akube.create(  # type: ignore[call-overload]
        ConfigMap.from_dict({"metadata": {"name": "settings"}, "data": {"present": "1"}}),
        namespace=namespace,
    )
    ref = {"configMapKeyRef": {"name": "settings", "key": "absent"}}
    pod = Pod.from_dict(
        {
            "metadata": {"name": "needs-key", "labels": {"app": "needs-key"}},
            "spec": {
                "nodeSelector": {"pool": "refusals"},
                "containers": [
                    {
                        "name": "main",
                        "image": "ghcr.io/kubegpu/kubegpu:0.1.0",
                        "command": ["true"],
                        "env": [{"name": "X", "valueFrom": ref}],
                    }
                ],
            },
        }
    )
    await akube.create(pod, namespace=namespace)  # type: ignore[call-overload]
    seen = await waiting(akube, namespace, {"app": "needs-key"})
    assert seen["reason"] == "CreateContainerConfigError"
    assert seen["message"] == "couldn't find key absent in ConfigMap settings"
