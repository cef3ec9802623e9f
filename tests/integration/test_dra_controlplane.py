"""The control plane allocates DRA claims: resource.k8s.io/v1 is served, the scheduler's DRA
plugin allocates against published ResourceSlices, the resource-claim controller makes a
pod's claim from its template, and partitionable devices (shared counters) are honoured."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from kube_objects import meta
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode

from .helpers import eventually
from .simnodes import sim_node

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

GiB = 1024**3


@pytest.fixture
async def cpu_node(control_plane: ControlPlane, akube: AsyncClient) -> AsyncIterator[SimNode]:
    """A Ready node with no GPUs (nothing on it prepares claims: no DRA plugin registers)."""
    async with sim_node(
        control_plane.kubeconfig_path, akube, "dra-cp", lease_interval_s=1.0
    ) as node:
        yield node


def _device(name: str, memory: int, counters: str | None = None) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": name,
        "attributes": {"kind": {"string": name.split("-", maxsplit=1)[0]}},
        "capacity": {"memory": {"value": str(memory)}},
    }
    if counters is not None:
        device["consumesCounters"] = [
            {"counterSet": counters, "counters": {"memory": {"value": str(memory)}}}
        ]
    return device


async def _publish(
    akube: AsyncClient, driver: str, node: str, slices: list[dict[str, Any]]
) -> None:
    for i, body in enumerate(slices):
        spec = {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": len(slices)},
            **body,
        }
        await akube.create(  # type: ignore[call-overload]
            ResourceSlice.from_dict({"metadata": {"name": f"{driver}-{node}-{i}"}, "spec": spec})
        )


async def _class_and_template(akube: AsyncClient, driver: str, namespace: str) -> None:
    await akube.create(  # type: ignore[call-overload]
        DeviceClass.from_dict(
            {
                "metadata": {"name": driver},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
            }
        )
    )
    for kind in ("whole", "half"):
        await akube.create(  # type: ignore[call-overload]
            ResourceClaimTemplate.from_dict(
                {
                    "metadata": {"name": kind},
                    "spec": {
                        "spec": {
                            "devices": {
                                "requests": [
                                    {
                                        "name": "dev",
                                        "exactly": {
                                            "deviceClassName": driver,
                                            "selectors": [
                                                {
                                                    "cel": {
                                                        "expression": (
                                                            f"device.attributes['{driver}']"
                                                            f".kind == '{kind}'"
                                                        )
                                                    }
                                                }
                                            ],
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ),
            namespace=namespace,
        )


def _claim_pod(name: str, node: str, template: str) -> Any:
    return Pod.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/workload:1",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        }
    )


async def _pod_claim(akube: AsyncClient, pod: str, namespace: str) -> dict[str, Any]:
    data = (await akube.get(Pod, pod, namespace=namespace)).to_dict()
    (status,) = data["status"]["resourceClaimStatuses"]
    name = status["resourceClaimName"]
    claim: dict[str, Any] = (await akube.get(ResourceClaim, name, namespace=namespace)).to_dict()
    return claim


async def test_the_scheduler_allocates_claims_against_slices_with_shared_counters(
    cpu_node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    driver = f"{namespace}.example.com"
    node = cpu_node.name
    counters = "gpu-0-counter-set"
    await _publish(
        akube,
        driver,
        node,
        [
            {
                "sharedCounters": [
                    {"name": counters, "counters": {"memory": {"value": str(80 * GiB)}}}
                ]
            },
            {
                "devices": [
                    _device("whole-0", 80 * GiB, counters),
                    _device("half-0", 40 * GiB, counters),
                    _device("half-1", 40 * GiB, counters),
                ]
            },
        ],
    )
    try:
        await _class_and_template(akube, driver, namespace)
        # the counters-only slice kept its counters: the gate is on in the API server
        slices = [
            s.to_dict() async for s in akube.list(ResourceSlice, fields={"spec.driver": driver})
        ]
        assert any(s["spec"].get("sharedCounters") for s in slices), slices

        await akube.create(_claim_pod("half-a", node, "half"), namespace=namespace)  # type: ignore[call-overload]

        async def allocated_half() -> dict[str, Any] | None:
            claim = await _pod_claim(akube, "half-a", namespace)
            return claim if claim.get("status", {}).get("allocation") else None

        claim = cast(dict[str, Any], await eventually(allocated_half, timeout=60))
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["request"]) == (driver, node, "dev")
        assert result["device"].startswith("half-")
        pod = (await akube.get(Pod, "half-a", namespace=namespace)).to_dict()
        assert pod["spec"]["nodeName"] == node
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]

        # the whole device shares the counters a half already uses: it cannot be allocated
        await akube.create(_claim_pod("whole-a", node, "whole"), namespace=namespace)  # type: ignore[call-overload]

        async def unschedulable() -> bool:
            data = (await akube.get(Pod, "whole-a", namespace=namespace)).to_dict()
            conditions = {c["type"]: c for c in data["status"].get("conditions") or []}
            scheduled = conditions.get("PodScheduled", {})
            return scheduled.get("status") == "False" and scheduled.get("reason") == (
                "Unschedulable"
            )

        await eventually(unschedulable, timeout=60)
        # the second half still fits next to the first
        await akube.create(_claim_pod("half-b", node, "half"), namespace=namespace)  # type: ignore[call-overload]

        async def second_half() -> str | None:
            c = await _pod_claim(akube, "half-b", namespace)
            results = (c.get("status", {}).get("allocation") or {}).get("devices", {})
            return results["results"][0]["device"] if results else None

        other = await eventually(second_half, timeout=60)
        assert {other, result["device"]} == {"half-0", "half-1"}
    finally:
        for name in ("half-a", "half-b", "whole-a"):
            with contextlib.suppress(ApiError):
                await akube.delete(Pod, name, namespace=namespace, grace_period=0)
        async for s in akube.list(ResourceSlice, fields={"spec.driver": driver}):
            with contextlib.suppress(ApiError):
                await akube.delete(ResourceSlice, cast(str, meta(s).name))
        with contextlib.suppress(ApiError):
            await akube.delete(DeviceClass, driver)
