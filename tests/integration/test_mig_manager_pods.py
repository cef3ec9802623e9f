"""The MIG manager, the device plugin and feature discovery as DaemonSet pods on a simulated
node, as the operator deploys them: the manager pauses the real device plugin and feature
discovery through their deploy labels, repartitions, and the plugin comes back advertising
the new devices while feature discovery relabels the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import ContainerStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from kube_objects import meta, status_of
from kubegpu.kube.labels import labels_of
from kubegpu.kube.nodes import watch_node
from kubegpu.mig_manager import MIG_CONFIG_LABEL, MIG_STATE_LABEL, PAUSED
from kubegpu.sim.kubelet.node import SimNode

from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

IMAGE = "ghcr.io/kubegpu/kubegpu:test"
DEPLOY = "nvidia.com/gpu.deploy."
EXAMPLES = Path(__file__).parents[2] / "examples/mig-configs"
WAIT_S = 90.0

# What the three components need from the API server (docs/mig-manager.md lists it).
RULES = [
    PolicyRule(apiGroups=[""], resources=["nodes"], verbs=["get", "list", "watch", "patch"]),
    PolicyRule(apiGroups=[""], resources=["pods"], verbs=["get", "list", "watch"]),
    PolicyRule(apiGroups=[""], resources=["events"], verbs=["create", "patch"]),
    PolicyRule(
        apiGroups=[""], resources=["configmaps"], verbs=["get", "create", "update", "patch"]
    ),
]


def _env(**values: str) -> list[dict[str, Any]]:
    fields = {"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name"}
    fields["OPERATOR_NAMESPACE"] = "metadata.namespace"
    out: list[dict[str, Any]] = [
        {"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in fields.items()
    ]
    return out + [{"name": k, "value": v} for k, v in values.items()]


def daemonset(
    app: str,
    operand: str,
    args: list[str],
    env: dict[str, str],
    host_paths: list[str],
    extra_volumes: list[tuple[dict[str, Any], str]] | None = None,
) -> DaemonSet:
    volumes = [
        {"name": f"h{i}", "hostPath": {"path": p, "type": "DirectoryOrCreate"}}
        for i, p in enumerate(host_paths)
    ]
    mounts = [{"name": f"h{i}", "mountPath": p} for i, p in enumerate(host_paths)]
    for i, (vol, path) in enumerate(extra_volumes or []):
        volumes.append({"name": f"x{i}", **vol})
        mounts.append({"name": f"x{i}", "mountPath": path})
    return DaemonSet.from_dict(  # type: ignore[return-value]
        {
            "metadata": {"name": app},
            "spec": {
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "nodeSelector": {DEPLOY + operand: "true"},
                        "terminationGracePeriodSeconds": 5,
                        "containers": [
                            {
                                "name": operand,
                                "image": IMAGE,
                                "command": ["kubegpu", *args],
                                "env": _env(**env),
                                "volumeMounts": mounts,
                            }
                        ],
                        "volumes": volumes,
                    },
                },
            },
        }
    )


def device_plugin(strategy: str) -> DaemonSet:
    return daemonset(
        "nvidia-device-plugin-daemonset",
        "device-plugin",
        ["device-plugin"],
        {"MIG_STRATEGY": strategy, "KUBEGPU_POLL_INTERVAL": "0.2"},
        ["/var/lib/kubelet/device-plugins", "/var/run/cdi"],
    )


def feature_discovery(strategy: str) -> DaemonSet:
    return daemonset(
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        ["feature-discovery"],
        {"GFD_MIG_STRATEGY": strategy, "GFD_NO_TIMESTAMP": "true"},
        [],
    )


def mig_manager(
    *, with_reboot: bool = False, config_map: str | None = None, pods_timeout: str = "60"
) -> DaemonSet:
    env = {
        "WITH_REBOOT": str(with_reboot).lower(),
        "REBOOT_COMMAND": "touch /run/kubegpu-sim/reboot-request",
        "CDI_ENABLED": "true",
    }
    extra: list[tuple[dict[str, Any], str]] = []
    if config_map:
        env["CONFIG_FILE"] = "/mig-parted-config/config.yaml"
        extra.append(({"configMap": {"name": config_map}}, "/mig-parted-config"))
    return daemonset(
        "nvidia-mig-manager",
        "mig-manager",
        [
            "mig-manager",
            "--poll-interval",
            "0.2",
            "--pods-timeout",
            pods_timeout,
            # a typo below fails after this wait for the name (pending meanwhile)
            "--unknown-config-wait",
            "2",
        ],
        env,
        ["/var/lib/kubelet/pod-resources", "/var/run/cdi", "/run/kubegpu-sim"],
        extra,
    )


class Recorder:
    def __init__(self, akube: AsyncClient, node: str) -> None:
        self.states: list[str] = []
        self.paused_seen = False
        self._task = asyncio.create_task(self._run(akube, node))

    async def _run(self, akube: AsyncClient, node: str) -> None:
        async for n in watch_node(akube, node):
            if n is None:
                continue
            labels = labels_of(n)
            state = labels.get(MIG_STATE_LABEL, "")
            if state and (not self.states or self.states[-1] != state):
                self.states.append(state)
            self.paused_seen |= labels.get(DEPLOY + "device-plugin") == PAUSED

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


Cluster = Callable[..., Awaitable[tuple[SimNode, Recorder]]]


@pytest.fixture
async def cluster(control_plane: Any, akube: AsyncClient, namespace: str) -> AsyncIterator[Cluster]:
    """A simulated GPU node plus RBAC for the node components' service account."""
    cleanups: list[Callable[[], Awaitable[None]]] = []
    sim_nodes = SimNodes(control_plane.kubeconfig_path, akube)  # ended before the RBAC goes
    role = f"kubegpu-node-{namespace}"
    await akube.create(ClusterRole(metadata=ObjectMeta(name=role), rules=RULES))
    await akube.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name=role),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
            subjects=[Subject(kind="ServiceAccount", name="default", namespace=namespace)],
        )
    )

    async def make(name: str, gpus: str, *daemonsets: DaemonSet) -> tuple[SimNode, Recorder]:
        labels = {
            DEPLOY + o: "true" for o in ("device-plugin", "gpu-feature-discovery", "mig-manager")
        }
        node = await sim_nodes.start(name, gpus=gpus, labels=labels, lease_interval_s=2.0)

        async def drop() -> None:  # the node itself ends after the test (sim_nodes)
            for ds in daemonsets:
                with contextlib.suppress(ApiError):
                    await akube.delete(DaemonSet, cast(str, meta(ds).name), namespace=namespace)

        cleanups.append(drop)
        recorder = Recorder(akube, name)
        cleanups.append(recorder.stop)
        for ds in daemonsets:
            await akube.create(ds, namespace=namespace)  # type: ignore[call-overload]
        return node, recorder

    yield make
    for cleanup in reversed(cleanups):
        await cleanup()
    await sim_nodes.close()
    await akube.delete(ClusterRoleBinding, role)
    await akube.delete(ClusterRole, role)


