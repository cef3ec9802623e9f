"""`kubegpu device-plugin` as a DaemonSet on simulated nodes, with the real scheduler: what
nodes advertise, where pods land and what they get, refused configs, faults, kubelet
restarts and relabelling."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import (
    ContainerState,
    ContainerStateTerminated,
    ContainerStatus,
    PodSpec,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from kube_objects import meta, status_of
from kubegpu.mig.config import MigConfigEntry
from kubegpu.mig.parted import apply_config
from kubegpu.sharing.allocate import accepts_envvar, visible_devices
from kubegpu.sim.kubelet.node import SimNode

from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

MakeNode = Callable[..., Any]
LABEL = "nvidia.com/device-plugin.config"
IMAGE = "ghcr.io/kubegpu/kubegpu:test"


@pytest.fixture
def make_node(sim_nodes: SimNodes) -> MakeNode:
    async def make(name: str, gpus: str, labels: dict[str, str]) -> SimNode:
        return await sim_nodes.start(name, gpus=gpus, labels=labels, lease_interval_s=1.0)

    return make


@pytest.fixture
async def deploy(akube: AsyncClient, namespace: str) -> AsyncIterator[Callable[..., Any]]:
    """Install the plugin as upstream's chart does: a ConfigMap of named configs, RBAC to
    read its Node and record events, and a DaemonSet running `kubegpu device-plugin`."""
    cluster_objects: list[tuple[Any, str]] = []

    async def install(node_selector: dict[str, str], configs: dict[str, str], default: str) -> None:
        name = f"kubegpu-dp-{uuid.uuid4().hex[:6]}"
        await akube.create(  # type: ignore[call-overload]
            ConfigMap(metadata=ObjectMeta(name="dp-configs"), data=configs), namespace=namespace
        )
        await akube.create(
            ClusterRole(
                metadata=ObjectMeta(name=name),
                rules=[
                    PolicyRule(apiGroups=[""], resources=["nodes"], verbs=["get", "list", "watch"]),
                    PolicyRule(apiGroups=[""], resources=["events"], verbs=["create", "patch"]),
                ],
            )
        )
        cluster_objects.append((ClusterRole, name))
        await akube.create(
            ClusterRoleBinding(
                metadata=ObjectMeta(name=name),
                roleRef=RoleRef(
                    apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=name
                ),
                subjects=[Subject(kind="ServiceAccount", name="default", namespace=namespace)],
            )
        )
        cluster_objects.append((ClusterRoleBinding, name))
        ds = DaemonSet.from_dict(
            {
                "metadata": {"name": "nvidia-device-plugin"},
                "spec": {
                    "selector": {"matchLabels": {"app": "nvidia-device-plugin"}},
                    "template": {
                        "metadata": {"labels": {"app": "nvidia-device-plugin"}},
                        "spec": {
                            "nodeSelector": node_selector,
                            "terminationGracePeriodSeconds": 5,
                            "containers": [
                                {
                                    "name": "plugin",
                                    "image": IMAGE,
                                    "command": [
                                        "kubegpu",
                                        "device-plugin",
                                        "--config-dir",
                                        "/available-configs",
                                        "--default-config",
                                        default,
                                        "--poll-interval",
                                        "0.2",
                                        "--health-recovery-period",
                                        "2",
                                    ],
                                    "env": [
                                        {
                                            "name": "NODE_NAME",
                                            "valueFrom": {
                                                "fieldRef": {"fieldPath": "spec.nodeName"}
                                            },
                                        },
                                        {"name": "MPS_ROOT", "value": "/run/nvidia/mps"},
                                    ],
                                    "volumeMounts": [
                                        {
                                            "name": "device-plugins",
                                            "mountPath": "/var/lib/kubelet/device-plugins",
                                        },
                                        {"name": "cdi", "mountPath": "/var/run/cdi"},
                                        {"name": "configs", "mountPath": "/available-configs"},
                                    ],
                                }
                            ],
                            "volumes": [
                                {
                                    "name": "device-plugins",
                                    "hostPath": {"path": "/var/lib/kubelet/device-plugins"},
                                },
                                {
                                    "name": "cdi",
                                    "hostPath": {
                                        "path": "/var/run/cdi",
                                        "type": "DirectoryOrCreate",
                                    },
                                },
                                {"name": "configs", "configMap": {"name": "dp-configs"}},
                            ],
                        },
                    },
                },
            }
        )
        await akube.create(ds, namespace=namespace)  # type: ignore[call-overload]

    yield install
    with contextlib.suppress(ApiError):
        await akube.delete(DaemonSet, "nvidia-device-plugin", namespace=namespace)
    for kind, name in cluster_objects:
        with contextlib.suppress(ApiError):
            await akube.delete(kind, name)


def plugin_logs(node: SimNode) -> str:
    """The plugin container's logs on `node` (every run), to explain a failure."""
    logs = sorted((node.root / "var/log/pods").glob("*nvidia-device-plugin*/plugin/*.log"))
    return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in logs)


