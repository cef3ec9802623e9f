"""Dynamic MIG with the real control plane (written by the dra-plugin helper, D1): the
plugin publishes a MIG-enabled GPU as partitionable devices with a counter set, the real
scheduler allocates a MIG device that does not exist yet, prepare creates it at the
allocated placement, the pod sees its UUID, and deleting the pod destroys it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaimTemplate, ResourceSlice

from kubegpu.catalog import nvidia
from kubegpu.dra.classes import device_classes
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.controlplane import ControlPlane
from kubegpu.sim.node import SimNode, SimNodeConfig
from kubegpu.sim.pods import pod_processes

from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "dra-dynamic-mig"


@pytest.fixture
async def mig_node(control_plane: ControlPlane, akube: AsyncClient) -> AsyncIterator[SimNode]:
    root = tempfile.mkdtemp(prefix="kg-", dir="/tmp")  # short: unix socket paths are limited
    node = SimNode(
        SimNodeConfig(name=NODE, root=Path(root), gpus="h100-80gb:1", lease_interval_s=1.0),
        control_plane.kubeconfig_path,
    )
    await node.start()
    with SimNvml(node.gpu_state) as nvml:
        nvml.set_mig_mode(0, True)
        if nvml.mig_mode(0).change_pending:
            nvml.reset(0)
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
def dra_plugin(mig_node: SimNode, control_plane: ControlPlane, tmp_path: Path) -> Any:
    root = mig_node.root
    log = (tmp_path / "dra-plugin.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubegpu",
            "dra-plugin",
            "--node-name",
            mig_node.name,
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
            "--nvml",
            f"sim:{mig_node.gpu_state}",
            "--plugins-registry",
            str(root / "var/lib/kubelet/plugins_registry"),
            "--plugins-dir",
            str(root / "var/lib/kubelet/plugins"),
            "--cdi-root",
            str(root / "var/run/cdi"),
            "--device-plugin-dir",
            str(root / "var/lib/kubelet/device-plugins"),
            "--feature-gates",
            "DynamicMIG=true",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        print((tmp_path / "dra-plugin.log").read_text()[-4000:])


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if b"=" in item)


async def test_the_scheduler_allocates_a_mig_device_that_prepare_creates(
    mig_node: SimNode, dra_plugin: Any, classes: None, akube: AsyncClient, namespace: str
) -> None:
    async def slices() -> list[Any] | None:
        found = [
            s.to_dict()
            async for s in akube.list(
                ResourceSlice, fields={"spec.driver": nvidia.DRA_DRIVER, "spec.nodeName": NODE}
            )
        ]
        if not found:
            return None
        top = max(s["spec"]["pool"]["generation"] for s in found)
        pool = [s for s in found if s["spec"]["pool"]["generation"] == top]
        # readers use the highest generation, once all its slices are there
        return pool if len(pool) == pool[0]["spec"]["pool"]["resourceSliceCount"] else None

    published = await eventually(slices, timeout=60)
    counters = [c for s in published for c in s["spec"].get("sharedCounters") or []]
    assert [c["name"] for c in counters] == ["gpu-0-counter-set"]
    names = {d["name"] for s in published for d in s["spec"].get("devices") or []}
    assert "gpu-0-mig-3g40gb-9-4" in names

    await akube.create(
        ResourceClaimTemplate.from_dict(  # type: ignore[attr-defined]
            {
                "metadata": {"name": "half-gpu"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "mig",
                                    "exactly": {
                                        "deviceClassName": nvidia.DRA_MIG_CLASS,
                                        "selectors": [
                                            {
                                                "cel": {
                                                    "expression": "device.attributes["
                                                    "'gpu.nvidia.com'].profile == '3g.40gb'"
                                                }
                                            }
                                        ],
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        ),
        namespace=namespace,
    )
    pods = ("first", "second")
    for name in pods:
        await akube.create(
            Pod.from_dict(  # type: ignore[attr-defined]
                {
                    "metadata": {"name": name},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "resourceClaims": [
                            {"name": "mig", "resourceClaimTemplateName": "half-gpu"}
                        ],
                        "containers": [
                            {
                                "name": "main",
                                "image": "ghcr.io/kubegpu/kubegpu:test",
                                "command": [sys.executable, "-c", "import time; time.sleep(3600)"],
                                "resources": {"claims": [{"name": "mig"}]},
                            }
                        ],
                    },
                }
            ),
            namespace=namespace,
        )

    async def all_running() -> bool:
        for name in pods:
            pod = await akube.get(Pod, name, namespace=namespace)
            if pod.status.phase != "Running":
                return False
        return True

    await eventually(all_running, timeout=90)
    # the two 3g.40gb placements, created at prepare; the counters kept them apart
    with SimNvml(mig_node.gpu_state) as nvml:
        made = {m.uuid: m.placement.start for m in nvml.mig_devices(0)}
    assert sorted(made.values()) == [0, 4]
    seen = {_environ(pid)[nvidia.NVIDIA_VISIBLE_DEVICES] for pid in mig_node.pids()}
    assert seen == set(made)

    for name in pods:
        await akube.delete(Pod, name, namespace=namespace)

    async def destroyed() -> bool:
        with SimNvml(mig_node.gpu_state) as nvml:
            return nvml.gpu_instances(0) == []

    await eventually(destroyed, timeout=60)
