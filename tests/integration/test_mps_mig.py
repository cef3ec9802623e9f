"""MPS inside MIG instances on a simulated node with the real control plane: the device
plugin and the MPS control daemon as DaemonSets under `sharing.mps.migInstances`, pods placed
by the real scheduler get their instance's pipe and limits, their CUDA processes are clients
of the daemon their env names (the simulated node connects them, as CUDA does), and a fault
of one instance's MPS client ends that daemon's clients, never another instance's."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Node, Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from kube_objects import meta, status_of
from kubegpu.exporter.processes import ProcCgroups
from kubegpu.mig.config import MigConfigEntry
from kubegpu.mig.parted import apply_config
from kubegpu.nvml.sim.mps import SimMps
from kubegpu.sim.kubelet.node import SimNode

from .helpers import eventually
from .simnodes import sim_node

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

IMAGE = "ghcr.io/kubegpu/kubegpu:test"
NODE = "mps-mig"
BIG = "nvidia.com/mig-3g.71gb.shared"  # 4 replicas of the one 3g.71gb instance
SMALL = "nvidia.com/mig-2g.35gb.shared"  # 2 replicas of the one 2g.35gb instance
CONFIG = """\
flags: {migStrategy: mixed, mpsRoot: /run/nvidia/mps}
sharing:
  mps:
    migInstances: true
    renameByDefault: true
    resources:
    - {name: mig-3g.71gb, replicas: 4}
    - {name: mig-2g.35gb, replicas: 2}
