"""The simulated node on the real control plane: registration, devices, pods, reboot."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import NodeCondition, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Node, Pod, PodStatus
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding
from lightkube.types import PatchType

from kube_objects import meta, status_of
from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
from kubegpu.nvml import errors
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.kubelet.node import SimNode

from .fake_plugin import FakePlugin
from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

MakeNode = Callable[..., Any]


@pytest.fixture
def make_node(sim_nodes: SimNodes) -> MakeNode:
    """Nodes that leave no pod process behind (`sim_nodes` checks it)."""

    async def make(
        name: str, gpus: str | None = None, labels: dict[str, str] | None = None
    ) -> SimNode:
        return await sim_nodes.start(name, gpus=gpus, labels=labels or {}, lease_interval_s=1.0)

    return make


def _pod(
    name: str, node_selector: dict[str, str], resources: dict[str, str] | None = None, **spec: Any
) -> Any:
    container: dict[str, Any] = {"name": "main", "image": "registry.example/workload:1"}
    if resources:
        container["resources"] = {"limits": resources}
    return Pod.from_dict(
        {
            "metadata": {"name": name},
            "spec": {"containers": [container], "nodeSelector": node_selector, **spec},
        }
    )


async def test_a_node_registers_and_is_ready(make_node: MakeNode, akube: AsyncClient) -> None:
    sim = await make_node("sim-ready", gpus="h200-nvl:8")

    async def ready() -> bool:
        node = await akube.get(Node, "sim-ready")
        conditions = {
            c.type: c.status for c in cast(list[NodeCondition], status_of(node).conditions)
        }
        return conditions.get("Ready") == "True"

    await eventually(ready)
    node = await akube.get(Node, "sim-ready")
    assert (
        cast(dict[str, str], meta(node).labels)["feature.node.kubernetes.io/pci-10de.present"]
        == "true"
    )
    assert cast(dict[str, str], status_of(node).capacity)["cpu"] == "32"
    lease = await eventually(lambda: akube.get(Lease, "sim-ready", namespace="kube-node-lease"))
    assert cast(LeaseSpec, lease.spec).holderIdentity == "sim-ready"
    first = cast(datetime, cast(LeaseSpec, lease.spec).renewTime)

    async def renewed() -> bool:
        again = await akube.get(Lease, "sim-ready", namespace="kube-node-lease")
        return cast(datetime, cast(LeaseSpec, again.spec).renewTime) > first

    await eventually(renewed, timeout=10)
    # the node's GPUs are shared with every process through the state file, faults included
    watcher = SimNvml(sim.gpu_state)
    assert watcher.device_count() == 8
    sim.inject_xid(3, 48)
    event = watcher.wait_for_event(2.0)
    assert event is not None
    assert (event.device_index, event.xid) == (3, 48)
    sim.lose_gpu(5)
    with pytest.raises(errors.GpuIsLost):
        watcher.device(5)


async def test_device_plugin_resources_reach_allocatable_and_pods_get_devices(
    make_node: MakeNode, akube: AsyncClient, namespace: str
) -> None:
    node = await make_node("sim-devices", labels={"pool": "devices"})
    foo = FakePlugin(node.devices.plugin_dir, "example.com/foo", ["foo-0", "foo-1", "foo-2"])
    bar = FakePlugin(node.devices.plugin_dir, "example.com/bar", ["bar-0"])
    await foo.start()
    await bar.start()
    try:

        async def advertised() -> bool:
            n = await akube.get(Node, "sim-devices")
            return (
                cast(dict[str, str], status_of(n).allocatable).get("example.com/foo") == "3"
                and cast(dict[str, str], status_of(n).allocatable).get("example.com/bar") == "1"
            )

        await eventually(advertised)
        await akube.create(  # type: ignore[call-overload]
            _pod("uses-foo", {"pool": "devices"}, {"example.com/foo": "2"}), namespace=namespace
        )

        async def running() -> Any:
            p = await akube.get(Pod, "uses-foo", namespace=namespace)
            return p if status_of(p).phase == "Running" else None

        pod = await eventually(running)
        assert pod.spec.nodeName == "sim-devices"  # placed by the real kube-scheduler
        assert foo.preferred_calls == [(["foo-0", "foo-1", "foo-2"], 2)]
        assert foo.allocate_calls == [["foo-1", "foo-2"]]

        async with grpc.aio.insecure_channel(f"unix://{node.pod_resources.socket}") as ch:
            stub = pr_grpc.PodResourcesListerStub(ch)
            listed = await stub.List(pr.ListPodResourcesRequest())
            (entry,) = [p for p in listed.pod_resources if p.name == "uses-foo"]
            assert entry.namespace == namespace
            assert [(d.resource_name, list(d.device_ids)) for d in entry.containers[0].devices] == [
                ("example.com/foo", ["foo-1", "foo-2"])
            ]
            allocatable = await stub.GetAllocatableResources(pr.AllocatableResourcesRequest())
            assert {d.resource_name: len(d.device_ids) for d in allocatable.devices} == {
                "example.com/bar": 1,
                "example.com/foo": 3,
            }

        # no double allocation: the one free foo device goes to the next pod
        await akube.create(  # type: ignore[call-overload]
            _pod("uses-foo-2", {"pool": "devices"}, {"example.com/foo": "1"}), namespace=namespace
        )
        await eventually(lambda: _phase(akube, "uses-foo-2", namespace, "Running"))
        assert foo.allocate_calls[-1] == ["foo-0"]

        # a pod bound straight to the node past the scheduler fails admission like kubelet's
        await akube.create(  # type: ignore[call-overload]
            _pod("too-many", {}, {"example.com/bar": "2"}, nodeName="sim-devices"),
            namespace=namespace,
        )
        failed = await eventually(lambda: _phase(akube, "too-many", namespace, "Failed"))
        assert failed.status.reason == "UnexpectedAdmissionError"
        assert "Requested: 2, Available: 1" in failed.status.message

        # an unhealthy device leaves allocatable; a plugin that goes away takes its resource with it
        foo.set_health("foo-0", False)

        async def shrunk() -> bool:
            n = await akube.get(Node, "sim-devices")
            return (
                cast(dict[str, str], status_of(n).allocatable).get("example.com/foo") == "2"
                and cast(dict[str, str], status_of(n).capacity).get("example.com/foo") == "3"
            )

        await eventually(shrunk)
        await bar.stop()

        async def removed() -> bool:
            n = await akube.get(Node, "sim-devices")
            return "example.com/bar" not in cast(dict[str, str], status_of(n).capacity)

        await eventually(removed)
    finally:
        await foo.stop()
        await bar.stop()


async def _phase(akube: AsyncClient, name: str, namespace: str, phase: str) -> Any:
    p = await akube.get(Pod, name, namespace=namespace)
    return p if status_of(p).phase == phase else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    )


async def test_daemonset_pods_run_as_processes_with_env_and_volumes(
    make_node: MakeNode, akube: AsyncClient, namespace: str
) -> None:
    a = await make_node("sim-ds-a", labels={"role": "ds"})
    b = await make_node("sim-ds-b", labels={"role": "ds"})
    other = await make_node("sim-ds-other")
    ds = DaemonSet.from_dict(
        {
            "metadata": {"name": "probe"},
            "spec": {
                "selector": {"matchLabels": {"app": "probe"}},
                "template": {
                    "metadata": {"labels": {"app": "probe"}},
                    "spec": {
                        "nodeSelector": {"role": "ds"},
                        "terminationGracePeriodSeconds": 2,
                        "containers": [
                            {
                                "name": "probe",
                                "image": "ghcr.io/kubegpu/kubegpu:test",
                                "command": [
                                    "sh",
                                    "-c",
                                    "echo $NODE_NAME > /var/lib/kubegpu-test/out; exec sleep 3600",
                                ],
                                "env": [
                                    {
                                        "name": "NODE_NAME",
                                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                    }
                                ],
                                "volumeMounts": [
                                    {"name": "data", "mountPath": "/var/lib/kubegpu-test"}
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "data",
                                "hostPath": {"path": "/var/lib/probe", "type": "DirectoryOrCreate"},
                            }
                        ],
                    },
                },
            },
        }
    )
    await akube.create(ds, namespace=namespace)  # type: ignore[call-overload]

    async def both_running() -> bool:
        return all(n.pids() for n in (a, b)) and all(
            (n.root / "var/lib/probe/out").exists() for n in (a, b)
        )

    await eventually(both_running, timeout=60)
    assert (a.root / "var/lib/probe/out").read_text().strip() == "sim-ds-a"
    assert (b.root / "var/lib/probe/out").read_text().strip() == "sim-ds-b"
    assert other.pids() == []

    # a reboot stops the processes and starts them again, counting a restart
    (old,) = a.pids()
    await a.reboot()

    async def restarted() -> bool:
        pods = await _pods_on(akube, namespace, "sim-ds-a")
        return (
            bool(a.pids())
            and a.pids()[0] != old
            and pods[0].status.containerStatuses[0].restartCount == 1
        )

    await eventually(restarted, timeout=30)
    assert not _alive(old)

    pids = a.pids() + b.pids()
    await akube.delete(DaemonSet, "probe", namespace=namespace)

    async def gone() -> bool:
        return not any(_alive(p) for p in pids) and not await _pods_on(akube, namespace, None)

    await eventually(gone, timeout=60)


async def _pods_on(akube: AsyncClient, namespace: str, node: str | None) -> list[Any]:
    return [
        p
        async for p in akube.list(Pod, namespace=namespace)
        if node is None or cast(PodSpec, p.spec).nodeName == node
    ]


async def test_pods_get_configmaps_kept_current_and_a_working_service_account(
    make_node: MakeNode, akube: AsyncClient, namespace: str, control_plane: Any
) -> None:
    node = await make_node("sim-cfg")
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(metadata=ObjectMeta(name="cfg"), data={"colour": "blue"}), namespace=namespace
    )
    await akube.create(  # type: ignore[call-overload]
        Role(
            metadata=ObjectMeta(name="read-pods"),
            rules=[PolicyRule(apiGroups=[""], resources=["pods"], verbs=["get"])],
        ),
        namespace=namespace,
    )
    await akube.create(  # type: ignore[call-overload]
        RoleBinding(
            metadata=ObjectMeta(name="read-pods"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="Role", name="read-pods"),
            subjects=[Subject(kind="ServiceAccount", name="default", namespace=namespace)],
        ),
        namespace=namespace,
    )
    script = (
        "import os, time, pathlib\n"
        "from lightkube import Client\n"
        "from lightkube.resources.core_v1 import Pod\n"
        "pod = Client().get(Pod, os.environ['POD_NAME'], namespace=os.environ['POD_NAMESPACE'])\n"
        "pathlib.Path('/data/api').write_text(pod.spec.nodeName + ' ' + os.environ['COLOUR'])\n"
        "while True:\n"
        "    pathlib.Path('/data/seen').write_text(pathlib.Path('/etc/cfg/colour').read_text())\n"
        "    time.sleep(0.2)\n"
    )
    pod = Pod.from_dict(
        {
            "metadata": {"name": "reader"},
            "spec": {
                "nodeName": "sim-cfg",
                "containers": [
                    {
                        "name": "reader",
                        "image": "ghcr.io/kubegpu/kubegpu:test",
                        "command": [sys.executable, "-c", script],
                        "env": [
                            {
                                "name": "POD_NAME",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                            },
                            {
                                "name": "POD_NAMESPACE",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                            },
                            {
                                "name": "COLOUR",
                                "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "colour"}},
                            },
                        ],
                        "volumeMounts": [
                            {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True},
                            {"name": "data", "mountPath": "/data"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "data", "hostPath": {"path": "/srv/reader"}},
                ],
            },
        }
    )
    await akube.create(pod, namespace=namespace)  # type: ignore[call-overload]
    data = node.root / "srv/reader"

    async def talked_to_the_api() -> str:
        return (data / "api").read_text() if (data / "api").exists() else ""

    assert await eventually(talked_to_the_api, timeout=60) == "sim-cfg blue"
    token = ("POST", "serviceaccounts", "token")
    tokens = control_plane.request_counts()[token]
    assert tokens > 0  # the pod's token volume asked for one
    await akube.patch(ConfigMap, "cfg", {"data": {"colour": "green"}}, namespace=namespace)

    async def refreshed() -> bool:
        return (data / "seen").exists() and (data / "seen").read_text() == "green"

    await eventually(refreshed, timeout=30)
    # only the volume that shows the ConfigMap was rewritten: the service-account token
    # volume kept its token (it is renewed at 80% of its life, not on every change)
    assert control_plane.request_counts()[token] == tokens
    await akube.delete(Pod, "reader", namespace=namespace)
    await eventually(lambda: _gone(akube, "reader", namespace), timeout=30)
    assert node.pids() == []


async def _gone(akube: AsyncClient, name: str, namespace: str) -> bool:
    try:
        await akube.get(Pod, name, namespace=namespace)
    except ApiError as exc:
        return exc.status.code == 404
    return False


async def test_a_crashing_container_is_restarted_with_backoff(
    make_node: MakeNode, akube: AsyncClient, namespace: str
) -> None:
    await make_node("sim-crash")
    pod = Pod.from_dict(
        {
            "metadata": {"name": "crasher"},
            "spec": {
                "nodeName": "sim-crash",
                "containers": [
                    {"name": "c", "image": "kubegpu:dev", "command": ["sh", "-c", "exit 3"]}
                ],
            },
        }
    )
    await akube.create(pod, namespace=namespace)  # type: ignore[call-overload]

    async def restarted_twice() -> Any:
        p = await akube.get(Pod, "crasher", namespace=namespace)
        statuses = status_of(p).containerStatuses or []
        return statuses[0] if statuses and statuses[0].restartCount >= 2 else None

    status = await eventually(restarted_twice, timeout=30)
    assert status.lastState.terminated.exitCode == 3
    never = Pod.from_dict(
        {
            "metadata": {"name": "once"},
            "spec": {
                "nodeName": "sim-crash",
                "restartPolicy": "Never",
                "containers": [
                    {"name": "c", "image": "kubegpu:dev", "command": ["sh", "-c", "exit 0"]}
                ],
            },
        }
    )
    await akube.create(never, namespace=namespace)  # type: ignore[call-overload]
    done = await eventually(lambda: _phase(akube, "once", namespace, "Succeeded"), timeout=30)
    assert done.status.containerStatuses[0].state.terminated.reason == "Completed"


async def test_a_pod_status_someone_else_changed_is_written_again(
    make_node: MakeNode, akube: AsyncClient, namespace: str
) -> None:
    """As kubelet's status manager: the node controller marks the pods of a node whose lease
    lagged not Ready; once the node is back, the kubelet writes its own view again (at 300
    simulated nodes one driver pod stayed Ready=False for good, and the ClusterPolicy with
    it). A status that matches the kubelet's view is left alone: no write loop."""
    await make_node("sim-resync")
    pod = Pod.from_dict(
        {
            "metadata": {"name": "steady"},
            "spec": {
                "nodeName": "sim-resync",
                "containers": [{"name": "c", "image": "kubegpu:dev", "command": ["sleep", "3600"]}],
            },
        }
    )
    await akube.create(pod, namespace=namespace)  # type: ignore[call-overload]

    def ready(p: Any) -> str:
        return next(c.status for c in p.status.conditions or [] if c.type == "Ready")

    async def running_and_ready() -> Any:
        p = await akube.get(Pod, "steady", namespace=namespace)
        return p if status_of(p).phase == "Running" and ready(p) == "True" else None

    p = await eventually(running_and_ready)
    conditions = [
        {**c.to_dict(), "status": "False"} if c.type == "Ready" else c.to_dict()
        for c in p.status.conditions
    ]
    await akube.patch(
        PodStatus,
        "steady",
        {"status": {"conditions": conditions}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    back = await eventually(running_and_ready, timeout=10)
    await asyncio.sleep(2.0)
    later = await akube.get(Pod, "steady", namespace=namespace)
    assert meta(later).resourceVersion == meta(back).resourceVersion  # written once
