"""A strict simulated node on the real control plane enforces its container runtime's
contract: a pod whose RuntimeClass names a handler the runtime's config lacks does not
start (the runtime's own words in the event and the container status); NVIDIA's toolkit
pod, given the env and mounts GPU operator renders, adds the `nvidia` handler; then a pod
with that handler and NVIDIA_VISIBLE_DEVICES runs its real shell command and sees exactly
its GPU, and a `void` pod or a pod without the handler sees none."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.node_v1 import RuntimeClass

from kubegpu.sim.kubelet.node import SimNode
from kubegpu.sim.runtime.config import RuntimeOptions, sandbox_id

from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "sim-strict"
RUNTIME_CLASS = "kg-strict-nvidia"  # handler `nvidia`, as GPU operator's RuntimeClass
TOOLKIT_IMAGE = "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0-ubi8"
CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
SHELL = "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"


@contextlib.asynccontextmanager
async def strict_node(
    sim_nodes: SimNodes, akube: AsyncClient, runtime: RuntimeOptions
) -> AsyncIterator[SimNode]:
    rc = cast(
        RuntimeClass,
        RuntimeClass.from_dict({"metadata": {"name": RUNTIME_CLASS}, "handler": "nvidia"}),
    )
    with contextlib.suppress(ApiError):
        await akube.create(rc)
    try:
        yield await sim_nodes.start(
            NODE, gpus="h100-80gb:2", labels={"pool": "strict"}, runtime=runtime
        )
    finally:
        with contextlib.suppress(ApiError):
            await akube.delete(RuntimeClass, RUNTIME_CLASS)


@pytest.fixture
async def node(sim_nodes: SimNodes, akube: AsyncClient) -> AsyncIterator[SimNode]:
    async with strict_node(
        sim_nodes, akube, RuntimeOptions("containerd", "2.0.5", strict=True)
    ) as sim:
        yield sim


@pytest.fixture
async def crio_node(sim_nodes: SimNodes, akube: AsyncClient) -> AsyncIterator[SimNode]:
    async with strict_node(sim_nodes, akube, RuntimeOptions("cri-o", "1.31.3", strict=True)) as sim:
        yield sim


def shell_pod(name: str, env: dict[str, str], runtime_class: str | None = RUNTIME_CLASS) -> Pod:
    spec: dict[str, Any] = {
        "nodeSelector": {"pool": "strict"},
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": CUDA_IMAGE,
                "command": ["bash", "-c", SHELL],
                "env": [{"name": k, "value": v} for k, v in env.items()],
            }
        ],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return cast(Pod, Pod.from_dict({"metadata": {"name": name}, "spec": spec}))


def toolkit_pod() -> Pod:
    """The toolkit container as GPU operator renders it for containerd."""
    env = {
        "RUNTIME": "containerd",
        "RUNTIME_CONFIG": "/runtime/config-dir/config.toml",
        "CONTAINERD_CONFIG": "/runtime/config-dir/config.toml",
        "RUNTIME_DROP_IN_CONFIG": "/runtime/config-dir.d/99-nvidia.toml",
        "RUNTIME_DROP_IN_CONFIG_HOST_PATH": "/etc/containerd/conf.d/99-nvidia.toml",
        "RUNTIME_SOCKET": "/runtime/sock-dir/containerd.sock",
        "CONTAINERD_SOCKET": "/runtime/sock-dir/containerd.sock",
        "CONTAINERD_RUNTIME_CLASS": "nvidia",
    }
    volumes = {
        "containerd-config": ("/etc/containerd", "/runtime/config-dir/"),
        "containerd-drop-in-config": ("/etc/containerd/conf.d", "/runtime/config-dir.d/"),
        "containerd-socket": ("/run/containerd", "/runtime/sock-dir/"),
        "toolkit-install-dir": ("/usr/local/nvidia", "/usr/local/nvidia"),
        "host-root": ("/", "/host"),
    }
    return cast(
        Pod,
        Pod.from_dict(
            {
                "metadata": {"name": "toolkit"},
                "spec": {
                    "nodeSelector": {"pool": "strict"},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "nvidia-container-toolkit-ctr",
                            "image": TOOLKIT_IMAGE,
                            "env": [{"name": k, "value": v} for k, v in env.items()],
                            "volumeMounts": [
                                {"name": n, "mountPath": m} for n, (_, m) in volumes.items()
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": n, "hostPath": {"path": p}} for n, (p, _) in volumes.items()
                    ],
                },
            }
        ),
    )


async def logs(akube: AsyncClient, namespace: str, name: str) -> str:
    return "".join([line async for line in akube.log(name, namespace=namespace)])


async def running(akube: AsyncClient, namespace: str, name: str) -> bool:
    p = await akube.get(Pod, name, namespace=namespace)
    return bool(p.status and p.status.phase == "Running")


async def logged(akube: AsyncClient, namespace: str, name: str, text: str) -> str:
    async def has() -> str | None:
        out = await logs(akube, namespace, name)
        return out if text in out else None

    return cast(str, await eventually(has, timeout=60))


async def test_the_nvidia_handler_exists_only_once_the_toolkit_configured_it(
    node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    n = await akube.get(Node, NODE)
    assert n.status is not None and n.status.nodeInfo is not None
    info = n.status.nodeInfo
    assert info.containerRuntimeVersion == "containerd://2.0.5"
    assert node.nvml is not None
    first, second = (d.uuid for d in node.nvml.devices())
    gpu = await akube.create(  # type: ignore[call-overload]
        shell_pod("gpu", {"NVIDIA_VISIBLE_DEVICES": second}), namespace=namespace
    )
    assert gpu.metadata is not None and gpu.metadata.uid is not None
    error = (
        f'unable to get OCI runtime for sandbox "{sandbox_id(gpu.metadata.uid)}": '
        'no runtime for "nvidia" is configured'
    )

    async def refused() -> bool:
        p = await akube.get(Pod, "gpu", namespace=namespace)
        statuses = (p.status.containerStatuses or []) if p.status else []
        waiting = [s.state.waiting for s in statuses if s.state and s.state.waiting]
        return (
            p.status is not None
            and p.status.phase == "Pending"
            and any(w.reason == "ContainerCreating" and w.message == error for w in waiting)
        )

    await eventually(refused, timeout=60)

    async def event() -> bool:
        async for e in akube.list(Event, namespace=namespace):
            if e.reason == "FailedCreatePodSandBox" and e.involvedObject.name == "gpu":
                assert e.message == (
                    f"Failed to create pod sandbox: rpc error: code = Unknown desc = {error}"
                )
                return True
        return False

    await eventually(event)

    await akube.create(toolkit_pod(), namespace=namespace)  # type: ignore[call-overload]
    await eventually(lambda: running(akube, namespace, "toolkit"), timeout=60)
    assert "nvidia" in node.runtime.loaded.names
    assert (node.root / "usr/local/nvidia/toolkit/nvidia-container-runtime").is_file()

    # the kubelet's retry now finds the handler: the pod's shell runs, and sees its GPU only
    out = await logged(akube, namespace, "gpu", "UUID:")
    assert second in out and first not in out
    await eventually(lambda: running(akube, namespace, "gpu"), timeout=30)

    await akube.create(shell_pod("void", {"NVIDIA_VISIBLE_DEVICES": "void"}), namespace=namespace)  # type: ignore[call-overload]
    await akube.create(shell_pod("plain", {}, runtime_class=None), namespace=namespace)  # type: ignore[call-overload]
    for name in ("void", "plain"):
        out = await logged(akube, namespace, name, "nvidia-smi")
        assert "command not found" in out and "UUID" not in out
        await eventually(lambda n=name: running(akube, namespace, n), timeout=30)  # type: ignore[misc]

    # the toolkit's signal reverts the config: a new nvidia pod no longer starts
    await akube.delete(Pod, "toolkit", namespace=namespace)

    async def reverted() -> bool:
        return "nvidia" not in node.runtime.loaded.names

    await eventually(reverted, timeout=60)
    assert not (node.root / "etc/containerd/conf.d/99-nvidia.toml").exists()


async def test_a_toolkit_pod_without_the_runtime_env_configures_nothing(
    node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    pod = toolkit_pod().to_dict()
    pod["spec"]["containers"][0]["env"] = []  # RUNTIME unset: the installer's docker default
    pod["spec"]["restartPolicy"] = "Never"
    await akube.create(Pod.from_dict(pod), namespace=namespace)  # type: ignore[call-overload]
    out = await logged(akube, namespace, "toolkit", "error running nvidia-ctk-installer")
    assert "unable to restart docker" in out
    assert "nvidia" not in node.runtime.loaded.names


async def test_on_cri_o_the_handler_comes_from_a_drop_in_and_a_host_root_restart(
    crio_node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    n = await akube.get(Node, NODE)
    assert n.status is not None and n.status.nodeInfo is not None
    assert n.status.nodeInfo.containerRuntimeVersion == "cri-o://1.31.3"
    await akube.create(shell_pod("gpu", {"NVIDIA_VISIBLE_DEVICES": "all"}), namespace=namespace)  # type: ignore[call-overload]

    async def refused() -> str | None:
        p = await akube.get(Pod, "gpu", namespace=namespace)
        for status in (p.status.containerStatuses or []) if p.status else []:
            if status.state and status.state.waiting and status.state.waiting.message:
                return status.state.waiting.message
        return None

    message = cast(str, await eventually(refused, timeout=60))
    assert message.startswith("failed to find runtime handler nvidia from runtime list map[crun:")

    pod = toolkit_pod().to_dict()
    ctr = pod["spec"]["containers"][0]
    ctr["env"] = [
        {"name": "RUNTIME", "value": "crio"},
        {"name": "RUNTIME_CONFIG", "value": "/runtime/config-dir/crio.conf"},
        {"name": "RUNTIME_DROP_IN_CONFIG", "value": "/runtime/config-dir.d/99-nvidia.conf"},
    ]
    volumes = {
        "crio-config": ("/etc/crio", "/runtime/config-dir/"),
        "crio-drop-in-config": ("/etc/crio/crio.conf.d", "/runtime/config-dir.d/"),
        "toolkit-install-dir": ("/usr/local/nvidia", "/usr/local/nvidia"),
        "host-root": ("/", "/host"),
    }
    ctr["volumeMounts"] = [{"name": k, "mountPath": m} for k, (_, m) in volumes.items()]
    pod["spec"]["volumes"] = [{"name": k, "hostPath": {"path": p}} for k, (p, _) in volumes.items()]
    await akube.create(Pod.from_dict(pod), namespace=namespace)  # type: ignore[call-overload]
    await eventually(lambda: running(akube, namespace, "toolkit"), timeout=60)
    assert (crio_node.root / "etc/crio/crio.conf.d/99-nvidia.conf").is_file()
    assert crio_node.nvml is not None
    out = await logged(akube, namespace, "gpu", "UUID:")
    assert all(d.uuid in out for d in crio_node.nvml.devices())
