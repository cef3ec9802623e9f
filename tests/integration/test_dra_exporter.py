"""The exporter's DRA attribution on the simulated cluster: pods whose claims the real
scheduler allocated and the real `kubegpu dra-plugin` prepared show on the series of their
GPU, or of their own MIG instance, with the claim's `dra_*` labels — with the upstream flag
(`--kubernetes-enable-dra`), and without the labels when it is off."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaimTemplate
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kube_objects import status_of
from kubegpu.catalog import nvidia
from kubegpu.exporter import Exporter, ExporterConfig
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.controlplane.plane import ControlPlane

from .dra_stack import DraCluster, claim_pod, claim_template, device_uuid, dra_cluster
from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "dra-exporter"
MIG_GPU = 1  # one 1g.10gb MIG device; GPU 0 is whole
DRA_LABELS = ("dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name")


@pytest.fixture
async def cluster(
    control_plane: ControlPlane, akube: AsyncClient, tmp_path: Path
) -> AsyncIterator[DraCluster]:
    async with dra_cluster(
        control_plane, akube, {NODE: "h100-80gb:2"}, tmp_path, mig={NODE: {MIG_GPU: ("1g.10gb",)}}
    ) as c:
        yield c


async def scrape(port: int) -> list[Sample]:
    def fetch() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body: bytes = r.read()
            return body.decode()

    text = await asyncio.to_thread(fetch)
    return [
        s
        for f in text_string_to_metric_families(text)
        if f.name == "DCGM_FI_DEV_FB_USED"
        for s in f.samples
    ]


def exporter_config(cluster: DraCluster, enable_dra: bool) -> ExporterConfig:
    return ExporterConfig(
        address="127.0.0.1:0",
        collect_interval_s=0,
        kubernetes=True,
        enable_dra=enable_dra,
        pod_resources_socket=cluster.nodes[NODE].pod_resources.socket,
        hostname=NODE,
    )


async def _claim_of(akube: AsyncClient, pod: str, namespace: str) -> str:
    got = await akube.get(Pod, pod, namespace=namespace)
    (status,) = status_of(got).resourceClaimStatuses or []
    return cast(str, status.resourceClaimName)


async def test_claim_pods_carry_their_claims_dra_labels_on_their_devices_series(
    cluster: DraCluster, akube: AsyncClient, namespace: str
) -> None:
    devices = await cluster.devices(akube, NODE)
    (mig_device,) = [d for d in devices if "-mig-" in d]
    node = cluster.nodes[NODE]
    for name, device_class, cel in [
        ("whole", nvidia.DRA_DRIVER, []),
        (
            "small",
            nvidia.DRA_MIG_CLASS,
            [f"device.attributes['{nvidia.DRA_DRIVER}'].profile == '1g.10gb'"],
        ),
    ]:
        body = claim_template(name, [("gpu", device_class, cel)])
        await akube.create(  # type: ignore[call-overload]
            ResourceClaimTemplate.from_dict(body),
            namespace=namespace,
        )
    for pod, template in [("trainer", "whole"), ("notebook", "small")]:
        await akube.create(  # type: ignore[call-overload]
            Pod.from_dict(claim_pod(pod, {"gpu": template})),
            namespace=namespace,
        )

    async def running() -> bool:
        for pod in ("trainer", "notebook"):
            got = await akube.get(Pod, pod, namespace=namespace)
            if status_of(got).phase != "Running":
                return False
        return True

    await eventually(running, timeout=90)
    trainer_claim = await _claim_of(akube, "trainer", namespace)
    notebook_claim = await _claim_of(akube, "notebook", namespace)
    with SimNvml(node.gpu_state) as gpus:
        (mig,) = gpus.mig_devices(MIG_GPU)
    assert mig.uuid == device_uuid(devices[mig_device])
    whole_device = next(d for d in devices if "-mig-" not in d)

    async with Exporter(exporter_config(cluster, True), SimNvml(node.gpu_state)) as exporter:

        async def attributed() -> list[Sample]:
            samples = await scrape(exporter.port)
            pods = {s.labels.get("pod") for s in samples}
            assert {"trainer", "notebook"} <= pods, pods
            return samples

        samples = await eventually(attributed, timeout=30)

    (gpu,) = [s for s in samples if s.labels.get("pod") == "trainer"]
    assert gpu.labels["gpu"] == whole_device.removeprefix("gpu-")
    assert (gpu.labels["namespace"], gpu.labels["container"]) == (namespace, "main")
    assert [gpu.labels[k] for k in DRA_LABELS] == [
        trainer_claim,
        namespace,
        nvidia.DRA_DRIVER,
        NODE,
    ]
    assert gpu.labels["dra_device_name"] == whole_device
    assert "dra_mig_profile" not in gpu.labels and "dra_mig_device_uuid" not in gpu.labels

    (inst,) = [s for s in samples if s.labels.get("pod") == "notebook"]
    assert (inst.labels["gpu"], inst.labels["GPU_I_ID"]) == (
        str(MIG_GPU),
        str(mig.gpu_instance_id),
    )
    assert [inst.labels[k] for k in DRA_LABELS] == [
        notebook_claim,
        namespace,
        nvidia.DRA_DRIVER,
        NODE,
    ]
    assert inst.labels["dra_device_name"] == mig_device
    assert inst.labels["dra_mig_profile"] == "1g.10gb"
    assert inst.labels["dra_mig_device_uuid"] == mig.uuid

    # without the flag the claims' devices carry no dra_* labels
    async with Exporter(exporter_config(cluster, False), SimNvml(node.gpu_state)) as exporter:
        plain = await scrape(exporter.port)
    assert plain and not any(k.startswith("dra_") for s in plain for k in s.labels)
