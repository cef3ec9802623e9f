"""The user's path: `helm install` kubegpu on a simulated cluster and drive it through its
ClusterPolicy and node labels. Kubernetes is the real control plane; the kubelet and GPUs
are simulated; the operator runs as the chart's Deployment.

The tests share one installation and run in file order.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment

from kube_objects import meta, status_of
from kubegpu.kube.policy import ClusterPolicyResource, GPUClusterResource

from .stack import CPU_NODE, MIG_NODE, NAMESPACE, PLAIN_NODE, POLICY, E2EStack, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="package")]

GPU_NODES = {MIG_NODE, PLAIN_NODE}
HASH = "nvidia.com/last-applied-hash"


async def test_helm_install_brings_the_stack_up_on_the_gpu_nodes_only(gpu_stack: E2EStack) -> None:
    await wait_for(gpu_stack.ready, timeout=240, what="ClusterPolicy ready")
    assert (await gpu_stack.condition("Ready"))["reason"] == "Reconciled"
    assert (await gpu_stack.policy())["status"]["namespace"] == NAMESPACE

    daemonsets = await gpu_stack.daemonsets()
    assert set(daemonsets) == {
        "nvidia-driver-daemonset",
        "nvidia-container-toolkit-daemonset",
        "nvidia-operator-validator",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-mps-control-daemon",
        "nvidia-dcgm-exporter",
        "gpu-feature-discovery",
        "nvidia-mig-manager",
    }
    pods = await gpu_stack.operand_pods()
    placement = Counter(
        (cast(dict[str, str], meta(p).labels)["app"], cast(PodSpec, p.spec).nodeName) for p in pods
    )
    for app in (
        "nvidia-driver-daemonset",
        "nvidia-container-toolkit-daemonset",
        "nvidia-operator-validator",
        "nvidia-device-plugin-daemonset",
        "nvidia-dcgm-exporter",
        "gpu-feature-discovery",
    ):
        assert {n for (a, n) in placement if a == app} == GPU_NODES, app
    # MIG manager only where MIG is possible; no operand at all on the CPU node
    assert {n for (a, n) in placement if a == "nvidia-mig-manager"} == {MIG_NODE}
    assert all(cast(PodSpec, p.spec).nodeName != CPU_NODE for p in pods)
    assert all(status_of(p).phase == "Running" for p in pods)

    labels = cast(dict[str, str], meta(await gpu_stack.node(MIG_NODE)).labels)
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.deploy.mig-manager"] == "true"
    assert labels["nvidia.com/mig.config"] == "all-disabled"
    assert labels["nvidia.com/mig.capable"] == "true"  # written by feature discovery
    cpu_labels = cast(dict[str, str], meta(await gpu_stack.node(CPU_NODE)).labels)
    assert not [k for k in cpu_labels if k.startswith("nvidia.com/")]
    # the validator wrote its ready files on each GPU node, the plugin advertises GPUs
    for name in GPU_NODES:
        files = gpu_stack.nodes[name].root / "run/nvidia/validations"
        assert {"driver-ready", "toolkit-ready", "cuda-ready", "plugin-ready"} <= {
            p.name for p in files.iterdir()
        }
        assert int((await gpu_stack.allocatable(name))["nvidia.com/gpu"]) == 1


async def test_relabelling_for_mig_then_switching_strategy_re_advertises(
    gpu_stack: E2EStack,
) -> None:
    await gpu_stack.label(MIG_NODE, {"nvidia.com/mig.config": "all-1g.10gb"})

    async def sliced() -> bool:
        labels = cast(dict[str, str], meta(await gpu_stack.node(MIG_NODE)).labels)
        return (
            labels.get("nvidia.com/mig.config.state") == "success"
            and (await gpu_stack.allocatable(MIG_NODE)).get("nvidia.com/gpu") == "7"
        )

    await wait_for(sliced, timeout=240, what="7 MIG slices advertised as nvidia.com/gpu (single)")
    await wait_for(gpu_stack.ready, timeout=120, what="ready after the MIG change")
    before = await gpu_stack.daemonsets()

    await gpu_stack.patch_policy({"mig": {"strategy": "mixed"}})

    async def mixed() -> bool:
        allocatable = await gpu_stack.allocatable(MIG_NODE)
        return (
            allocatable.get("nvidia.com/mig-1g.10gb") == "7" and "nvidia.com/gpu" not in allocatable
        )

    await wait_for(mixed, timeout=180, what="nvidia.com/mig-1g.10gb=7 under the mixed strategy")
    await wait_for(gpu_stack.ready, timeout=180, what="ready after the strategy change")
    after = await gpu_stack.daemonsets()

    def changed(name: str) -> bool:
        return bool(
            before[name]["metadata"]["annotations"][HASH]
            != after[name]["metadata"]["annotations"][HASH]
        )

    # only the DaemonSets that carry the strategy rolled
    assert {n for n in before if changed(n)} == {
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-mps-control-daemon",
        "gpu-feature-discovery",
        "nvidia-operator-validator",
    }
    for name in ("nvidia-driver-daemonset", "nvidia-dcgm-exporter", "nvidia-mig-manager"):
        assert before[name]["metadata"]["generation"] == after[name]["metadata"]["generation"], name
    env = {
        e["name"]: e.get("value")
        for e in after["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]["containers"][
            0
        ]["env"]
    }
    assert env["MIG_STRATEGY"] == "mixed"
    # the plain GPU node still offers its whole GPU
    assert (await gpu_stack.allocatable(PLAIN_NODE))["nvidia.com/gpu"] == "1"


async def test_disabling_the_driver_removes_its_daemonset(gpu_stack: E2EStack) -> None:
    await gpu_stack.patch_policy({"driver": {"enabled": False}})

    async def gone() -> bool:
        return "nvidia-driver-daemonset" not in await gpu_stack.daemonsets()

    await wait_for(gone, timeout=60, what="driver DaemonSet deleted")
    await wait_for(gpu_stack.ready, timeout=180, what="ready without the driver")
    assert not await gpu_stack.pods(app="nvidia-driver-daemonset") or await wait_for(
        lambda: _no_pods(gpu_stack, "nvidia-driver-daemonset"), timeout=60
    )


async def _no_pods(stack: E2EStack, app: str) -> bool:
    return not await stack.pods(app=app)


async def test_a_node_labelled_operands_false_loses_its_operands(gpu_stack: E2EStack) -> None:
    await gpu_stack.label(PLAIN_NODE, {"nvidia.com/gpu.deploy.operands": "false"})

    async def emptied() -> bool:
        labels = cast(dict[str, str], meta(await gpu_stack.node(PLAIN_NODE)).labels)
        pods = [
            p
            for p in await gpu_stack.operand_pods()
            if cast(PodSpec, p.spec).nodeName == PLAIN_NODE
        ]
        return not pods and not [
            k
            for k in labels
            if k.startswith("nvidia.com/gpu.deploy.") and k != "nvidia.com/gpu.deploy.operands"
        ]

    await wait_for(emptied, timeout=120, what="no operand left on the node")
    assert any(cast(PodSpec, p.spec).nodeName == MIG_NODE for p in await gpu_stack.operand_pods())

    # taking the label away brings them back
    await gpu_stack.label(PLAIN_NODE, {"nvidia.com/gpu.deploy.operands": None})

    async def back() -> bool:
        pods = [
            p
            for p in await gpu_stack.operand_pods()
            if cast(PodSpec, p.spec).nodeName == PLAIN_NODE
        ]
        return any(
            cast(dict[str, str], meta(p).labels)["app"] == "nvidia-device-plugin-daemonset"
            for p in pods
        )

    await wait_for(back, timeout=120, what="operands back on the node")
    await wait_for(gpu_stack.ready, timeout=240, what="ready again")


async def test_a_second_cluster_policy_is_ignored(gpu_stack: E2EStack) -> None:
    await gpu_stack.client.create(
        ClusterPolicyResource(
            metadata=ObjectMeta(name="late-policy"), spec={"mig": {"strategy": "none"}}
        )
    )
    try:

        async def ignored() -> bool:
            return await gpu_stack.policy_state("late-policy") == "ignored"

        await wait_for(ignored, timeout=60, what="second ClusterPolicy ignored")
        reason = await gpu_stack.condition("Ready", "late-policy")
        assert reason["reason"] == "Ignored"
        assert "'cluster-policy' is active" in reason["message"]
        assert await gpu_stack.policy_state() == "ready"
        env = (await gpu_stack.daemonsets())["nvidia-device-plugin-daemonset"]["spec"]["template"][
            "spec"
        ]["containers"][0]["env"]
        assert {"name": "MIG_STRATEGY", "value": "mixed"} in env  # still the first policy's
    finally:
        await gpu_stack.client.delete(ClusterPolicyResource, "late-policy")


async def test_a_gpu_cluster_next_to_a_cluster_policy_is_refused(gpu_stack: E2EStack) -> None:
    await gpu_stack.client.create(GPUClusterResource(metadata=ObjectMeta(name="dra"), spec={}))
    try:

        async def refused() -> dict[str, Any] | None:
            error = await gpu_stack.condition("Error")
            return error if error.get("reason") == "GPUClusterConflict" else None

        error = await wait_for(refused, timeout=60, what="GPUClusterConflict condition")
        assert error["status"] == "True"
        assert (
            "a cluster is configured by a ClusterPolicy or by a GPUCluster, never both"
            in error["message"]
        )
        assert await gpu_stack.policy_state() == "notReady"
        # nothing was torn down meanwhile
        assert "nvidia-device-plugin-daemonset" in await gpu_stack.daemonsets()
    finally:
        await gpu_stack.client.delete(GPUClusterResource, "dra")
    await wait_for(gpu_stack.ready, timeout=120, what="ready once the GPUCluster is gone")


async def test_a_newer_gpu_cluster_is_ignored_and_told_which_policy_is_active(
    gpu_stack: E2EStack,
) -> None:
    await gpu_stack.client.create(
        GPUClusterResource(metadata=ObjectMeta(name="gpu-cluster"), spec={})
    )
    try:

        async def told() -> dict[str, Any] | None:
            obj = dict(await gpu_stack.client.get(GPUClusterResource, "gpu-cluster"))
            status = obj.get("status") or {}
            return status if status.get("state") == "ignored" else None

        status = await wait_for(told, timeout=60, what="GPUCluster ignored")
        error = next(c for c in status["conditions"] if c["type"] == "Error")
        assert error["status"] == "True" and error["reason"] == "ClusterPolicyConflict"
        assert "ClusterPolicy cluster-policy is older and active" in error["message"]
        policy_error = await gpu_stack.condition("Error")
        assert policy_error["reason"] == "GPUClusterConflict"
        daemonsets = await gpu_stack.daemonsets()
        assert "nvidia-device-plugin-daemonset" in daemonsets  # the older one keeps its stack
        assert "nvidia-dra-driver-gpu-kubelet-plugin" not in daemonsets
    finally:
        await gpu_stack.client.delete(GPUClusterResource, "gpu-cluster")
    await wait_for(gpu_stack.ready, timeout=120, what="ready once the GPUCluster is gone")


async def test_the_operator_restarted_mid_reconcile_converges_without_duplicates(
    gpu_stack: E2EStack,
) -> None:
    (old,) = await gpu_stack.pods(**{"app.kubernetes.io/name": "kubegpu-operator"})
    await gpu_stack.patch_policy({"gfd": {"env": [{"name": "GFD_SLEEP_INTERVAL", "value": "30s"}]}})
    await gpu_stack.client.delete(
        type(old), cast(str, meta(old).name), namespace=NAMESPACE, grace_period=0
    )

    async def replaced() -> bool:
        pods = await gpu_stack.pods(**{"app.kubernetes.io/name": "kubegpu-operator"})
        return any(meta(p).uid != meta(old).uid and status_of(p).phase == "Running" for p in pods)

    await wait_for(replaced, timeout=120, what="a new operator pod")

    async def rolled() -> bool:
        ds = (await gpu_stack.daemonsets())["gpu-feature-discovery"]
        env = ds["spec"]["template"]["spec"]["containers"][0]["env"]
        return {"name": "GFD_SLEEP_INTERVAL", "value": "30s"} in env and await gpu_stack.ready()

    await wait_for(rolled, timeout=240, what="the change applied and ready")
    deployment = await gpu_stack.client.get(Deployment, "kubegpu-operator", namespace=NAMESPACE)
    assert deployment.spec.replicas == 1
    # one object per name and kind: exactly the expected operand DaemonSets
    assert sorted(await gpu_stack.daemonsets()) == sorted(
        [
            "nvidia-container-toolkit-daemonset",
            "nvidia-operator-validator",
            "nvidia-device-plugin-daemonset",
            "nvidia-device-plugin-mps-control-daemon",
            "nvidia-dcgm-exporter",
            "gpu-feature-discovery",
            "nvidia-mig-manager",
        ]
    )
    # the new operator found everything in place: at most the one changed DaemonSet applied
    metrics = await wait_for(gpu_stack.operator_metrics, timeout=30, what="operator metrics")
    assert metrics.get('kubegpu_operator_api_requests_total{verb="apply"}', 0) <= 1
    assert metrics.get('kubegpu_operator_api_requests_total{verb="delete"}', 0) == 0


async def test_deleting_the_cluster_policy_removes_the_operands(gpu_stack: E2EStack) -> None:
    await gpu_stack.client.delete(ClusterPolicyResource, POLICY)

    async def cleaned() -> bool:
        return not await gpu_stack.daemonsets() and not await gpu_stack.operand_pods()

    await wait_for(cleaned, timeout=120, what="operands garbage-collected")
    with pytest.raises(ApiError):
        await gpu_stack.policy()
