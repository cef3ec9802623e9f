"""`kubegpu what-if` end to end: a source cluster (simulated, kubegpu installed by its chart,
a training pod holding one node's GPU) is snapshotted through a read-only account, the
snapshot is rebuilt as a twin, a change is tried there and the report read.

One source cluster serves the module; each `what-if run` builds its own twin (its own
control plane), as a user's command does. The source is only ever read: the last test
checks it is exactly as it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_asyncio
import yaml
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.core_v1 import PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, Node, Pod, ServiceAccount, ServiceAccountToken
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from kube_objects import meta
from kubegpu.catalog import nvidia
from kubegpu.doctor.snapshot import Snapshot
from kubegpu.mig.parted import read_node
from kubegpu.sharing.devices import mig_resource_name
from kubegpu.sim.cluster import ClusterSpec, NodeEntry
from kubegpu.sim.stack import Stack, find_chart, simulated_stack

from .helpers import eventually

RUN_TIMEOUT_S = 600
# a what-if run builds a whole cluster (control plane, nodes, helm install) and waits for it
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(RUN_TIMEOUT_S + 300),
]

BUSY = "wi-busy"  # its one GPU held by the training pod
FREE = "wi-free"
NODES = [
    NodeEntry(name="wi-cpu", labels={"node-role.kubernetes.io/control-plane": ""}),
    NodeEntry(name=BUSY, gpus="h100-80gb:1"),
    NodeEntry(name=FREE, gpus="h100-80gb:1"),
]
TRAIN = "ml/train"
# what the planner is asked for: seven small inference replicas on the free node's H100
PLAN = """\
fleet:
  - name: wi-free
    gpus: h100-80gb:1
workloads:
  - name: chat
    replicas: 7
    memory: 9GiB
    compute: 0.1