"""
MPS_VOLUME = {"name": "mps", "hostPath": {"path": "/run/nvidia/mps", "type": "DirectoryOrCreate"}}
MPS_MOUNT = {"name": "mps", "mountPath": "/run/nvidia/mps"}


@pytest.fixture
async def node(control_plane: Any, akube: AsyncClient) -> AsyncIterator[SimNode]:
    async with sim_node(
        control_plane.kubeconfig_path,
        akube,
        NODE,
        gpus="h200-nvl:1",
        labels={"mm": "1"},
        lease_interval_s=1.0,
    ) as sim:
        yield sim


def component(name: str, command: list[str]) -> DaemonSet:
    return DaemonSet.from_dict(  # type: ignore[return-value]
        {
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"mm": "1"},
                        "terminationGracePeriodSeconds": 5,
                        "containers": [
                            {
                                "name": "main",
                                "image": IMAGE,
                                "command": command,
                                "env": [
                                    {
                                        "name": "NODE_NAME",
                                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                    },
                                    {"name": "MPS_ROOT", "value": "/run/nvidia/mps"},
                                ],
                                "volumeMounts": [
                                    {
                                        "name": "device-plugins",
                                        "mountPath": "/var/lib/kubelet/device-plugins",
                                    },
                                    {"name": "configs", "mountPath": "/available-configs"},
                                    MPS_MOUNT,
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "device-plugins",
                                "hostPath": {"path": "/var/lib/kubelet/device-plugins"},
                            },
                            {"name": "configs", "configMap": {"name": "mps-mig-configs"}},
                            MPS_VOLUME,
                        ],
                    },
                },
            },
        }
    )


@pytest.fixture
async def stack(akube: AsyncClient, namespace: str) -> AsyncIterator[None]:
    """The device plugin and the MPS control daemon, reading the same named config."""
    name = f"kubegpu-mm-{uuid.uuid4().hex[:6]}"
    await akube.create(  # type: ignore[call-overload]
        ConfigMap(metadata=ObjectMeta(name="mps-mig-configs"), data={"mps-mig": CONFIG}),
        namespace=namespace,
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
    await akube.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name=name),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
            subjects=[Subject(kind="ServiceAccount", name="default", namespace=namespace)],
        )
    )
    config = ["--config-dir", "/available-configs", "--default-config", "mps-mig"]
    poll = ["--poll-interval", "0.2"]
    await akube.create(  # type: ignore[call-overload]
        component("mps-daemon", ["kubegpu", "mps-control-daemon", *config, *poll]),
        namespace=namespace,
    )
    await akube.create(  # type: ignore[call-overload]
        component("dp", ["kubegpu", "device-plugin", *config, *poll]), namespace=namespace
    )
    yield
    for ds in ("dp", "mps-daemon"):
        with contextlib.suppress(ApiError):
            await akube.delete(DaemonSet, ds, namespace=namespace)
    for kind in (ClusterRoleBinding, ClusterRole):
        with contextlib.suppress(ApiError):
            await akube.delete(kind, name)


def probe(name: str, resource: str) -> Pod:
    """A pod asking for one `resource` replica that writes its MPS and device env to /out."""
    script = (
        f"env | grep -E '^(CUDA_MPS_|NVIDIA_VISIBLE_DEVICES=)' | sort > /out/.{name}; "
        f"mv /out/.{name} /out/{name}; exec sleep 3600"
    )
    return Pod.from_dict(  # type: ignore[return-value]
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"mm": "1"},
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "command": ["sh", "-c", script],
                        "resources": {"limits": {resource: "1"}},
                        "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                    }
                ],
                "volumes": [
                    {"name": "out", "hostPath": {"path": "/srv/out", "type": "DirectoryOrCreate"}}
                ],
            },
        }
    )


def pod_logs(node: SimNode) -> str:
    logs = sorted((node.root / "var/log/pods").glob("*/main/*.log"))
    return "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in logs)


async def test_mps_inside_mig_instances_limits_and_fault_isolation(
    node: SimNode, akube: AsyncClient, namespace: str, stack: None
) -> None:
    assert node.nvml is not None
    layout = {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}
    entry = MigConfigEntry.model_validate(
        {"devices": "all", "mig-enabled": True, "mig-devices": layout}
    )
    apply_config(node.nvml, "mps-mig", [entry])
    migs = {m.profile: m for m in node.nvml.mig_devices(0)}

    async def advertised() -> bool:
        n = await akube.get(Node, NODE)
        got = {k: v for k, v in (status_of(n).allocatable or {}).items() if k.startswith("nvidia")}
        assert got == {BIG: "4", SMALL: "2", "nvidia.com/mig-1g.18gb": "2"}, (
            f"{got}\n{pod_logs(node)}"
        )
        return True

    await eventually(advertised, timeout=90)
    pods = {"big-0": BIG, "big-1": BIG, "small-0": SMALL}
    for name, resource in pods.items():
        await akube.create(probe(name, resource), namespace=namespace)  # type: ignore[call-overload]
    out = node.root / "srv/out"

    async def written() -> bool:
        missing = [n for n in pods if not (out / n).exists()]
        assert not missing, f"no env from {missing}\n{pod_logs(node)}"
        return True

    await eventually(written, timeout=90)
    env = {n: dict(line.split("=", 1) for line in (out / n).read_text().splitlines()) for n in pods}

    # every pod got its instance's daemon and limits: shares of the instance, not the card
    for name, profile, replicas in (
        ("big-0", "3g.71gb", 4),
        ("big-1", "3g.71gb", 4),
        ("small-0", "2g.35gb", 2),
    ):
        mig = migs[profile]
        resource = pods[name]
        assert env[name] == {
            "NVIDIA_VISIBLE_DEVICES": mig.uuid,
            "CUDA_MPS_PIPE_DIRECTORY": f"/mps/{resource}/{mig.uuid}/pipe",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // replicas),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={mig.memory_mib // replicas}M",
        }, name
        # the instance's daemon set the same limits (the simulated daemon records them)
        record = json.loads(
            (node.root / f"run/nvidia/mps/{resource}/{mig.uuid}/limits.json").read_text()
        )
        (device,) = record["devices"]
        assert record["migInstance"] == mig.uuid
        assert device["pinnedDeviceMemoryLimitMiB"] == mig.memory_mib // replicas
        assert device["activeThreadPercentage"] == 100 // replicas
        pod = await akube.get(Pod, name, namespace=namespace)
        assert cast(PodSpec, pod.spec).nodeName == NODE  # placed by the real scheduler

    # each pod's CUDA process is a client of the daemon its env names, on the device it got:
    # the node connected them itself (its pipe directory on the node, through the mounts)
    uids = {meta(await akube.get(Pod, n, namespace=namespace)).uid: n for n in pods}
    cgroups = ProcCgroups(node.root / "proc")
    procs = {uids[u]: p for p in node.nvml.processes(0) if (u := cgroups.pod_uid(p.pid)) in uids}
    assert set(procs) == set(pods), procs
    lab = SimMps.of(node.nvml)
    for name, profile in (("big-0", "3g.71gb"), ("big-1", "3g.71gb"), ("small-0", "2g.35gb")):
        assert procs[name].gpu_instance_id == migs[profile].gpu_instance_id, name
    daemon = {
        p: f"/run/nvidia/mps/{r}/{migs[p].uuid}/pipe"
        for p, r in (("3g.71gb", BIG), ("2g.35gb", SMALL))
    }
    big = {procs["big-0"].pid, procs["big-1"].pid}
    assert set(lab.clients(0, daemon["3g.71gb"])) == big
    assert lab.clients(0, daemon["2g.35gb"]) == [procs["small-0"].pid]

    fault = lab.client_fault(0, procs["big-0"].pid)
    # the fault ends both clients of the faulting instance's daemon, never the other's
    assert fault.ended[0] == procs["big-0"].pid and set(fault.ended) == big
    assert fault.gi == migs["3g.71gb"].gpu_instance_id
    assert lab.clients(0) == [procs["small-0"].pid]
    assert [p.pid for p in node.nvml.processes(0)] == [procs["small-0"].pid]
