"""The seeds' walkthrough on the simulated cluster, steps run back to back as a user pastes
them: NVIDIA's chart values, MIG changes with strategy patches right after, the MIG
ConfigMap switched while the node is labelled. No ordering may wedge a node or report a
`failed` that is only a config being switched (issue 17).

This module installs its own release (the package's shared one is uninstalled first).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Pod

from kube_objects import meta
from kubegpu.kube.labels import labels_of
from kubegpu.kube.nodes import watch_node
from kubegpu.sim.cluster import NodeEntry
from kubegpu.sim.controlplane.binaries import find_bin_dir
from kubegpu.sim.controlplane.plane import ControlPlane

from . import conftest
from .stack import NAMESPACE, E2EStack, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="package")]

MIG_NODE = "walk-h200"
PLAIN_NODE = "walk-l4"
NODES = [
    NodeEntry(name=MIG_NODE, gpus="h200-nvl:4"),
    NodeEntry(name=PLAIN_NODE, gpus="l4:1"),
    NodeEntry(name="walk-cpu", labels={"node-role.kubernetes.io/control-plane": ""}),
]
EXAMPLES = Path(__file__).parents[2] / "examples/mig-configs"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def walk(control_plane: ControlPlane) -> AsyncIterator[E2EStack]:
    # NVIDIA's exporter listen address (:9400) on every GPU node: each simulated node has
    # its own address, so they do not collide
    async with conftest.own_stack(
        control_plane, NODES, "walkthrough", {"dcgmExporter": {"env": []}}
    ) as stack:
        yield stack


class States:
    """Every value the node's MIG state label takes, from a watch."""

    def __init__(self, stack: E2EStack, node: str) -> None:
        self.seen: list[str] = []
        self._task = asyncio.create_task(self._run(stack, node))

    async def _run(self, stack: E2EStack, node: str) -> None:
        async for n in watch_node(stack.client, node):
            state = labels_of(n).get(MIG_STATE, "") if n is not None else ""
            if state and (not self.seen or self.seen[-1] != state):
                self.seen.append(state)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def gpu_resources(stack: E2EStack, node: str) -> dict[str, str]:
    return {k: v for k, v in (await stack.allocatable(node)).items() if k.startswith("nvidia.com/")}


async def settled_on(stack: E2EStack, node: str, config: str, want: dict[str, str]) -> bool:
    labels = meta(await stack.node(node)).labels or {}
    return (
        labels.get(MIG_CONFIG) == config
        and labels.get(MIG_STATE) == "success"
        and await gpu_resources(stack, node) == want
        and await stack.ready()
    )


async def test_the_stack_comes_up_with_nvidias_default_values(walk: E2EStack) -> None:
    await wait_for(walk.ready, timeout=300, what="ClusterPolicy ready")
    assert await gpu_resources(walk, MIG_NODE) == {"nvidia.com/gpu": "4"}


async def test_each_nodes_exporter_serves_on_nvidias_port_at_its_node_address(
    walk: E2EStack,
) -> None:
    for name in (MIG_NODE, PLAIN_NODE):
        (pod,) = [
            p
            for p in await walk.pods(app="nvidia-dcgm-exporter")
            if p.spec is not None and p.spec.nodeName == name
        ]
        assert pod.status is not None
        assert [c.restartCount for c in pod.status.containerStatuses or []] == [0]
        address = walk.nodes[name].address
        assert pod.status.hostIP == address
        body = await asyncio.to_thread(_get, f"http://{address}:9400/metrics")
        assert "DCGM_FI_DEV_GPU_TEMP" in body


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
        return text


async def test_a_mig_change_that_removes_devices_with_a_strategy_patch_right_after(
    walk: E2EStack,
) -> None:
    """The device plugin's CDI spec still names the removed MIG devices when the rolled
    validator checks the toolkit; the plugin, its only writer, waits for that check."""
    await walk.label(MIG_NODE, {MIG_CONFIG: "all-1g.18gb"})
    await wait_for(
        lambda: settled_on(walk, MIG_NODE, "all-1g.18gb", {"nvidia.com/gpu": "28"}),
        timeout=300,
        what="28 MIG slices under the single strategy",
    )
    # back to whole GPUs and, at once, the mixed strategy
    await walk.label(MIG_NODE, {MIG_CONFIG: "all-disabled"})
    await walk.patch_policy({"mig": {"strategy": "mixed"}})
    await wait_for(
        lambda: settled_on(walk, MIG_NODE, "all-disabled", {"nvidia.com/gpu": "4"}),
        timeout=300,
        what="whole GPUs advertised again and the ClusterPolicy ready (no wedge)",
    )
    # and the other way round: slices, then the strategy patch, back to back
    await walk.label(MIG_NODE, {MIG_CONFIG: "all-1g.18gb"})
    await walk.patch_policy({"mig": {"strategy": "single"}})
    await wait_for(
        lambda: settled_on(walk, MIG_NODE, "all-1g.18gb", {"nvidia.com/gpu": "28"}),
        timeout=300,
        what="slices under single after the back-to-back change",
    )
    assert await gpu_resources(walk, PLAIN_NODE) == {"nvidia.com/gpu": "1"}


