"""The simulated kubelet's DRA side on the real control plane: plugin registration, slices
wiped at kubelet start and republished, claims prepared before the pod runs (with the CDI
devices' environment), failures reported as the kubelet does, pod-resources
`dynamic_resources`, and unprepare after the pod is gone."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import ContainerState
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from kube_objects import meta, status_of
from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
from kubegpu.sim.kubelet.dramanager import FAILED_PREPARE
from kubegpu.sim.kubelet.node import SimNode

from .fake_dra_plugin import ENV, FakeDraPlugin
from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

MakeNode = Callable[[str], Any]


@pytest.fixture
def make_node(sim_nodes: SimNodes) -> MakeNode:
    """Nodes that leave no pod process behind (`sim_nodes` checks it)."""

    async def make(name: str) -> SimNode:
        return await sim_nodes.start(name, lease_interval_s=1.0)

    return make


@pytest.fixture
async def driver(akube: AsyncClient, namespace: str) -> AsyncIterator[str]:
    """A driver name of this test, its DeviceClass and a claim template `one` (one device)."""
    name = f"{namespace}.example.com"
    await akube.create(  # type: ignore[call-overload]
        DeviceClass.from_dict(
            {
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{name}'"}}]},
            }
        )
    )
    await akube.create(  # type: ignore[call-overload]
        ResourceClaimTemplate.from_dict(
            {
                "metadata": {"name": "one"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [{"name": "dev", "exactly": {"deviceClassName": name}}]
                        }
                    }
                },
            }
        ),
        namespace=namespace,
    )
    yield name
    async for s in akube.list(ResourceSlice, fields={"spec.driver": name}):
        with contextlib.suppress(ApiError):
            await akube.delete(ResourceSlice, cast(str, meta(s).name))
    with contextlib.suppress(ApiError):
        await akube.delete(DeviceClass, name)


@pytest.fixture
async def plugins(akube: AsyncClient) -> AsyncIterator[list[FakeDraPlugin]]:
    started: list[FakeDraPlugin] = []
    yield started
    for p in started:
        await p.stop()


async def _plugin(
    plugins: list[FakeDraPlugin], akube: AsyncClient, node: SimNode, driver: str, **kw: Any
) -> FakeDraPlugin:
    plugin = FakeDraPlugin(driver, node.name, node.root, akube, ["dev-0", "dev-1"], **kw)
    await plugin.start()
    plugins.append(plugin)
    return plugin


async def _slices(akube: AsyncClient, driver: str, node: str) -> list[Any]:
    return [
        s
        async for s in akube.list(
            ResourceSlice, fields={"spec.driver": driver, "spec.nodeName": node}
        )
    ]


def _claim_pod(name: str, node: str) -> Any:
    return Pod.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "terminationGracePeriodSeconds": 1,
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one"}],
                "containers": [
                    {
                        "name": "main",
                        "image": "ghcr.io/kubegpu/kubegpu:test",
                        "command": [sys.executable, "-c", "import time; time.sleep(3600)"],
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        }
    )


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if b"=" in item)


async def _running(akube: AsyncClient, name: str, namespace: str) -> Any:
    pod = await akube.get(Pod, name, namespace=namespace)
    return pod if status_of(pod).phase == "Running" else None


async def test_a_plugin_registers_and_a_restarted_kubelet_gets_its_slices_again(
    make_node: MakeNode, akube: AsyncClient, driver: str, plugins: list[FakeDraPlugin]
) -> None:
    # a slice left from before the kubelet started is wiped at its start
    stale = {
        "metadata": {"name": f"stale-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": "dra-reg",
            "pool": {"name": "dra-reg", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "old-0"}],
        },
    }
    await akube.create(ResourceSlice.from_dict(stale))  # type: ignore[call-overload]
    node = await make_node("dra-reg")
    assert await _slices(akube, driver, node.name) == []

    plugin = await _plugin(plugins, akube, node, driver)
    await eventually(lambda: _registered(plugin, 1))
    (published,) = await eventually(lambda: _slices(akube, driver, node.name))
    assert [d.name for d in published.spec.devices] == ["dev-0", "dev-1"]
    assert node.dra.plugin(driver).endpoint == plugin.endpoint

    await node.restart_kubelet()  # wipe, register again, the plugin republishes
    await eventually(lambda: _registered(plugin, 2))
    (again,) = await eventually(lambda: _slices(akube, driver, node.name))
    assert again.metadata.uid != published.metadata.uid

    # a plugin restart recreates its socket: registered again
    await plugin.stop()
    await plugin.start()
    await eventually(lambda: _registered(plugin, 3))

    # once a driver's last plugin is gone, its slices go too (after the wiping delay)
    node.dra.wipe_delay_s = 0.5
    await plugin.stop()
    await eventually(lambda: _no_slices(akube, driver, node.name))
    assert driver not in node.dra.plugins


async def test_a_plugin_of_another_type_is_refused(
    make_node: MakeNode, akube: AsyncClient, driver: str, plugins: list[FakeDraPlugin]
) -> None:
    node = await make_node("dra-refused")
    plugin = await _plugin(plugins, akube, node, driver, type="CSIPlugin")
    await eventually(lambda: _async(bool(plugin.registrations)))
    ((registered, error),) = plugin.registrations
    assert not registered
    assert "CSIPlugin" in error
    assert driver not in node.dra.plugins


async def test_claims_are_prepared_before_the_pod_runs_and_unprepared_after_it(
    make_node: MakeNode,
    akube: AsyncClient,
    namespace: str,
    driver: str,
    plugins: list[FakeDraPlugin],
) -> None:
    node = await make_node("dra-pods")
    plugin = await _plugin(plugins, akube, node, driver)
    await eventually(lambda: _slices(akube, driver, node.name))
    await akube.create(_claim_pod("uses-claim", node.name), namespace=namespace)  # type: ignore[call-overload]

    pod = await eventually(lambda: _running(akube, "uses-claim", namespace), timeout=60)
    (claim_status,) = pod.status.resourceClaimStatuses
    claim_name = claim_status.resourceClaimName
    assert plugin.prepare_calls == [[claim_name]]
    ((claim_uid, (device,)),) = plugin.prepared.items()

    (pid,) = node.pids()
    env = _environ(pid)
    assert env[ENV] == device
    assert env["FAKE_DRA_CLAIM"] == f"{namespace}/{claim_name}"

    async with grpc.aio.insecure_channel(f"unix://{node.pod_resources.socket}") as ch:
        listed = await pr_grpc.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest())
    (entry,) = [p for p in listed.pod_resources if p.name == "uses-claim"]
    (dynamic,) = entry.containers[0].dynamic_resources
    assert (dynamic.claim_name, dynamic.claim_namespace) == (claim_name, namespace)
    (resource,) = dynamic.claim_resources
    assert (resource.driver_name, resource.pool_name, resource.device_name) == (
        driver,
        node.name,
        device,
    )
    assert [c.name for c in resource.cdi_devices] == [f"{driver}/claim={claim_uid}-{device}"]

    await akube.delete(Pod, "uses-claim", namespace=namespace)
    await eventually(lambda: _async(plugin.unprepare_calls == [[claim_name]]), timeout=30)
    assert not plugin.cdi_file(claim_uid).exists()
    assert node.dra.claims == {}


async def test_a_failed_prepare_keeps_the_pod_waiting_and_is_retried(
    make_node: MakeNode,
    akube: AsyncClient,
    namespace: str,
    driver: str,
    plugins: list[FakeDraPlugin],
) -> None:
    node = await make_node("dra-fails")
    plugin = await _plugin(plugins, akube, node, driver, fail_prepare="device dev-0 is on fire")
    await eventually(lambda: _slices(akube, driver, node.name))
    await akube.create(_claim_pod("waits", node.name), namespace=namespace)  # type: ignore[call-overload]

    async def reported() -> list[Any]:
        return [
            e
            async for e in akube.list(Event, namespace=namespace)
            if e.involvedObject.name == "waits" and e.reason == FAILED_PREPARE
        ]

    (event, *_) = await eventually(reported, timeout=60)
    assert event.type == "Warning"
    assert event.source.component == "kubelet"
    assert "device dev-0 is on fire" in event.message

    async def waiting() -> Any:
        pod = await akube.get(Pod, "waits", namespace=namespace)
        statuses = status_of(pod).containerStatuses or []
        return pod if statuses and cast(ContainerState, statuses[0].state).waiting else None

    pod = await eventually(waiting)
    assert pod.status.phase == "Pending"
    assert pod.status.containerStatuses[0].state.waiting.reason == "ContainerCreating"
    assert node.pids() == []
    assert len(plugin.prepare_calls) >= 1

    plugin.fail_prepare = ""  # the next retry succeeds
    await eventually(lambda: _running(akube, "waits", namespace), timeout=60)
    assert len(node.pids()) == 1


async def _async(value: bool) -> bool:
    return value


async def _registered(plugin: FakeDraPlugin, times: int) -> bool:
    return plugin.registrations == [(True, "")] * times


async def _no_slices(akube: AsyncClient, driver: str, node: str) -> bool:
    return await _slices(akube, driver, node) == []


async def test_a_claim_shared_by_two_pods_is_prepared_once_and_unprepared_after_the_last(
    make_node: MakeNode,
    akube: AsyncClient,
    namespace: str,
    driver: str,
    plugins: list[FakeDraPlugin],
) -> None:
    node = await make_node("dra-shared")
    plugin = await _plugin(plugins, akube, node, driver)
    await eventually(lambda: _slices(akube, driver, node.name))
    await akube.create(  # type: ignore[call-overload]
        ResourceClaim.from_dict(
            {
                "metadata": {"name": "shared"},
                "spec": {
                    "devices": {
                        "requests": [{"name": "dev", "exactly": {"deviceClassName": driver}}]
                    }
                },
            }
        ),
        namespace=namespace,
    )
    for name in ("first", "second"):
        pod = _claim_pod(name, node.name).to_dict()
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        sidecar = {**pod["spec"]["containers"][0], "name": "sidecar"}
        pod["spec"]["containers"].append(sidecar)
        await akube.create(Pod.from_dict(pod), namespace=namespace)  # type: ignore[call-overload]
    for name in ("first", "second"):

        async def running(n: str = name) -> Any:
            return await _running(akube, n, namespace)

        await eventually(running, timeout=60)
    assert plugin.prepare_calls == [["shared"]]
    ((claim_uid, (device,)),) = plugin.prepared.items()
    devices = {_environ(pid)[ENV] for pid in node.pids()}
    assert (len(node.pids()), devices) == (4, {device})

    await akube.delete(Pod, "first", namespace=namespace)
    await eventually(lambda: _gone(akube, "first", namespace), timeout=30)
    assert plugin.unprepare_calls == []
    assert plugin.cdi_file(claim_uid).exists()
    await akube.delete(Pod, "second", namespace=namespace)
    await eventually(lambda: _async(plugin.unprepare_calls == [["shared"]]), timeout=30)


async def _gone(akube: AsyncClient, name: str, namespace: str) -> bool:
    try:
        await akube.get(Pod, name, namespace=namespace)
    except ApiError as exc:
        return exc.status.code == 404
    return False


async def test_a_failed_unprepare_is_retried_across_a_kubelet_restart(
    make_node: MakeNode,
    akube: AsyncClient,
    namespace: str,
    driver: str,
    plugins: list[FakeDraPlugin],
) -> None:
    node = await make_node("dra-unprep")
    plugin = await _plugin(plugins, akube, node, driver, fail_unprepare="device busy")
    await eventually(lambda: _slices(akube, driver, node.name))
    await akube.create(_claim_pod("done", node.name), namespace=namespace)  # type: ignore[call-overload]
    await eventually(lambda: _running(akube, "done", namespace), timeout=60)
    ((claim_uid, _),) = plugin.prepared.items()

    await akube.delete(Pod, "done", namespace=namespace)
    await eventually(lambda: _async(len(plugin.unprepare_calls) >= 2), timeout=30)
    assert plugin.cdi_file(claim_uid).exists()
    assert claim_uid in node.dra.claims

    await node.restart_kubelet()
    plugin.fail_unprepare = ""
    await eventually(lambda: _async(node.dra.claims == {}), timeout=30)
    assert not plugin.cdi_file(claim_uid).exists()
