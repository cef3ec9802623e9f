"""A hundred GPU nodes on one machine: SimNodes whose kubegpu pods run in-process, the real
control plane with the `large` size profile, the operator in-process. The install
converges (ClusterPolicy ready, every operand pod Running on every node, every node's
exporter answering for its eight GPUs), a spec change rolls out, and every node takes a new
MIG layout at once, with the API requests counted, never timed (bench/bench_scale.py
measures). KUBEGPU_SCALE_NODES changes the number of nodes (default 100)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import httpx2 as httpx
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from kube_objects import meta, status_of
from kubegpu.catalog import nvidia
from kubegpu.cli.app import root_command
from kubegpu.kube.crds import crd_manifests
from kubegpu.kube.policy import ClusterPolicyResource
from kubegpu.operator.controller import FIELD_MANAGER, Operator, OperatorConfig
from kubegpu.operator.operands.context import EXPORTER_PORT
from kubegpu.operator.render import HASH_ANNOTATION
from kubegpu.sim.controlplane.plane import SIZE_PROFILES, ControlPlane
from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig

from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODES = int(os.environ.get("KUBEGPU_SCALE_NODES", "100"))
NAMESPACE = "gpu-operator"
WAIT_S = 300.0 + 3.0 * NODES  # generous: CI machines are shared; nothing here is timed
POLICY: dict[str, Any] = {
    "mig": {"strategy": "single"},
    "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
    "toolkit": {"repository": "nvcr.io/nvidia/k8s", "image": "container-toolkit", "version": "1"},
    "dcgm": {"enabled": False},
    "daemonsets": {"rollingUpdate": {"maxUnavailable": "100%"}},
}
# the DaemonSets whose pods carry the MIG strategy
STRATEGY_DAEMONSETS = (
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-operator-validator",
    "nvidia-device-plugin-mps-control-daemon",  # on no node here: no MPS config
)
MIG_LAYOUT = "all-1g.10gb"  # on eight H100 80GB, mig.strategy mixed (after the change):
MIG_RESOURCE = nvidia.mig_resource("1g.10gb")
MIG_INSTANCES = 8 * 7
# operands on every GPU node (the MPS control daemon runs only where MPS is configured)
EVERY_NODE = (
    *STRATEGY_DAEMONSETS[:3],
    "nvidia-mig-manager",
    "nvidia-dcgm-exporter",
    "nvidia-container-toolkit-daemonset",
    "nvidia-driver-daemonset",
)


@pytest.fixture(scope="module")
def large_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    workdir = tmp_path_factory.mktemp("scale-cp")
    cp = ControlPlane(workdir, size=SIZE_PROFILES["large"], verbosity=0)
    try:
        cp.start(timeout=180)
        yield cp
    finally:
        cp.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
async def cluster(
    large_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[AsyncClient, list[SimNode], Operator]]:
    cp = large_control_plane
    config = KubeConfig.from_file(cp.kubeconfig_path)
    client = AsyncClient(config, field_manager="kubegpu-tests")
    for crd in crd_manifests():
        await client.apply(CustomResourceDefinition.from_dict(crd), force=True)  # type: ignore[call-overload]
    await client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
    roots = tmp_path_factory.mktemp("n")  # short: unix socket paths are limited
    nodes = [
        SimNode(
            SimNodeConfig(
                name=f"scale-{i:03d}",
                root=roots / f"{i:03d}",
                gpus="h100-80gb:8",
                components="inprocess",
                root_command=root_command,
                lease_interval_s=10.0,
            ),
            cp.kubeconfig_path,
        )
        for i in range(NODES)
    ]
    op = Operator(
        AsyncClient(config, field_manager=FIELD_MANAGER), OperatorConfig(namespace=NAMESPACE)
    )
    try:
        for i in range(0, NODES, 25):
            await asyncio.gather(*(n.start() for n in nodes[i : i + 25]))
        await op.start()
        await asyncio.wait_for(op.wait_synced(), 60)
        yield client, nodes, op
    finally:
        await op.stop()
        await op.api.client.close()
        await asyncio.gather(*(n.stop() for n in nodes), return_exceptions=True)
        await client.close()
        shutil.rmtree(roots, ignore_errors=True)


async def policy_state(client: AsyncClient) -> tuple[str | None, int]:
    policy = await client.get(ClusterPolicyResource, "scale")
    status = policy.get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    observed = int(ready[0].get("observedGeneration") or 0) if ready else 0
    return status.get("state"), observed


async def not_ready_pods(client: AsyncClient) -> list[Any]:
    """What a test that waited in vain says: the operand pods not Running and ready."""
    out = []
    async for p in client.list(Pod, namespace=NAMESPACE):
        statuses = [*(p.status.initContainerStatuses or []), *(p.status.containerStatuses or [])]  # type: ignore[union-attr]
        if status_of(p).phase != "Running" or not all(
            c.ready for c in status_of(p).containerStatuses or []
        ):
            out.append((p.metadata.name, p.spec.nodeName, [(c.name, c.state) for c in statuses]))  # type: ignore[union-attr]
    return out


async def operand_daemonsets(client: AsyncClient) -> dict[str, dict[str, Any]]:
    return {
        cast(str, meta(d).name): d.to_dict()
        async for d in client.list(DaemonSet, namespace=NAMESPACE)
    }


async def all_rolled_out(client: AsyncClient) -> bool:
    """Every operand DaemonSet has an up-to-date, ready pod on every node it selects, and
    the node components' DaemonSets select every node."""
    daemonsets = await operand_daemonsets(client)
    for name, d in daemonsets.items():
        s = d.get("status") or {}
        assert s.get("observedGeneration", 0) >= d["metadata"]["generation"], (name, s)
        desired = s.get("desiredNumberScheduled")
        counts = (s.get("updatedNumberScheduled") or 0, s.get("numberReady"))
        assert counts == (desired, desired), (name, s)
    for name in EVERY_NODE:
        assert daemonsets[name]["status"]["desiredNumberScheduled"] == NODES, name
    return True