async def allocatable(akube: AsyncClient, node: str) -> dict[str, str]:
    n = await akube.get(Node, node)
    alloc = (n.status.allocatable if n.status else None) or {}
    return {k: v for k, v in alloc.items() if k.startswith("nvidia.com/") and v != "0"}


async def advertises(akube: AsyncClient, node: str, expected: dict[str, str]) -> None:
    async def check() -> bool:
        return await allocatable(akube, node) == expected

    await eventually(check, timeout=WAIT_S, interval=0.2)


async def labelled(akube: AsyncClient, node: str, expected: dict[str, str | None]) -> None:
    async def check() -> bool:
        labels = labels_of(await akube.get(Node, node))
        return all(labels.get(k) == v for k, v in expected.items())

    await eventually(check, timeout=WAIT_S, interval=0.2)


async def settled(akube: AsyncClient, node: str, recorder: Recorder, n: int) -> str:
    """The state after the recorder has seen at least `n` states, once it is final."""

    async def check() -> str | None:
        if len(recorder.states) >= n and recorder.states[-1] in {"success", "failed"}:
            return recorder.states[-1]
        return None

    return cast(str, await eventually(check, timeout=WAIT_S, interval=0.2))


async def set_config(akube: AsyncClient, node: str, value: str) -> None:
    await akube.patch(Node, node, {"metadata": {"labels": {MIG_CONFIG_LABEL: value}}})


