"""Sharing you can see, on simulated nodes of the real control plane: the device plugin,
feature discovery and the exporter run in-process against a `SimNode`, the kube-scheduler
places the pods, the simulated kubelet allocates devices and runs each pod's simulated CUDA
process on them.

- Two pods on one time-sliced GPU that use different amounts of memory get different
  per-pod values (`attribution="process"`); what only the GPU can say is marked
  `attribution="gpu"`.
- For every sharing method (exclusive, MIG, MPS, time-sliced) the node label of the GPU,
  the annotation on the pod and the exporter's isolation metric say the same method.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kube_objects import meta
from kubegpu.catalog import nvidia
from kubegpu.device_plugin.plugin import DevicePlugin, PluginOptions
from kubegpu.exporter import Exporter, ExporterConfig
from kubegpu.exporter.poddirectory import PodDirectory
from kubegpu.feature_discovery.discovery import FeatureDiscovery, GfdOptions
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.kubelet.gpuload import ENV_MEMORY, ENV_SM
from kubegpu.sim.kubelet.node import SimNode

from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]


@dataclass
class GpuNode:
    node: SimNode
    nvml: SimNvml
    plugin: DevicePlugin
    discovery: FeatureDiscovery
    root: Path


Start = Callable[..., Awaitable[GpuNode]]


@pytest.fixture
async def gpu_node(sim_nodes: SimNodes, akube: AsyncClient) -> AsyncIterator[Start]:
    """A simulated node with the real device plugin and feature discovery, in-process."""
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def start(
        name: str, gpus: str, config: str, prepare: Callable[[SimNvml], None] | None = None
    ) -> GpuNode:
        node = await sim_nodes.start(name, gpus=gpus, labels={"pool": name}, lease_interval_s=1.0)
        root = node.root
        nvml = SimNvml(node.gpu_state)
        if prepare is not None:
            prepare(nvml)
        config_file = root / "etc/kubegpu/config.yaml"
        config_file.parent.mkdir(parents=True)
        config_file.write_text(config.replace("@ROOT@", str(root)))
        plugin = DevicePlugin(
            SimNvml(node.gpu_state),
            PluginOptions(
                config_file=config_file,
                node_name=name,
                plugin_dir=node.devices.plugin_dir,
                kubelet_socket=node.devices.socket,
                cdi_root=None,
                poll_s=0.2,
            ),
            akube,
        )
        plugin_task = asyncio.create_task(plugin.run())
        discovery = FeatureDiscovery(
            GfdOptions(
                node_name=name,
                config_file=config_file,
                sleep_interval="1h",
                machine_type_file=str(root / "product_name"),
            ),
            lambda: SimNvml(node.gpu_state),
            akube,
        )
        discovery_task = asyncio.create_task(discovery.run())

        async def stop() -> None:
            plugin.stop()
            discovery.stop()
            await asyncio.wait_for(asyncio.gather(plugin_task, discovery_task), 15)

        cleanups.append(stop)
        await asyncio.wait_for(plugin.ready.wait(), 15)
        await asyncio.wait_for(discovery.labelled.wait(), 15)
        return GpuNode(node, nvml, plugin, discovery, root)

    yield start
    for cleanup in reversed(cleanups):
        await cleanup()


def workload(
    name: str, pool: str, resource: str, memory_mib: int | None = None, sm: int | None = None
) -> Any:
    env = []
    if memory_mib is not None:
        env.append({"name": ENV_MEMORY, "value": str(memory_mib)})
    if sm is not None:
        env.append({"name": ENV_SM, "value": str(sm)})
    return Pod.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"pool": pool},
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/cuda-app:1",
                        "env": env,
                        "resources": {"limits": {resource: "1"}},
                    }
                ],
            },
        }
    )


async def scrape(port: int) -> dict[str, list[Sample]]:
    def fetch() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body: bytes = r.read()
            return body.decode()

    text = await asyncio.to_thread(fetch)
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def series(metrics: dict[str, list[Sample]], name: str, **labels: str) -> list[Sample]:
    return [
        s for s in metrics.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())
    ]


async def isolation_of(akube: AsyncClient, namespace: str, pod: str) -> list[dict[str, Any]]:
    """The device plugin's annotation on a pod, once it is there: the main container's."""

    async def annotated() -> list[dict[str, Any]] | None:
        p = await akube.get(Pod, pod, namespace=namespace)
        text = (meta(p).annotations or {}).get(nvidia.ISOLATION_ANNOTATION)
        return json.loads(text)["main"] if text else None

    return cast(list[dict[str, Any]], await eventually(annotated, timeout=60))


TIME_SLICED = """
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