"""


@dataclass
class Source:
    stack: Stack
    snapshot_file: Path
    readonly_kubeconfig: Path
    work: Path
    initial: dict[str, Any]  # the source before anything read it (source_state)


def kubegpu(*args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """The kubegpu command line, as a user runs it (a process of its own)."""
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "COLUMNS": "160"},
    )


async def readonly_kubeconfig(stack: Stack, path: Path) -> Path:
    """A kubeconfig for an account that may get, list and watch everything, and nothing else."""
    client = stack.client
    await client.create(
        ClusterRole(
            metadata=ObjectMeta(name="wi-reader"),
            rules=[PolicyRule(apiGroups=["*"], resources=["*"], verbs=["get", "list", "watch"])],
        )
    )
    await client.create(ServiceAccount(metadata=ObjectMeta(name="wi-reader")), namespace="default")  # type: ignore[call-overload]
    await client.create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name="wi-reader"),
            roleRef=RoleRef(
                apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="wi-reader"
            ),
            subjects=[Subject(kind="ServiceAccount", name="wi-reader", namespace="default")],
        )
    )
    token = await client.create(
        ServiceAccountToken(
            metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], expirationSeconds=3600)
        ),
        "wi-reader",
        namespace="default",
    )
    assert token.status is not None
    config = yaml.safe_load(stack.kubeconfig.read_text())
    config["users"] = [{**u, "user": {"token": token.status.token}} for u in config["users"]]
    path.write_text(yaml.safe_dump(config))
    return path


async def source_state(stack: Stack) -> dict[str, Any]:
    """What a write to the source would change: labels, resource versions, the GPUs."""
    nodes = {}
    for name, sim in stack.nodes.items():
        node = await stack.client.get(Node, name)
        labels = dict(meta(node).labels or {})
        labels.pop(nvidia.GFD_TIMESTAMP, None)  # feature discovery's own heartbeat
        nodes[name] = {
            "labels": labels,
            "layout": [s.describe() for s in read_node(sim.nvml)] if sim.nvml else [],
        }
    policy = await stack.policy()
    pod = await stack.client.get(Pod, "train", namespace="ml")
    return {
        "nodes": nodes,
        "policy": (policy["metadata"]["generation"], policy["spec"]),
        "pod": (meta(pod).labels, meta(pod).annotations, cast(PodSpec, pod.spec).nodeName),
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def source() -> AsyncIterator[Source]:
    work = Path(tempfile.mkdtemp(prefix="kg-wi-", dir="/tmp"))
    try:
        async with simulated_stack(ClusterSpec(nodes=NODES), work, chart=find_chart()) as stack:

            async def ready() -> bool:
                if await stack.policy_state() != "ready":
                    return False
                for name in (BUSY, FREE):
                    if (await stack.allocatable(name)).get(nvidia.GPU_RESOURCE) != "1":
                        return False
                return True

            await eventually(ready, timeout=300, interval=1)
            await stack.client.create(Namespace(metadata=ObjectMeta(name="ml")))
            await eventually(
                lambda: stack.client.get(ServiceAccount, "default", namespace="ml"), timeout=30
            )
            train = {
                "metadata": {"name": "train", "labels": {"app": "train"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": BUSY},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/train:1",
                            "resources": {"limits": {nvidia.GPU_RESOURCE: "1"}},
                        }
                    ],
                },
            }
            await stack.client.create(Pod.from_dict(train), namespace="ml")  # type: ignore[call-overload]

            async def running() -> bool:
                pod = await stack.client.get(Pod, "train", namespace="ml")
                return pod.status is not None and pod.status.phase == "Running"

            await eventually(running, timeout=120, interval=1)
            reader = await readonly_kubeconfig(stack, work / "reader.kubeconfig")
            initial = await source_state(stack)
            result = await asyncio.to_thread(
                kubegpu, "what-if", "snapshot", "--kubeconfig", str(reader), timeout=120
            )
            assert result.returncode == 0, result.stderr
            snapshot_file = work / "cluster.json"
            snapshot_file.write_text(result.stdout)
            yield Source(stack, snapshot_file, reader, work, initial)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def what_if(source: Source, *change: str) -> dict[str, Any]:
    result = await asyncio.to_thread(
        kubegpu, "what-if", "run", str(source.snapshot_file), "--json", *change
    )
    assert result.returncode in (0, 1, 2), f"exit {result.returncode}\n{result.stderr}"
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["exit_code"] == result.returncode
    return report


def node(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in report["nodes"] if n["name"] == name)


async def test_the_snapshot_is_read_with_a_read_only_account(source: Source) -> None:
    snapshot = Snapshot.from_json(source.snapshot_file.read_text(), "cluster.json")
    assert {n.name for n in snapshot.nodes} == {"wi-cpu", BUSY, FREE}
    (train,) = [p for p in snapshot.workload_pods if p.key == TRAIN]
    assert (train.node, train.phase, train.gpu_resources) == (
        BUSY,
        "Running",
        {nvidia.GPU_RESOURCE: "1"},
    )
    assert snapshot.cluster_policy is not None


async def test_repartitioning_a_gpu_a_running_pod_holds_is_blocked_and_the_pod_named(
    source: Source,
) -> None:
    report = await what_if(source, "--mig-config", f"{BUSY}=all-1g.10gb")
    (blocked,) = report["blocked"]
    assert (blocked["pod"], blocked["node"], blocked["gpus"]) == (TRAIN, BUSY, [0])
    assert "refusing to repartition" in blocked["reason"]
    busy = node(report, BUSY)
    assert busy["mig_state"] == "failed"
    assert not busy["repartitioned"] and busy["not_applied_gpus"] == [0]
    assert busy["advertised_after"] == busy["advertised_before"] == {nvidia.GPU_RESOURCE: "1"}
    assert report["exit_code"] == 2  # the change does not go through


async def test_a_planner_output_directory_gives_the_resources_the_plan_says(
    source: Source,
) -> None:
    plan_dir = source.work / "plan"
    (source.work / "plan.yaml").write_text(PLAN)
    planned = await asyncio.to_thread(
        kubegpu, "plan", "-f", str(source.work / "plan.yaml"), "--out", str(plan_dir), timeout=120
    )
    assert planned.returncode == 0, planned.stderr
    plan = json.loads((plan_dir / "plan.json").read_text())
    (planned_node,) = plan["nodes"]
    layout = planned_node["layout"][0]
    assert layout["role"] == "mig"
    # what the plan says the node advertises: its MIG devices under the plan's strategy
    if planned_node["mig_strategy"] == "single":
        (count,) = layout["mig"].values()
        expected = {nvidia.GPU_RESOURCE: str(count)}
    else:
        expected = {mig_resource_name(p): str(n) for p, n in layout["mig"].items()}

    report = await what_if(source, "--plan", str(plan_dir))
    shown = json.dumps(report, indent=1)
    free = node(report, FREE)
    assert free["repartitioned"] and free["mig_state"] == "success"
    assert free["mig_config_after"] == planned_node["mig_config"]
    assert free["advertised_after"] == expected, shown
    assert report["blocked"] == [] and report["pending"] == []
    assert report["settled"]


async def test_the_source_cluster_is_never_written(source: Source) -> None:
    """After the snapshot and every what-if above (file order): labels, resource versions
    and GPUs of the source exactly as before the snapshot was taken."""
    assert await source_state(source.stack) == source.initial