async def pod_uid(akube: AsyncClient, namespace: str, app: str, node: str) -> str:
    async def running() -> str | None:
        async for p in akube.list(
            Pod, namespace=namespace, labels={"app": app}, fields={"spec.nodeName": node}
        ):
            if p.status and p.status.phase == "Running" and not meta(p).deletionTimestamp:
                return str(meta(p).uid)
        return None

    return cast(str, await eventually(running, timeout=WAIT_S))


async def failures(akube: AsyncClient, node: str) -> list[str]:
    return [
        e.message or ""
        async for e in akube.list(Event, namespace="default", fields={"involvedObject.name": node})
        if e.reason == "MigConfigFailed"
    ]


async def test_mixed_strategy_repartitions_with_the_device_plugin_paused_and_back(
    cluster: Cluster, akube: AsyncClient, namespace: str
) -> None:
    node, rec = await cluster(
        "mmp-mixed",
        "h200-nvl:8",
        device_plugin("mixed"),
        feature_discovery("mixed"),
        mig_manager(),
    )
    await advertises(akube, node.name, {"nvidia.com/gpu": "8"})
    await labelled(akube, node.name, {"nvidia.com/gpu.count": "8"})
    plugin_before = await pod_uid(akube, namespace, "nvidia-device-plugin-daemonset", node.name)
    await pod_uid(akube, namespace, "nvidia-mig-manager", node.name)

    # all-1g.18gb: pending -> success; the plugin is paused and comes back with 56 slices
    await set_config(akube, node.name, "all-1g.18gb")
    assert await settled(akube, node.name, rec, 2) == "success"
    assert rec.states == ["pending", "success"]
    assert rec.paused_seen
    await advertises(akube, node.name, {"nvidia.com/mig-1g.18gb": "56"})
    plugin_after = await pod_uid(akube, namespace, "nvidia-device-plugin-daemonset", node.name)
    assert plugin_after != plugin_before
    await labelled(
        akube,
        node.name,
        {
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig-1g.18gb.count": "56",
            "nvidia.com/mig-1g.18gb.product": "NVIDIA-H200-NVL-MIG-1g.18gb",
            "nvidia.com/gpu.count": "8",
            DEPLOY + "device-plugin": "true",
            DEPLOY + "gpu-feature-discovery": "true",
        },
    )
    assert (node.root / "var/run/cdi/management.nvidia.com-gpu.yaml").exists()

    # a typo: failed with the reason, and nothing changes (the plugin is not even paused)
    rec.paused_seen = False
    await set_config(akube, node.name, "all-1g.18gbb")
    assert await settled(akube, node.name, rec, 3) == "failed"
    assert not rec.paused_seen
    assert any("unknown config name 'all-1g.18gbb'" in m for m in await failures(akube, node.name))
    assert await pod_uid(akube, namespace, "nvidia-device-plugin-daemonset", node.name) == (
        plugin_after
    )
    await advertises(akube, node.name, {"nvidia.com/mig-1g.18gb": "56"})

    # all-disabled: 8 whole GPUs again, and the MIG labels go
    await set_config(akube, node.name, "all-disabled")
    assert await settled(akube, node.name, rec, 5) == "success"
    await advertises(akube, node.name, {"nvidia.com/gpu": "8"})
    await labelled(akube, node.name, {"nvidia.com/mig-1g.18gb.count": None})

    # the MIG manager is killed mid-change; its restarted container converges
    await set_config(akube, node.name, "all-1g.18gb")
    await eventually(lambda: _state_is(rec, "pending"), timeout=WAIT_S, interval=0.05)
    (runner,) = [r for r in node.runners.values() if r.name.startswith("nvidia-mig-manager")]
    for pid in runner.pids():
        os.killpg(pid, signal.SIGKILL)
    assert await settled(akube, node.name, rec, 7) == "success"
    await advertises(akube, node.name, {"nvidia.com/mig-1g.18gb": "56"})
    await labelled(
        akube,
        node.name,
        {DEPLOY + "device-plugin": "true", DEPLOY + "gpu-feature-discovery": "true"},
    )
    mm = [
        p async for p in akube.list(Pod, namespace=namespace, labels={"app": "nvidia-mig-manager"})
    ]
    assert cast(list[ContainerStatus], status_of(mm[0]).containerStatuses)[0].restartCount >= 1


