"""`kubegpu doctor` on a cluster set up the way NVIDIA documents it (issue 30): the chart
installed with NVIDIA's own values file unchanged (tests/data/nvidia/gpu-operator-values.yaml:
`mig.strategy: single`, no device-plugin config), NVIDIA's time-slicing and MPS examples
(tests/data/nvidia/sharing-configs.yaml: time-slicing the default, as NVIDIA's docs patch
the ClusterPolicy; MPS by a node label, without `flags.mpsRoot`, which the DaemonSet's
MPS_ROOT supplies), and `all-1g.18gb` from the default mig-parted config the chart ships
(its MIG devices time-sliced too, under `single`). Every component runs what it was given, so the doctor
must find nothing: a finding here is a false alarm (the MPS example used to be reported
`plugin-config-invalid` on every MPS node).

This module installs its own release (the package's shared one is uninstalled first).
tests/integration/test_doctor.py breaks a cluster on purpose, one pitfall at a time; the
unit tests of each false alarm are in tests/unit/test_doctor_checks.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_asyncio
import yaml
from lightkube.resources.core_v1 import ConfigMap
from typer.testing import CliRunner

from kubegpu.catalog import nvidia
from kubegpu.cli.app import app
from kubegpu.doctor.capture import capture
from kubegpu.doctor.checks import run_checks
from kubegpu.doctor.facts import plugin_config_of
from kubegpu.kube.labels import labels_of
from kubegpu.sim.cluster import NodeEntry
from kubegpu.sim.controlplane.plane import ControlPlane

from . import conftest
from .stack import NAMESPACE, E2EStack, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="package")]

DATA = Path(__file__).parents[1] / "data" / "nvidia"
MIG_NODE, TS_NODE, MPS_NODE = "nv-h200", "nv-l4", "nv-rtx"
NODES = [
    NodeEntry(name=MIG_NODE, gpus="h200-nvl:4"),
    NodeEntry(name=TS_NODE, gpus="l4:4"),
    NodeEntry(name=MPS_NODE, gpus="rtx-pro-6000-ws:2;display=compute"),
    NodeEntry(name="nv-cpu", labels={"node-role.kubernetes.io/control-plane": ""}),
]
# what each node advertises once configured, every config's replicas under nvidia.com/gpu
# (no rename): the time-slicing default on the H200's 4 x 7 1g.18gb MIG devices (`single`
# advertises them as nvidia.com/gpu) and the 4 L4s, 4 replicas each; MPS, 10 replicas of
# each of the 2 RTX cards
ADVERTISED = {
    MIG_NODE: {nvidia.GPU_RESOURCE: str(4 * 7 * 4)},
    TS_NODE: {nvidia.GPU_RESOURCE: str(4 * 4)},
    MPS_NODE: {nvidia.GPU_RESOURCE: str(2 * 10)},
}


def nvidia_values() -> dict[str, Any]:
    values = yaml.safe_load((DATA / "gpu-operator-values.yaml").read_text())
    assert isinstance(values, dict)
    return values


def sharing_configs() -> ConfigMap:
    doc = yaml.safe_load((DATA / "sharing-configs.yaml").read_text())
    body = {**doc, "metadata": {**doc["metadata"], "namespace": NAMESPACE}}
    return cast(ConfigMap, ConfigMap.from_dict(body))


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def documented(control_plane: ControlPlane) -> AsyncIterator[E2EStack]:
    async with conftest.own_stack(control_plane, NODES, "nvidia-configs", nvidia_values()) as stack:
        yield stack


async def gpu_resources(stack: E2EStack, node: str) -> dict[str, str]:
    alloc = await stack.allocatable(node)
    return {k: v for k, v in alloc.items() if k.startswith(nvidia.PREFIX)}


async def configured(stack: E2EStack) -> bool:
    for node, want in ADVERTISED.items():
        if await gpu_resources(stack, node) != want:
            return False
    labels = labels_of(await stack.node(MIG_NODE))
    return labels.get(nvidia.MIG_CONFIG_STATE) == nvidia.MIG_STATE_SUCCESS and await stack.ready()


async def test_the_doctor_is_clean_on_nvidias_values_and_documented_configs(
    documented: E2EStack,
) -> None:
    stack = documented
    await wait_for(stack.ready, timeout=300, what="ClusterPolicy ready with NVIDIA's values")
    await stack.client.create(sharing_configs())
    # NVIDIA's documented patch: the ConfigMap, `any` the default; the MPS node by its label
    await stack.patch_policy(
        {"devicePlugin": {"config": {"name": "sharing-configs", "default": "any"}}}
    )
    await stack.label(MPS_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "mps"})
    await stack.label(MIG_NODE, {nvidia.MIG_CONFIG: "all-1g.18gb"})
    await wait_for(lambda: configured(stack), timeout=420, what="every node configured")

    snap = await capture(stack.client, namespace=NAMESPACE, source="sim")
    # the doctor reads the MPS example as the plugin runs it: with the DaemonSet's MPS_ROOT
    mps = plugin_config_of(snap, next(n for n in snap.nodes if n.name == MPS_NODE))
    assert mps.name == "mps" and mps.config is not None, mps
    assert mps.config.flags.mps_root == "/run/nvidia/mps"
    findings = run_checks(snap)
    assert findings == [], "\n".join(f"{f.check} {f.object}: {f.summary}" for f in findings)

    # and the command a user runs says the same (in a thread: it runs its own event loop)
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["doctor", "--kubeconfig", str(stack.kubeconfig), "-n", NAMESPACE]
    )
    assert result.exit_code == 0, result.output
