"""The exporter on a simulated node of the real control plane: the kube-scheduler places pods,
the simulated kubelet allocates GPUs, MIG devices and shared replicas to them, and the
exporter's series carry the pods' names while the allocated devices show load."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kube_objects import status_of
from kubegpu.exporter import Exporter, ExporterConfig
from kubegpu.nvml.sim import SimNvml

from .fake_plugin import FakePlugin
from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "sim-exporter"


def workload(name: str, resource: str) -> Any:
    return Pod.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"pool": "exporter"},
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/cuda-app:1",
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
    return [s for s in metrics[name] if all(s.labels.get(k) == v for k, v in labels.items())]


async def test_pods_are_named_on_their_devices_series_and_their_devices_are_busy(
    control_plane: Any, akube: AsyncClient, namespace: str
) -> None:
    sim_nodes = SimNodes(control_plane.kubeconfig_path, akube)
    plugins: list[FakePlugin] = []
    try:
        node = await sim_nodes.start(
            NODE,
            gpus="h100-80gb:3;seed=exporter-it",
            labels={"pool": "exporter"},
            lease_interval_s=1.0,
        )
        gpus = SimNvml(node.gpu_state)
        gpus.set_mig_mode(1, True)
        for _ in range(2):
            gi = gpus.create_gpu_instance(1, 19)  # 1g.10gb
            gpus.create_compute_instance(1, gi.id, 0)
        mig = {d.uuid: str(d.gpu_instance_id) for d in gpus.mig_devices(1)}
        whole, shared = gpus.device(0).uuid, gpus.device(2).uuid
        plugin_dir = node.devices.plugin_dir
        plugins = [
            FakePlugin(plugin_dir, "nvidia.com/gpu", [whole]),
            FakePlugin(plugin_dir, "nvidia.com/mig-1g.10gb", sorted(mig)),
            FakePlugin(plugin_dir, "nvidia.com/gpu.shared", [f"{shared}::{n}" for n in range(4)]),
        ]
        for plugin in plugins:
            await plugin.start()

        async def advertised() -> bool:
            n = await akube.get(Node, NODE)
            return (
                cast(dict[str, str], status_of(n).allocatable).get("nvidia.com/gpu.shared") == "4"
            )

        await eventually(advertised)
        config = ExporterConfig(
            address="127.0.0.1:0",
            collect_interval_s=0,
            kubernetes=True,
            virtual_gpus=True,
            pod_resources_socket=node.pod_resources.socket,
            hostname=NODE,
            xid_poll_s=0.1,
        )
        async with Exporter(config, gpus) as exporter:
            before = await scrape(exporter.port)
            assert all("pod" not in s.labels for s in before["DCGM_FI_DEV_GPU_UTIL"])
            assert series(before, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0].value == 0

            for name, resource in [
                ("trainer", "nvidia.com/gpu"),
                ("notebook", "nvidia.com/mig-1g.10gb"),
                ("infer-a", "nvidia.com/gpu.shared"),
                ("infer-b", "nvidia.com/gpu.shared"),
            ]:
                await akube.create(workload(name, resource), namespace=namespace)  # type: ignore[call-overload]

            async def attributed() -> dict[str, list[Sample]]:
                m = await scrape(exporter.port)
                pods = {s.labels.get("pod") for s in m["DCGM_FI_DEV_FB_USED"]}
                assert {"trainer", "notebook", "infer-a", "infer-b"} <= pods, pods
                return m

            metrics = await eventually(attributed, timeout=60)

            # a whole GPU: its series name the pod (after the plain series, virtual-GPU mode)
            (trainer,) = series(metrics, "DCGM_FI_DEV_GPU_UTIL", gpu="0", pod="trainer")
            assert (trainer.labels["namespace"], trainer.labels["container"]) == (namespace, "main")
            assert trainer.value > 30
            assert series(metrics, "DCGM_FI_DEV_FB_USED", gpu="0", pod="trainer")[0].value > 0

            # a MIG device: the series of its GPU instance, and only that one, is busy
            (notebook,) = series(metrics, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", pod="notebook")
            held_gi = notebook.labels["GPU_I_ID"]
            assert notebook.labels["gpu"] == "1"
            assert notebook.labels["GPU_I_PROFILE"] == "1g.10gb"
            assert notebook.value > 0.3
            (free_gi,) = set(mig.values()) - {held_gi}
            (idle,) = series(metrics, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="1", GPU_I_ID=free_gi)
            assert idle.value == 0 and "pod" not in idle.labels

            # a shared GPU: one copy per pod, with the replica each holds
            replicas = series(metrics, "DCGM_FI_DEV_GPU_UTIL", gpu="2")
            by_pod = {s.labels.get("pod"): s.labels.get("vgpu") for s in replicas}
            assert set(by_pod) == {None, "infer-a", "infer-b"}
            assert {by_pod["infer-a"], by_pod["infer-b"]} <= {"0", "1", "2", "3"}
            assert replicas[0].value > 0

            # the pod goes: its labels and its load go with it
            await akube.delete(Pod, "trainer", namespace=namespace, grace_period=0)

            async def released() -> bool:
                m = await scrape(exporter.port)
                util = series(m, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
                return [(s.labels.get("pod"), s.value) for s in util] == [(None, 0)]

            await eventually(released, timeout=60)
    finally:
        for plugin in plugins:
            await plugin.stop()
        await sim_nodes.close()