async def test_two_pods_on_one_time_sliced_gpu_each_see_their_own_memory_and_utilisation(
    gpu_node: Start, akube: AsyncClient, namespace: str
) -> None:
    share = await gpu_node("sim-share", "l4:1;seed=share-it", TIME_SLICED)
    await akube.create(  # type: ignore[call-overload]
        workload("small", "sim-share", "nvidia.com/gpu", 2048, 20), namespace=namespace
    )
    await akube.create(  # type: ignore[call-overload]
        workload("large", "sim-share", "nvidia.com/gpu", 6144, 45), namespace=namespace
    )

    config = ExporterConfig(
        address="127.0.0.1:0",
        collect_interval_s=0,
        kubernetes=True,
        virtual_gpus=True,
        process_metrics=True,
        proc_root=share.root / "proc",
        pod_resources_socket=share.node.pod_resources.socket,
        hostname="sim-share",
        xid_poll_s=0.1,
    )
    directory = PodDirectory(akube, "sim-share", refresh_s=0)
    async with Exporter(config, share.nvml, directory) as exporter:

        async def attributed() -> dict[str, list[Sample]]:
            m = await scrape(exporter.port)
            used = series(m, "DCGM_FI_DEV_FB_USED", attribution="process")
            assert {s.labels["pod"] for s in used} == {"small", "large"}
            # the device plugin annotates each pod once the kubelet lists it as holder
            annotated = {s.labels["pod"] for s in series(m, "kubegpu_pod_isolation")}
            assert annotated == {"small", "large"}
            return m

        metrics = await eventually(attributed, timeout=60)

        # the memory each pod's process holds, not the GPU's total on both
        used = {
            s.labels["pod"]: s.value
            for s in series(metrics, "DCGM_FI_DEV_FB_USED", attribution="process")
        }
        assert used == {"small": 2048, "large": 6144}
        (whole,) = [s for s in metrics["DCGM_FI_DEV_FB_USED"] if "pod" not in s.labels]
        assert whole.value == 2048 + 6144
        # per-process utilisation samples: each pod's own SM share
        util = {
            s.labels["pod"]: s.value
            for s in series(metrics, "DCGM_FI_DEV_GPU_UTIL", attribution="process")
        }
        assert util == {"small": 20, "large": 45}
        # what only the GPU can say is marked as the GPU's, and is the same on both pods
        temps = series(metrics, "DCGM_FI_DEV_GPU_TEMP", attribution="gpu")
        assert {s.labels["pod"] for s in temps} == {"small", "large"}
        assert len({s.value for s in temps}) == 1
        assert not series(metrics, "DCGM_FI_DEV_GPU_TEMP", attribution="process")

        # the isolation each pod has: a time slice, no memory guaranteed, faults shared
        for pod in ("small", "large"):
            (iso,) = series(metrics, "kubegpu_pod_isolation", pod=pod)
            assert (iso.labels["method"], iso.labels["fault_isolated"]) == ("time-sliced", "false")
            (memory,) = series(metrics, "kubegpu_pod_guaranteed_memory_mib", pod=pod)
            assert memory.value == 0

        # a pod that goes takes its series with it
        await akube.delete(Pod, "large", namespace=namespace, grace_period=0)

        async def gone() -> bool:
            m = await scrape(exporter.port)
            pods = {
                s.labels["pod"] for s in series(m, "DCGM_FI_DEV_FB_USED", attribution="process")
            }
            return pods == {"small"}

        await eventually(gone, timeout=60)


MIXED = """
version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu.shared
      devices: [2]
      replicas: 2
"""