async def allocatable(akube: AsyncClient, node: str, resource: str) -> str | None:
    n = await akube.get(Node, node)
    return (status_of(n).allocatable or {}).get(resource)


async def until_allocatable(
    akube: AsyncClient, node: str, resource: str, value: str | None, timeout: float = 60
) -> None:
    async def check() -> bool:
        got = await allocatable(akube, node, resource)
        assert got == value, f"{resource} on {node}: {got}, waiting for {value}"
        return True

    await eventually(check, timeout=timeout)


async def relabel(akube: AsyncClient, node: str, value: str) -> None:
    await akube.patch(Node, node, {"metadata": {"labels": {LABEL: value}}})


async def node_events(akube: AsyncClient, node: str, reason: str) -> list[str]:
    return [
        e.message or ""
        async for e in akube.list(Event, namespace="default", fields={"involvedObject.name": node})
        if e.reason == reason
    ]


def gpu_pod(
    name: str,
    resource: str | None,
    node_selector: dict[str, str],
    *,
    probe: bool = False,
    unset: str = "",
) -> Any:
    """A pod asking for one `resource` (None: no GPU). A probe pod runs (kubegpu image) and
    writes the NVIDIA_VISIBLE_DEVICES it sees (`unset` when the variable is not set) to
    /out/<name> on its node."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example/cuda-app:1"}
    if resource:
        container["resources"] = {"limits": {resource: "1"}}
    spec: dict[str, Any] = {
        "nodeSelector": node_selector,
        "containers": [container],
        "terminationGracePeriodSeconds": 0,
    }
    if probe:
        container["image"] = IMAGE
        container["command"] = [
            "sh",
            "-c",
            f'printf %s "${{NVIDIA_VISIBLE_DEVICES-{unset}}}" > /out/.{name}; mv /out/.{name} /out/{name}; exec sleep 3600',
        ]
        container["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
        spec["volumes"] = [
            {"name": "out", "hostPath": {"path": "/srv/out", "type": "DirectoryOrCreate"}}
        ]
    return Pod.from_dict({"metadata": {"name": name}, "spec": spec})


async def test_mixed_mig_node_advertises_its_slices_and_pods_get_distinct_ones(
    make_node: MakeNode, akube: AsyncClient, namespace: str, deploy: Callable[..., Any]
) -> None:
    node = await make_node("dp-mig", "h200-nvl:8", {"dp": "mig"})
    assert node.nvml is not None
    entry = MigConfigEntry.model_validate(
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}
    )
    apply_config(node.nvml, "all-1g.18gb", [entry])
    migs = {d.uuid for i in range(8) for d in node.nvml.mig_devices(i)}
    assert len(migs) == 56
    mps = "flags: {mpsRoot: /run/nvidia/mps}\nsharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n"
    await deploy({"dp": "mig"}, {"mixed": "flags: {migStrategy: mixed}\n", "mps": mps}, "mixed")
    await until_allocatable(akube, "dp-mig", "nvidia.com/mig-1g.18gb", "56")

    for i in range(3):
        await akube.create(  # type: ignore[call-overload]
            gpu_pod(f"slice-{i}", "nvidia.com/mig-1g.18gb", {"dp": "mig"}, probe=True),
            namespace=namespace,
        )
    await akube.create(gpu_pod("no-gpu", None, {"dp": "mig"}, probe=True), namespace=namespace)  # type: ignore[call-overload]
    out = node.root / "srv/out"

    async def all_written() -> bool:
        return all((out / n).exists() for n in ["slice-0", "slice-1", "slice-2", "no-gpu"])

    await eventually(all_written, timeout=60)
    seen = [(out / f"slice-{i}").read_text() for i in range(3)]
    assert len(set(seen)) == 3 and set(seen) <= migs  # one distinct MIG device each
    for i in range(3):
        pod = await akube.get(Pod, f"slice-{i}", namespace=namespace)
        assert cast(PodSpec, pod.spec).nodeName == "dp-mig"  # placed by the real scheduler
    # no GPU requested: the plugin is not asked, the container's env names no device
    no_gpu = (out / "no-gpu").read_text()
    assert no_gpu == ""
    assert (
        visible_devices(
            {"NVIDIA_VISIBLE_DEVICES": no_gpu}, accept_envvar=accepts_envvar(["envvar"])
        )
        == ()
    )
    assert (node.root / "var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json").exists()

    # MPS on MIG-enabled GPUs is refused: the node says why, the slices stay advertised
    await relabel(akube, "dp-mig", "mps")

    async def refused() -> list[str]:
        return await node_events(akube, "dp-mig", "DevicePluginConfigRejected")

    (message,) = await eventually(refused, timeout=30)
    assert "sharing using MPS is not supported on MIG-enabled GPUs" in message
    assert "config 'mps'" in message and "keeping default config 'mixed'" in message
    assert await allocatable(akube, "dp-mig", "nvidia.com/mig-1g.18gb") == "56"
    assert await allocatable(akube, "dp-mig", "nvidia.com/gpu") is None


async def test_time_slicing_health_kubelet_restart_and_relabel_on_an_l4_node(
    make_node: MakeNode, akube: AsyncClient, namespace: str, deploy: Callable[..., Any]
) -> None:
    node = await make_node("dp-ts", "l4:4", {"dp": "ts"})
    ts4 = "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 4}\n"
    await deploy({"dp": "ts"}, {"ts4": ts4, "plain": ""}, "ts4")
    await until_allocatable(akube, "dp-ts", "nvidia.com/gpu", "16")

    # an XID takes the GPU's 4 replicas out of allocatable; 2 quiet seconds bring them back
    node.inject_xid(2, 48)
    await until_allocatable(akube, "dp-ts", "nvidia.com/gpu", "12", timeout=30)
    assert (
        cast(dict[str, str], status_of(await akube.get(Node, "dp-ts")).capacity)["nvidia.com/gpu"]
        == "16"
    )
    await until_allocatable(akube, "dp-ts", "nvidia.com/gpu", "16", timeout=30)
    assert any("XID 48" in m for m in await node_events(akube, "dp-ts", "GpuUnhealthy"))

    # 16 replicas: 16 pods run, the 17th stays Pending
    for i in range(17):
        await akube.create(  # type: ignore[call-overload]
            gpu_pod(f"ts-{i:02d}", "nvidia.com/gpu", {"dp": "ts"}), namespace=namespace
        )

    async def placed() -> list[str]:
        pods = [
            p
            async for p in akube.list(Pod, namespace=namespace)
            if cast(str, meta(p).name).startswith("ts-")
        ]
        running = [p for p in pods if status_of(p).phase == "Running"]
        pending = [cast(str, meta(p).name) for p in pods if status_of(p).phase == "Pending"]
        assert len(running) == 16 and len(pending) == 1, (len(running), pending)
        return pending

    (waiting,) = await eventually(placed, timeout=90)
    pod = await akube.get(Pod, waiting, namespace=namespace)
    (cond,) = [c for c in status_of(pod).conditions or [] if c.type == "PodScheduled"]
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert "nvidia.com/gpu" in (cond.message or "")

    # kubelet restarts: its socket is recreated, the plugin registers again
    await node.devices.restart()
    await until_allocatable(akube, "dp-ts", "nvidia.com/gpu", "16", timeout=30)

    # relabel: the plain config advertises the 4 whole GPUs, without restarting the pod
    (plugin_pod,) = [
        p
        async for p in akube.list(Pod, namespace=namespace, labels={"app": "nvidia-device-plugin"})
    ]
    restarts = cast(list[ContainerStatus], status_of(plugin_pod).containerStatuses)[0].restartCount
    await relabel(akube, "dp-ts", "plain")
    await until_allocatable(akube, "dp-ts", "nvidia.com/gpu", "4", timeout=30)
    again = await akube.get(Pod, cast(str, meta(plugin_pod).name), namespace=namespace)
    assert (
        cast(list[ContainerStatus], status_of(again).containerStatuses)[0].restartCount == restarts
    ), plugin_logs(node)
    applied = await node_events(akube, "dp-ts", "DevicePluginConfigApplied")
    assert any("config 'plain'" in m and "nvidia.com/gpu: 4" in m for m in applied)


def smi_pod(name: str, resource: str | None, node_selector: dict[str, str]) -> Any:
    """A CUDA-image pod running `nvidia-smi -L` once: the simulated kubelet answers from the
    simulated GPUs with only what the pod was given (exit 6, "No devices were found", when
    nothing)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        "command": ["nvidia-smi", "-L"],
    }
    if resource:
        container["resources"] = {"limits": {resource: "1"}}
    spec = {
        "nodeSelector": node_selector,
        "containers": [container],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
    }
    return Pod.from_dict({"metadata": {"name": name}, "spec": spec})


DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
UNSET = "<unset>"


async def test_a_pod_without_a_gpu_request_sees_no_gpu_in_every_device_list_strategy(
    make_node: MakeNode, akube: AsyncClient, namespace: str, deploy: Callable[..., Any]
) -> None:
    """Upstream's most reported surprise: a pod that asks for no GPU sees them all. Here, in
    every strategy, it gets no device, its NVIDIA_VISIBLE_DEVICES is unset (never `all`),
    and nvidia-smi in it finds nothing, while a pod beside it that asks for a GPU sees
    exactly that one through the same probes."""
    node = await make_node("dp-void", "l4:2", {"dp": "void"})
    assert node.nvml is not None
    uuids = {node.nvml.device(i).uuid for i in range(2)}
    configs = {
        s: f"flags: {{plugin: {{deviceListStrategy: {s}}}}}\n" for s in DEVICE_LIST_STRATEGIES
    }
    await deploy({"dp": "void"}, configs, "envvar")
    await until_allocatable(akube, "dp-void", "nvidia.com/gpu", "2")
    out = node.root / "srv/out"
    where = {"dp": "void"}
    for strategy in DEVICE_LIST_STRATEGIES:
        if strategy != "envvar":
            await relabel(akube, "dp-void", strategy)

        async def applied(strategy: str = strategy) -> bool:
            events = await node_events(akube, "dp-void", "DevicePluginConfigApplied")
            return any(f"config '{strategy}'" in m for m in events)

        await eventually(applied, timeout=30)
        names = {
            "probe-gpu": gpu_pod(
                f"gpu-{strategy}", "nvidia.com/gpu", where, probe=True, unset=UNSET
            ),
            "probe-none": gpu_pod(f"none-{strategy}", None, where, probe=True, unset=UNSET),
            "smi-gpu": smi_pod(f"smi-gpu-{strategy}", "nvidia.com/gpu", where),
            "smi-none": smi_pod(f"smi-none-{strategy}", None, where),
        }
        for pod in names.values():
            await akube.create(pod, namespace=namespace)  # type: ignore[call-overload]

        async def finished(strategy: str = strategy) -> dict[str, int]:
            for name in (f"gpu-{strategy}", f"none-{strategy}"):
                pod = await akube.get(Pod, name, namespace=namespace)
                states = [c.state for c in status_of(pod).containerStatuses or []]
                logs = [
                    p.read_text()[-500:]
                    for p in (node.root / "var/log/pods").glob(f"*_{name}_*/main/*.log")
                ]
                assert (out / name).exists(), (name, status_of(pod).phase, states, logs)
            codes = {}
            for kind in ("gpu", "none"):
                pod = await akube.get(Pod, f"smi-{kind}-{strategy}", namespace=namespace)
                state = cast(
                    list[ContainerStatus | None], status_of(pod).containerStatuses or [None]
                )[0]
                assert (
                    state is not None and cast(ContainerState, state.state).terminated is not None
                )
                codes[kind] = cast(
                    ContainerStateTerminated, cast(ContainerState, state.state).terminated
                ).exitCode
            return codes

        codes = await eventually(finished, timeout=60)
        no_gpu = (out / f"none-{strategy}").read_text()
        with_gpu = (out / f"gpu-{strategy}").read_text()
        assert no_gpu == UNSET, (strategy, no_gpu)  # the plugin is not asked; nothing sets it
        # the same probe shows what a pod with a GPU is given, strategy by strategy
        expected_env = {
            "envvar": uuids,
            "volume-mounts": {"/var/run/nvidia-container-devices"},
            "cdi-annotations": {"void"},
            "cdi-cri": {"void"},
        }[strategy]
        assert with_gpu in expected_env, (strategy, with_gpu)
        accept = accepts_envvar([strategy])
        assert visible_devices({}, accept_envvar=accept) == ()
        # an image that sets NVIDIA_VISIBLE_DEVICES=all itself still gets every GPU under the
        # plain envvar set-up (upstream's known limit); the other set-ups ignore it
        image_all = visible_devices({"NVIDIA_VISIBLE_DEVICES": "all"}, accept_envvar=accept)
        assert image_all == ("all" if strategy == "envvar" else ())
        assert (codes["none"], codes["gpu"]) == (6, 0), (strategy, codes)
        logs = {
            kind: next(
                (node.root / "var/log/pods").glob(f"{namespace}_smi-{kind}-{strategy}_*/main/0.log")
            ).read_text()
            for kind in ("gpu", "none")
        }
        assert "No devices were found" in logs["none"]
        assert len([line for line in logs["gpu"].splitlines() if line.startswith("GPU ")]) == 1
        for pod in names.values():
            await akube.delete(Pod, pod.metadata.name, namespace=namespace)

        async def gone(strategy: str = strategy) -> bool:
            left = [
                meta(p).name
                async for p in akube.list(Pod, namespace=namespace)
                if cast(str, meta(p).name).endswith(strategy)
            ]
            assert not left, left
            return True

        await eventually(gone, timeout=60)
