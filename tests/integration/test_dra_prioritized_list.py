"""Prioritized lists (`firstAvailable`, KEP-4816, GA in 1.36): a claim that prefers one MIG
profile and falls back to another is allocated by the real scheduler with whichever is
there, and the plugin prepares exactly that device: the result names the subrequest, the
container that asked for the request gets that MIG device, and deleting the pod unprepares
it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kube_objects import status_of
from kubegpu.catalog import nvidia
from kubegpu.sim.controlplane.plane import ControlPlane

from .dra_stack import IMAGE, SLEEP, DraCluster, dra_cluster
from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "dra-fallback"


def profile_is(profile: str) -> list[Any]:
    return [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}]


TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "small-else-large"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "firstAvailable": [
                            {
                                "name": "small",
                                "deviceClassName": nvidia.DRA_MIG_CLASS,
                                "selectors": profile_is("1g.18gb"),
                            },
                            {
                                "name": "large",
                                "deviceClassName": nvidia.DRA_MIG_CLASS,
                                "selectors": profile_is("3g.71gb"),
                            },
                        ],
                    }
                ]
            }
        }
    },
}


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "mig", "resourceClaimTemplateName": "small-else-large"}],
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "command": SLEEP,
                    "resources": {"claims": [{"name": "mig", "request": "mig"}]},
                }
            ],
        },
    }


@pytest.fixture
async def cluster(
    control_plane: ControlPlane, akube: AsyncClient, tmp_path: Path
) -> AsyncIterator[DraCluster]:
    # one 1g.18gb and one 3g.71gb: the first pod gets its preference, the second the fallback
    async with dra_cluster(
        control_plane,
        akube,
        {NODE: "h200-nvl:1"},
        tmp_path,
        mig={NODE: {0: ["3g.71gb", "1g.18gb"]}},
    ) as c:
        yield c


async def test_the_plugin_prepares_whichever_subrequest_the_scheduler_picked(
    cluster: DraCluster, akube: AsyncClient, namespace: str
) -> None:
    devices = await cluster.devices(akube, NODE)
    profile_of = {
        d["attributes"]["uuid"]["string"]: d["attributes"]["profile"]["string"]
        for d in devices.values()
    }
    await akube.create(from_dict(TEMPLATE), namespace=namespace)  # type: ignore[call-overload]
    got: dict[str, tuple[str, str]] = {}  # pod -> (result request, profile its container sees)
    for name in ("first", "second"):  # one after the other: the order decides who falls back
        await akube.create(from_dict(pod(name)), namespace=namespace)  # type: ignore[call-overload]

        async def running(name: str = name) -> Any:
            p = await akube.get(Pod, name, namespace=namespace)
            return p if status_of(p).phase == "Running" else None

        p = await eventually(running, timeout=120)
        (status,) = p.status.resourceClaimStatuses
        claim = await akube.get(ResourceClaim, status.resourceClaimName, namespace=namespace)
        (result,) = cast(Any, claim.status).allocation.devices.results
        env = cluster.nodes[NODE].dra.container_env(p.metadata.uid, "main")
        got[name] = (result.request, profile_of[env[nvidia.NVIDIA_VISIBLE_DEVICES]])
    assert got == {"first": ("mig/small", "1g.18gb"), "second": ("mig/large", "3g.71gb")}

    for name in ("first", "second"):
        await akube.delete(Pod, name, namespace=namespace)

    async def unprepared() -> bool:
        node = cluster.nodes[NODE]
        return node.dra.claims == {} and not list((node.root / "var/run/cdi").glob("*claim_*"))

    await eventually(unprepared, timeout=60)