MPS = """
version: v1
flags:
  mpsRoot: "@ROOT@/mps"
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def one_mig_instance(nvml: SimNvml) -> None:
    nvml.set_mig_mode(0, True)
    gi = nvml.create_gpu_instance(0, 19)  # 1g.10gb
    nvml.create_compute_instance(0, gi.id, 0)


async def test_labels_annotations_and_metrics_say_the_method_of_every_sharing_mode(
    gpu_node: Start, akube: AsyncClient, namespace: str
) -> None:
    mixed = await gpu_node("sim-iso", "h100-80gb:3;seed=iso-it", MIXED, one_mig_instance)
    mps = await gpu_node("sim-mps", "l4:1;seed=iso-mps", MPS, _daemon_started)

    async def labelled(name: str, want: dict[str, str]) -> bool:
        labels = meta(await akube.get(Node, name)).labels or {}
        return all(labels.get(k) == v for k, v in want.items())

    await eventually(
        lambda: labelled(
            "sim-iso",
            {
                nvidia.isolation_label(0): "mig",
                nvidia.isolation_label(1): "exclusive",
                nvidia.isolation_label(2): "time-sliced",
            },
        )
    )
    await eventually(lambda: labelled("sim-mps", {nvidia.isolation_label(0): "mps"}))

    pods = [
        ("whole", "sim-iso", "nvidia.com/gpu"),
        ("slice", "sim-iso", "nvidia.com/mig-1g.10gb"),
        ("turns", "sim-iso", "nvidia.com/gpu.shared"),
        ("client", "sim-mps", "nvidia.com/gpu"),
    ]
    for name, pool, resource in pods:
        await akube.create(workload(name, pool, resource), namespace=namespace)  # type: ignore[call-overload]

    h100 = mixed.nvml.device(1)
    mig = mixed.nvml.mig_devices(0)[0]
    l4 = mps.nvml.device(0)
    want = {
        "whole": ("exclusive", h100.memory_total_mib, True, None),
        "slice": ("mig", mig.memory_mib, True, None),
        "turns": ("time-sliced", 0, False, None),
        "client": ("mps", l4.memory_total_mib // 2, False, 50),
    }
    for name, (method, memory, isolated, threads) in want.items():
        (got,) = await isolation_of(akube, namespace, name)
        assert (got["method"], got["memoryMiB"], got["faultIsolated"]) == (
            method,
            memory,
            isolated,
        ), name
        assert got.get("threadPercentage") == threads, name
        assert got["uuid"] == got["device"].split("::")[0]
    (whole,) = await isolation_of(akube, namespace, "whole")
    assert whole["uuid"] == h100.uuid
    (slice_,) = await isolation_of(akube, namespace, "slice")
    assert slice_["uuid"] == mig.uuid

    # the exporter says the same, from the same annotation
    for gpu, names in ((mixed, ("whole", "slice", "turns")), (mps, ("client",))):
        config = ExporterConfig(
            address="127.0.0.1:0",
            collect_interval_s=0,
            kubernetes=True,
            process_metrics=True,
            proc_root=gpu.root / "proc",
            pod_resources_socket=gpu.node.pod_resources.socket,
            hostname=gpu.node.name,
            xid_poll_s=0.1,
        )
        directory = PodDirectory(akube, gpu.node.name, refresh_s=0)
        async with Exporter(config, gpu.nvml, directory) as exporter:
            metrics = await scrape(exporter.port)
            for name in names:
                method, memory, isolated, threads = want[name]
                (iso,) = series(metrics, "kubegpu_pod_isolation", pod=name)
                assert iso.labels["method"] == method
                assert iso.labels["fault_isolated"] == str(isolated).lower()
                (mem,) = series(metrics, "kubegpu_pod_guaranteed_memory_mib", pod=name)
                assert mem.value == memory
                limits = series(metrics, "kubegpu_pod_mps_active_thread_percentage", pod=name)
                assert [s.value for s in limits] == ([threads] if threads else [])


def _daemon_started(nvml: SimNvml) -> None:
    """The node's MPS control daemon is up (the plugin waits for its `.started` file)."""
    root = Path(str(nvml.store.path)).parents[3]  # <root>/var/lib/kubegpu-sim/gpus.json
    started = root / "mps" / "nvidia.com" / "gpu" / ".started"
    started.parent.mkdir(parents=True, exist_ok=True)
    started.touch()