async def _state_is(rec: Recorder, state: str) -> bool:
    return bool(rec.states) and rec.states[-1] == state


async def test_single_strategy_and_a_gpu_held_by_a_workload(
    cluster: Cluster, akube: AsyncClient, namespace: str
) -> None:
    node, rec = await cluster(
        "mmp-single",
        "h200-nvl:8",
        device_plugin("single"),
        feature_discovery("single"),
        mig_manager(),
    )
    await advertises(akube, node.name, {"nvidia.com/gpu": "8"})
    workload = Pod.from_dict(
        {
            "metadata": {"name": "trainer"},
            "spec": {
                "nodeName": node.name,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
    )
    await akube.create(workload, namespace=namespace)  # type: ignore[call-overload]

    async def trainer_running() -> bool:
        p = await akube.get(Pod, "trainer", namespace=namespace)
        return p.status is not None and p.status.phase == "Running"

    await eventually(trainer_running, timeout=WAIT_S)
    await set_config(akube, node.name, "all-1g.18gb")
    assert await settled(akube, node.name, rec, 1) == "failed"
    assert not rec.paused_seen
    (message,) = await failures(akube, node.name)
    assert f"{namespace}/trainer" in message
    await advertises(akube, node.name, {"nvidia.com/gpu": "8"})

    # the workload finishes; removing the state label asks for another attempt
    await akube.delete(Pod, "trainer", namespace=namespace, grace_period=0)
    await akube.patch(Node, node.name, {"metadata": {"labels": {MIG_STATE_LABEL: None}}})
    assert await settled(akube, node.name, rec, 3) == "success"
    await advertises(akube, node.name, {"nvidia.com/gpu": "56"})
    await labelled(
        akube,
        node.name,
        {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.product": "NVIDIA-H200-NVL-MIG-1g.18gb",
            "nvidia.com/gpu.count": "56",
            "nvidia.com/gpu.slices.gi": "1",
        },
    )


async def test_with_reboot_a_reset_needing_model_goes_through_rebooting(
    cluster: Cluster, akube: AsyncClient
) -> None:
    node, rec = await cluster(
        "mmp-reboot", "a100-80gb:2", device_plugin("mixed"), mig_manager(with_reboot=True)
    )
    await advertises(akube, node.name, {"nvidia.com/gpu": "2"})
    boot = node.boot_id
    await set_config(akube, node.name, "all-1g.10gb")
    assert await settled(akube, node.name, rec, 4) == "success"
    assert rec.states == ["pending", "rebooting", "pending", "success"]
    assert node.boot_id != boot  # the node really rebooted, asked by the manager's pod
    assert not node.reboot_request.exists()
    await advertises(akube, node.name, {"nvidia.com/mig-1g.10gb": "14"})
    await labelled(akube, node.name, {DEPLOY + "device-plugin": "true"})


async def test_a_custom_configmap_like_the_inference_mix_example_under_mixed(
    cluster: Cluster, akube: AsyncClient, namespace: str
) -> None:
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(
            metadata=ObjectMeta(name="custom-mig-config"),
            data={"config.yaml": (EXAMPLES / "inference-mix.yaml").read_text()},
        ),
        namespace=namespace,
    )
    node, rec = await cluster(
        "mmp-mix",
        "h200-nvl:4",
        device_plugin("mixed"),
        feature_discovery("mixed"),
        mig_manager(config_map="custom-mig-config"),
    )
    await advertises(akube, node.name, {"nvidia.com/gpu": "4"})
    await set_config(akube, node.name, "inference-mix")
    assert await settled(akube, node.name, rec, 2) == "success"
    await advertises(
        akube,
        node.name,
        {
            "nvidia.com/gpu": "3",
            "nvidia.com/mig-1g.18gb": "2",
            "nvidia.com/mig-2g.35gb": "1",
            "nvidia.com/mig-3g.71gb": "1",
        },
    )
    await labelled(
        akube,
        node.name,
        {
            "nvidia.com/mig-1g.18gb.count": "2",
            "nvidia.com/mig-2g.35gb.count": "1",
            "nvidia.com/mig-3g.71gb.count": "1",
            "nvidia.com/gpu.count": "4",
        },
    )