async def test_switching_the_mig_configmap_and_labelling_at_once_never_fails(
    walk: E2EStack,
) -> None:
    await walk.client.create(  # type: ignore[call-overload]
        ConfigMap(
            metadata=ObjectMeta(name="custom-mig-config"),
            data={"config.yaml": (EXAMPLES / "inference-mix.yaml").read_text()},
        ),
        namespace=NAMESPACE,
    )
    states = States(walk, MIG_NODE)
    try:
        await walk.patch_policy(
            {"mig": {"strategy": "mixed"}, "migManager": {"config": {"name": "custom-mig-config"}}}
        )
        await walk.label(MIG_NODE, {MIG_CONFIG: "inference-mix"})
        want = {
            "nvidia.com/gpu": "3",
            "nvidia.com/mig-1g.18gb": "2",
            "nvidia.com/mig-2g.35gb": "1",
            "nvidia.com/mig-3g.71gb": "1",
        }
        await wait_for(
            lambda: settled_on(walk, MIG_NODE, "inference-mix", want),
            timeout=300,
            what="inference-mix applied from the new ConfigMap",
        )
    finally:
        await states.stop()
    assert "failed" not in states.seen, states.seen


async def test_the_smoke_test_pods_complete_and_their_logs_name_their_gpu(walk: E2EStack) -> None:
    """The guide's smoke tests: `nvidia-smi` in a CUDA image and NVIDIA's vectorAdd sample,
    each with one GPU; both complete, and `kubectl logs` shows what they ran on."""
    plain = walk.nodes[PLAIN_NODE].nvml
    assert plain is not None
    (l4,) = plain.devices()
    smoke: dict[str, dict[str, Any]] = {
        "nvidia-smi": {
            "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
            "command": ["nvidia-smi"],
            "node": PLAIN_NODE,
        },
        "cuda-vectoradd": {
            "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
            "node": PLAIN_NODE,
        },
    }

    async def completed(name: str) -> bool:
        pod = await walk.client.get(Pod, name, namespace="default")
        return bool(pod.status and pod.status.phase == "Succeeded")

    # one after the other, as the guide runs them: the node has one GPU, and a pod that
    # waits for it is retried by the scheduler on its own clock, not when the first ends
    for name, how in smoke.items():
        container: dict[str, object] = {
            "name": name,
            "image": how["image"],
            "resources": {"limits": {"nvidia.com/gpu": 1}},
        }
        if "command" in how:
            container["command"] = how["command"]
        await walk.client.create(  # type: ignore[call-overload]
            Pod.from_dict(
                {
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {
                        "restartPolicy": "OnFailure",
                        "nodeSelector": {"kubernetes.io/hostname": how["node"]},
                        "containers": [container],
                    },
                }
            )
        )
        await wait_for(lambda n=name: completed(n), timeout=120, what=f"{name} Succeeded")
    table = "".join([line async for line in walk.client.log("nvidia-smi", namespace="default")])
    assert l4.name in table and "Driver Version:" in table
    vector = "".join(
        [line async for line in walk.client.log("cuda-vectoradd", namespace="default")]
    )
    assert "Test PASSED" in vector and l4.uuid in vector
    kubectl = find_bin_dir() / "kubectl"
    if kubectl.exists():  # the kubectl the repo builds, as a user runs it
        result = await asyncio.to_thread(
            subprocess.run,
            [str(kubectl), "--kubeconfig", str(walk.kubeconfig), "logs", "cuda-vectoradd"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert "Test PASSED" in result.stdout
    for name in smoke:
        await walk.client.delete(Pod, name, namespace="default")
