"""Every example of examples/dra on a simulated GPU node running the real `kubegpu
dra-plugin`: the real scheduler allocates its claims against the node's slices, the pod's
containers start, and `nvidia-smi -L` in them lists exactly the devices the claim was given.

The claims are applied unchanged; the pods' containers run plain `nvidia-smi -L` (a simulated
container runs one GPU command, not a shell script; the demo does the same)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from kubegpu.catalog import nvidia
from kubegpu.dra.classes import device_classes
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.controlplane import ControlPlane
from kubegpu.sim.node import SimNode, SimNodeConfig
from kubegpu.sim.pods import pod_processes

from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "dra-examples"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
MIG_GPU = 3  # carries one 1g.18gb MIG device; GPUs 0-2 are whole
UUID = re.compile(r"UUID: ((?:GPU|MIG)-[0-9a-f-]+)")


def _one_mig_device(state: Path, index: int, profile: str) -> None:
    with SimNvml(state) as nvml:
        nvml.set_mig_mode(index, True)
        if nvml.mig_mode(index).change_pending:
            nvml.reset(index)
        gi_profile = next(p for p in nvml.gpu_instance_profiles(index) if p.name == profile)
        gi = nvml.create_gpu_instance(index, gi_profile.id)
        ci_profile = next(
            c
            for c in nvml.compute_instance_profiles(index, gi.id)
            if c.slice_count == gi_profile.slice_count
        )
        nvml.create_compute_instance(index, gi.id, ci_profile.id)


@pytest.fixture
async def gpu_node(control_plane: ControlPlane, akube: AsyncClient) -> AsyncIterator[SimNode]:
    root = tempfile.mkdtemp(prefix="kg-", dir="/tmp")  # short: unix socket paths are limited
    node = SimNode(
        SimNodeConfig(name=NODE, root=Path(root), gpus="h200-nvl:4", lease_interval_s=1.0),
        control_plane.kubeconfig_path,
    )
    await node.start()
    _one_mig_device(node.gpu_state, MIG_GPU, "1g.18gb")
    try:
        yield node
    finally:
        await node.stop()
        assert pod_processes(node.root) == [], f"{node.name} left pod processes behind"
        with contextlib.suppress(ApiError):
            await akube.delete(Node, node.name)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def classes(akube: AsyncClient) -> AsyncIterator[None]:
    for body in device_classes():
        with contextlib.suppress(ApiError):
            await akube.create(DeviceClass.from_dict(body))  # type: ignore[attr-defined]
    yield
    for body in device_classes():
        with contextlib.suppress(ApiError):
            await akube.delete(DeviceClass, body["metadata"]["name"])


@pytest.fixture
def dra_plugin(gpu_node: SimNode, control_plane: ControlPlane, tmp_path: Path) -> Iterator[None]:
    """`kubegpu dra-plugin` for the node, with the sharing gates the examples use."""
    root = gpu_node.root
    log_path = tmp_path / "dra-plugin.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubegpu",
                "dra-plugin",
                "--node-name",
                gpu_node.name,
                "--kubeconfig",
                str(control_plane.kubeconfig_path),
                "--nvml",
                f"sim:{gpu_node.gpu_state}",
                "--plugins-registry",
                str(root / "var/lib/kubelet/plugins_registry"),
                "--plugins-dir",
                str(root / "var/lib/kubelet/plugins"),
                "--cdi-root",
                str(root / "var/run/cdi"),
                "--device-plugin-dir",
                str(root / "var/lib/kubelet/device-plugins"),
                "--feature-gates",
                "TimeSlicingSettings=true,MPSSupport=true",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        print(log_path.read_text()[-4000:])


async def _devices(akube: AsyncClient) -> dict[str, Any]:
    """Published device name -> its attributes (empty until the pool is published)."""
    return {
        d["name"]: d.get("attributes") or {}
        async for s in akube.list(
            ResourceSlice, fields={"spec.driver": nvidia.DRA_DRIVER, "spec.nodeName": NODE}
        )
        for d in s.to_dict()["spec"].get("devices") or []
    }


def _uuid(attributes: dict[str, Any], name: str) -> str:
    value: str = attributes[name]["string"]
    return value


async def _started(akube: AsyncClient, name: str, namespace: str) -> Any:
    pod = await akube.get(Pod, name, namespace=namespace)
    return pod if pod.status.phase in {"Running", "Succeeded", "Failed"} else None


def _logged_uuids(node: SimNode, namespace: str, pod: Any, container: str) -> set[str]:
    directory = node.root / "var/log/pods" / f"{namespace}_{pod.metadata.name}_{pod.metadata.uid}"
    text = "".join(p.read_text() for p in (directory / container).glob("*.log"))
    return set(UUID.findall(text))


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
async def test_an_example_claim_is_allocated_and_its_pod_sees_exactly_its_devices(
    example: str,
    gpu_node: SimNode,
    dra_plugin: None,
    classes: None,
    akube: AsyncClient,
    namespace: str,
) -> None:
    async def published() -> dict[str, Any]:
        devices = await _devices(akube)
        return devices if any("-mig-" in d for d in devices) else {}

    devices = await eventually(published, timeout=60)
    docs = [d for d in yaml.safe_load_all((EXAMPLES / example).read_text()) if d]
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert pods, f"{example} has no pod"
    for doc in docs:
        kinds = {"ResourceClaimTemplate": ResourceClaimTemplate, "ResourceClaim": ResourceClaim}
        if doc["kind"] in kinds:
            await akube.create(kinds[doc["kind"]].from_dict(doc), namespace=namespace)
    for doc in pods:
        for container in doc["spec"]["containers"]:
            container["command"] = ["nvidia-smi", "-L"]
        await akube.create(Pod.from_dict(doc), namespace=namespace)  # type: ignore[attr-defined]

    for doc in pods:
        name = doc["metadata"]["name"]
        pod = await eventually(lambda n=name: _started(akube, n, namespace), 90)
        assert pod.spec.nodeName == NODE
        given: set[str] = set()
        for status in pod.status.resourceClaimStatuses:
            claim = (
                await akube.get(ResourceClaim, status.resourceClaimName, namespace=namespace)
            ).to_dict()
            for result in claim["status"]["allocation"]["devices"]["results"]:
                assert (result["driver"], result["pool"]) == (nvidia.DRA_DRIVER, NODE)
                given.add(result["device"])
        uuids = {_uuid(devices[d], "uuid") for d in given}
        parents = {_uuid(devices[d], "parentUUID") for d in given if "-mig-" in d}

        async def logged(container: str, n: Any = pod) -> set[str]:
            return _logged_uuids(gpu_node, namespace, n, container)

        for container in doc["spec"]["containers"]:
            seen = await eventually(lambda c=container["name"]: logged(c), timeout=30)
            assert seen == uuids | parents, (example, container["name"], given)
        pod = await akube.get(Pod, name, namespace=namespace)
        assert pod.status.phase in {"Running", "Succeeded"}, pod.status.containerStatuses
    for doc in pods:
        await akube.delete(Pod, doc["metadata"]["name"], namespace=namespace)

    async def unprepared() -> bool:
        return gpu_node.dra.claims == {}

    await eventually(unprepared, timeout=30)
