"""The seeds' walkthrough typed as a user types it (issue 17): the `kubectl` and `helm` the repo
builds, run from the checkout with the simulated cluster's KUBECONFIG, NVIDIA's chart values
file unchanged, MIG (all-1g.18gb, then the `inference-mix` ConfigMap with the strategy
patched right after), time-slicing and MPS from one device-plugin ConfigMap chosen by node
labels, and the smoke test with its `kubectl logs`. The steps run back to back; the only
pauses are the `kubectl wait`s a user runs. README's first steps are these commands.

The nodes come from examples/walkthrough/cluster.yaml; everything after them goes through
the command line. This module installs its own release (the package's shared one is
uninstalled first).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from kubegpu.sim.cluster import load_cluster
from kubegpu.sim.controlplane.binaries import find_bin_dir
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.stack import Stack, find_chart

from . import conftest

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="package")]

REPO = Path(__file__).parents[2]
CLUSTER = REPO / "examples/walkthrough/cluster.yaml"
STEP_TIMEOUT_S = 330  # above the longest `kubectl wait --timeout` below

# -- the walkthrough, section by section, as typed ---------------------------------------------
INSTALL = [
    "kubectl get nodes",
    "helm install --wait gpu-operator deploy/helm/kubegpu -n gpu-operator --create-namespace"
    " -f tests/data/nvidia/gpu-operator-values.yaml",
    "kubectl wait clusterpolicy/cluster-policy --for=jsonpath='{.status.state}'=ready --timeout=5m",
    "kubectl get pods -n gpu-operator -o wide",
]
MIG = [
    # every GPU cut into 1g.18gb slices, advertised as nvidia.com/gpu (strategy single)
    "kubectl label node gpu-h200 nvidia.com/mig.config=all-1g.18gb --overwrite",
    "kubectl wait node/gpu-h200 --for=jsonpath='{.status.allocatable.nvidia\\.com/gpu}'=28"
    " --timeout=5m",
    # a custom layout from a ConfigMap, and the mixed strategy right after the label: the
    # slices are removed while the strategy changes
    "kubectl create configmap custom-mig-config -n gpu-operator"
    " --from-file=config.yaml=examples/mig-configs/inference-mix.yaml",
    "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=json"
    ' -p=\'[{"op": "replace", "path": "/spec/migManager/config/name",'
    ' "value": "custom-mig-config"}]\'',
    "kubectl label node gpu-h200 nvidia.com/mig.config=inference-mix --overwrite",
    "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=json"
    ' -p=\'[{"op": "replace", "path": "/spec/mig/strategy", "value": "mixed"}]\'',
    "kubectl wait node/gpu-h200"
    " --for=jsonpath='{.status.allocatable.nvidia\\.com/mig-3g\\.71gb}'=1 --timeout=5m",
    "kubectl wait node/gpu-h200"
    " --for=jsonpath='{.metadata.labels.nvidia\\.com/mig\\.config\\.state}'=success"
    " --timeout=5m",
]
SHARING = [
    "kubectl create -n gpu-operator -f examples/walkthrough/device-plugin-config.yaml",
    "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=json -p='["
    '{"op": "add", "path": "/spec/devicePlugin/config",'
    ' "value": {"name": "device-plugin-config", "default": "mig-mixed"}},'
    ' {"op": "remove", "path": "/spec/mig/strategy"}]\'',
    "kubectl label node gpu-l4 nvidia.com/device-plugin.config=time-sliced --overwrite",
    "kubectl label node gpu-rtx nvidia.com/device-plugin.config=mps --overwrite",
    "kubectl wait node/gpu-l4"
    " --for=jsonpath='{.status.allocatable.nvidia\\.com/gpu\\.shared}'=16 --timeout=5m",
    "kubectl wait node/gpu-rtx"
    " --for=jsonpath='{.status.allocatable.nvidia\\.com/gpu\\.shared}'=8 --timeout=5m",
]
SMOKE = [
    "kubectl apply -f examples/walkthrough/smoke-test.yaml",
    "kubectl wait pod/nvidia-smi-mig pod/nvidia-smi-shared"
    " --for=jsonpath='{.status.phase}'=Succeeded --timeout=3m",
]
SETTLED = [
    "kubectl wait nodes --all --for=condition=Ready --timeout=1m",
    "kubectl wait clusterpolicy/cluster-policy --for=jsonpath='{.status.state}'=ready --timeout=5m",
    "kubectl get nodes -o custom-columns='NODE:.metadata.name"
    ",GPU:.status.allocatable.nvidia\\.com/gpu"
    ",SHARED:.status.allocatable.nvidia\\.com/gpu\\.shared"
    ",1G.18GB:.status.allocatable.nvidia\\.com/mig-1g\\.18gb"
    ",2G.35GB:.status.allocatable.nvidia\\.com/mig-2g\\.35gb"
    ",3G.71GB:.status.allocatable.nvidia\\.com/mig-3g\\.71gb'",
]

# right after the install: every GPU whole (examples/walkthrough/cluster.yaml's counts)
INSTALLED = {
    "gpu-h200": {"nvidia.com/gpu": "4"},
    "gpu-l4": {"nvidia.com/gpu": "4"},
    "gpu-rtx": {"nvidia.com/gpu": "2"},
}
# what each node advertises at the end: inference-mix under the mixed strategy (GPU 0 in
# three sizes of slice, GPUs 1-3 whole), 4 time-sliced replicas of each of the 4 L4s,
# 4 MPS replicas of each of the 2 RTX cards
ADVERTISED = {
    "gpu-h200": {
        "nvidia.com/gpu": "3",
        "nvidia.com/mig-1g.18gb": "2",
        "nvidia.com/mig-2g.35gb": "1",
        "nvidia.com/mig-3g.71gb": "1",
    },
    "gpu-l4": {"nvidia.com/gpu.shared": "16"},
    "gpu-rtx": {"nvidia.com/gpu.shared": "8"},
}
SHARING_LABELS = {
    "gpu-h200": {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config.state": "success"},
    "gpu-l4": {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
    "gpu-rtx": {
        "nvidia.com/gpu.sharing-strategy": "mps",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/mps.capable": "true",
    },
}


@dataclass
class Shell:
    """A user's shell in the checkout: KUBECONFIG exported and the built binaries first on
    PATH, as `kubegpu sim up` prints."""

    env: dict[str, str] = field(repr=False)
    transcript: list[str] = field(repr=False)

    async def run(self, command: str) -> str:
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=REPO, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(process.communicate(), STEP_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"$ {command}\nstill running after {STEP_TIMEOUT_S}s") from None
        stdout, stderr = out.decode(), err.decode()
        self.transcript.append(f"$ {command}\n{stdout}{stderr}")
        print(self.transcript[-1])  # shown with -s: the README's excerpts
        assert process.returncode == 0, f"$ {command}\nexit {process.returncode}\n{stderr}"
        return stdout

    async def run_all(self, commands: list[str]) -> None:
        for command in commands:
            await self.run(command)

    async def watch(self, command: str) -> Watch:
        """A `kubectl ... --watch` running in the background."""
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", f"exec {command}", cwd=REPO, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        return Watch(process, asyncio.create_task(_lines(process)))


async def _lines(process: asyncio.subprocess.Process) -> list[str]:
    assert process.stdout is not None
    return [line.decode().strip() async for line in process.stdout]


@dataclass
class Watch:
    process: asyncio.subprocess.Process
    reader: asyncio.Task[list[str]]

    async def stop(self) -> list[str]:
        """What the watch printed, one line per change."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        await self.process.wait()
        return await self.reader