async def exporter_gpus(node: SimNode) -> set[str]:
    """The GPUs the node's exporter reports a utilisation for (scraped as Prometheus does)."""
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            reply = await http.get(f"http://{node.address}:{EXPORTER_PORT}/metrics")
    except httpx.HTTPError:
        return set()
    if reply.status_code != 200:
        return set()
    return set(re.findall(r'^DCGM_FI_DEV_GPU_UTIL\{[^}]*gpu="(\d+)"', reply.text, re.M))


@pytest.mark.timeout(3600)
async def test_many_nodes_install_roll_out_a_change_and_repartition_at_once(
    cluster: tuple[AsyncClient, list[SimNode], Operator], large_control_plane: ControlPlane
) -> None:
    client, nodes, op = cluster
    patches_before = op.api.counts["patch"]
    install_before = large_control_plane.request_counts()
    await client.create(ClusterPolicyResource(metadata=ObjectMeta(name="scale"), spec=POLICY))

    async def installed() -> bool:
        state, _ = await policy_state(client)
        assert state == "ready", await not_ready_pods(client)
        return await all_rolled_out(client)

    await eventually(installed, timeout=WAIT_S, interval=2.0)
    install = large_control_plane.request_counts() - install_before

    # every operand pod Running and ready, its kubegpu containers as tasks (no processes)
    pods = [p async for p in client.list(Pod, namespace=NAMESPACE)]
    daemonsets = await operand_daemonsets(client)
    scheduled = sum(d["status"]["desiredNumberScheduled"] for d in daemonsets.values())
    assert len(pods) == scheduled >= len(EVERY_NODE) * NODES
    for pod in pods:
        assert pod.status is not None and pod.status.phase == "Running", pod.metadata
        assert all(c.ready for c in pod.status.containerStatuses or []), pod.metadata
    assert all(not n.pids() for n in nodes)
    assert all(
        any(c.inproc is not None for r in n.runners.values() for c in r.containers) for n in nodes
    )
    rolling = [d for d in daemonsets.values() if d["spec"]["updateStrategy"]["type"] != "OnDelete"]
    assert {d["metadata"]["name"] for d in rolling} >= set(STRATEGY_DAEMONSETS)
    for d in rolling:  # the policy's daemonsets.rollingUpdate, as upstream hands it on
        assert d["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "100%", d
    # labelling: a patch per GPU node for its deploy labels, and one more once feature
    # discovery says it is MIG-capable (mig.config); sent together, not one after another.
    # The bound leaves room for a patch sent again after a timeout on a loaded machine (211
    # for 100 nodes once) and the operator's other patches (its namespace's labels): a few
    # per node, never one per event
    assert NODES <= op.api.counts["patch"] - patches_before <= 3 * NODES
    assert op.api.peak_label_patches_in_flight > 1
    # requests grow with the nodes, by a bounded amount per node: nothing polls. ConfigMap
    # volumes follow a watch (a GET only for an object the watch has not seen yet); the
    # pods' status writes and the components' own requests are a few dozen per node.
    assert install["GET", "configmaps", ""] <= len(pods), install["GET", "configmaps", ""]
    assert sum(install.values()) <= 200 * NODES, install.most_common(12)

    # Prometheus scrapes every node's exporter: each answers for its eight GPUs
    async def every_exporter_answers() -> bool:
        answered = await asyncio.gather(*(exporter_gpus(n) for n in nodes))
        assert [n.name for n, gpus in zip(nodes, answered, strict=True) if len(gpus) != 8] == []
        return True

    await eventually(every_exporter_answers, timeout=120, interval=2.0)

    # a spec change: a constant number of operator requests and DaemonSet writes
    await asyncio.sleep(2.0)  # let the install's last status writes settle
    old = {name: d["metadata"]["annotations"][HASH_ANNOTATION] for name, d in daemonsets.items()}
    operator_before = Counter(op.api.counts)
    server_before = large_control_plane.request_counts()
    await client.patch(
        ClusterPolicyResource,
        "scale",
        {"spec": {"mig": {"strategy": "mixed"}}},
        patch_type=PatchType.MERGE,
    )

    async def updated() -> bool:
        current = await operand_daemonsets(client)
        return all(
            current[n]["metadata"]["annotations"][HASH_ANNOTATION] != old[n]
            for n in STRATEGY_DAEMONSETS
        )

    await eventually(updated, timeout=120, interval=0.2)
    operator_requests = Counter(op.api.counts) - operator_before
    server_requests = large_control_plane.request_counts() - server_before
    daemonset_writes = sum(  # to the DaemonSets themselves, not their status
        n
        for (verb, kind, sub), n in server_requests.items()
        if (kind, sub) == ("daemonsets", "") and verb in {"APPLY", "PATCH", "UPDATE"}
    )
    assert operator_requests["apply"] == len(STRATEGY_DAEMONSETS)
    assert operator_requests["patch"] == 0  # no node labels for a spec change
    assert operator_requests["status"] <= 2
    # each write follows its server-side dry-run (a pass lands whole or not at all)
    assert operator_requests["dry-run"] == len(STRATEGY_DAEMONSETS)
    assert daemonset_writes == 2 * len(STRATEGY_DAEMONSETS)

    async def rolled_out() -> bool:
        state, observed = await policy_state(client)
        policy = await client.get(ClusterPolicyResource, "scale")
        generation = int(policy["metadata"]["generation"])
        return state == "ready" and observed == generation and await all_rolled_out(client)

    await eventually(rolled_out, timeout=WAIT_S, interval=2.0)
    for name in STRATEGY_DAEMONSETS:
        pod_spec = (await operand_daemonsets(client))[name]["spec"]["template"]["spec"]
        strategies = {
            e.get("value")
            for c in [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]
            for e in c.get("env") or []
            if e["name"] == "MIG_STRATEGY"
        }
        assert strategies == {"mixed"}, name

    # every node relabelled to a new MIG layout at once: each MIG manager pauses its node's
    # operands, repartitions the eight GPUs, and the device plugin advertises the instances
    names = [n.name for n in nodes]
    relabel_before = large_control_plane.request_counts()
    await asyncio.gather(
        *(
            client.patch(
                Node,
                name,
                {"metadata": {"labels": {nvidia.MIG_CONFIG: MIG_LAYOUT}}},
                patch_type=PatchType.MERGE,
            )
            for name in names
        )
    )

    async def repartitioned() -> bool:
        states: Counter[str] = Counter()
        async for node in client.list(Node):
            labels = node.metadata.labels or {}  # type: ignore[union-attr]
            allocatable = (node.status.allocatable or {}) if node.status else {}
            state = str(labels.get(nvidia.MIG_CONFIG_STATE))
            advertised = int(allocatable.get(MIG_RESOURCE, "0")) == MIG_INSTANCES
            states[state if advertised else f"{state}, instances not advertised yet"] += 1
        assert states[nvidia.MIG_STATE_SUCCESS] == NODES, states
        return True

    await eventually(repartitioned, timeout=WAIT_S, interval=2.0)
    relabel = large_control_plane.request_counts() - relabel_before
    assert sum(relabel.values()) <= 200 * NODES, relabel.most_common(12)