@dataclass
class Walk:
    stack: Stack  # the simulated nodes (nothing installed by it)
    shell: Shell


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def walk(control_plane: ControlPlane) -> AsyncIterator[Walk]:
    await conftest.retire_shared_stack()
    workdir = Path(tempfile.mkdtemp(prefix="kg-seeds-", dir="/tmp"))
    stack = Stack(
        control_plane,
        load_cluster(CLUSTER).nodes,
        workdir,
        chart=find_chart(),
        field_manager="kubegpu-seeds-walkthrough",
        lease_interval_s=5.0,
    )
    env = dict(os.environ)
    env["KUBECONFIG"] = str(control_plane.kubeconfig_path)
    env["PATH"] = f"{find_bin_dir()}:{env.get('PATH', '')}"
    shell = Shell(env, [])
    try:
        await stack.start_nodes()
        yield Walk(stack, shell)
    finally:
        for cleanup in (
            "kubectl delete -f examples/walkthrough/smoke-test.yaml --ignore-not-found",
            "helm uninstall gpu-operator -n gpu-operator --wait --timeout 60s",
        ):
            with contextlib.suppress(AssertionError):
                await shell.run(cleanup)
        await stack.down()
        shutil.rmtree(workdir, ignore_errors=True)


async def test_the_seeds_walkthrough_command_by_command(walk: Walk) -> None:
    shell = walk.shell
    await shell.run_all(INSTALL)
    # a ready ClusterPolicy means the GPUs can be asked for (not "ready, no GPU node yet")
    assert await advertised(shell) == INSTALLED

    states = await shell.watch(
        "kubectl get node gpu-h200 --watch"
        " -o jsonpath='{.metadata.labels.nvidia\\.com/mig\\.config\\.state}{\"\\n\"}'"
    )
    try:
        await shell.run_all(MIG)
    finally:
        seen = await states.stop()
    # a script that trusts `failed` must never see one on the way (the ConfigMap switch)
    assert "pending" in seen and "failed" not in seen, seen

    await shell.run_all(SHARING)
    await shell.run_all(SMOKE)
    await shell.run_all(SETTLED)

    assert await advertised(shell) == ADVERTISED
    nodes = json.loads(await shell.run("kubectl get nodes -o json"))["items"]
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    for node, want in SHARING_LABELS.items():
        assert {k: labels[node].get(k) for k in want} == want, node

    # the smoke test: each pod's `nvidia-smi` names the simulated GPU it was given
    mig = await shell.run("kubectl logs nvidia-smi-mig")
    h200 = walk.stack.nodes["gpu-h200"].nvml
    assert h200 is not None
    assert any(f"{d.name} (UUID: {d.uuid})" in mig for d in h200.devices()), mig
    assert "MIG 1g.18gb" in mig, mig
    shared = await shell.run("kubectl logs nvidia-smi-shared")
    node = await shell.run("kubectl get pod nvidia-smi-shared -o jsonpath='{.spec.nodeName}'")
    gpus = walk.stack.nodes[node].nvml
    assert gpus is not None
    # one row, the GPU its replica belongs to (nvidia-smi shortens long product names)
    rows = [d for d in gpus.devices() if d.pci_bus_id in shared]
    assert len(rows) == 1 and rows[0].name[:20] in shared, shared
    assert "Driver Version:" in shared, shared


async def advertised(shell: Shell) -> dict[str, dict[str, str]]:
    """The nvidia.com/ resources each node offers, as `kubectl get nodes` shows them."""
    nodes = json.loads(await shell.run("kubectl get nodes -o json"))["items"]
    return {
        n["metadata"]["name"]: {
            k: v for k, v in n["status"]["allocatable"].items() if k.startswith("nvidia.com/")
        }
        for n in nodes
    }
