"""The exporter against a simulated node, scraped over HTTP and parsed with prometheus-client.

Pod attribution is fed by a stand-in for the kubelet's pod-resources API on a unix socket.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kubegpu.exporter import Exporter, ExporterConfig, parse_counters, server
from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.nvml.types import DeviceSample

pytestmark = pytest.mark.asyncio(loop_scope="function")

BASE_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
MIG_LABELS = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "Hostname",
]
DEFAULT_FAMILIES = {
    "DCGM_FI_DEV_SM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEM_CLOCK": "gauge",
    "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge",
    "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
    "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge",
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "gauge",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gauge",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "gauge",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "gauge",
}
NOT_ON_MIG = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
}


# -- helpers ------------------------------------------------------------------------------------
@dataclass
class Scrape:
    text: str
    families: dict[str, Any]

    def samples(self, family: str, **labels: str) -> list[Sample]:
        return [
            s
            for s in self.families[family].samples
            if all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, family: str, **labels: str) -> float:
        (sample,) = self.samples(family, **labels)
        return float(sample.value)


def get(
    port: int, path: str, method: str = "GET", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


async def scrape(exporter: Exporter) -> Scrape:
    status, headers, body = await asyncio.to_thread(get, exporter.port, "/metrics")
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    return Scrape(text, {f.name: f for f in text_string_to_metric_families(text)})


@asynccontextmanager
async def serving(nvml: SimNvml, **config: Any) -> AsyncIterator[Exporter]:
    settings = {
        "address": "127.0.0.1:0",
        "collect_interval_s": 0.0,
        "hostname": "node-a",
        "xid_poll_s": 0.05,
        **config,
    }
    async with Exporter(ExporterConfig(**settings), nvml) as exporter:
        yield exporter


class FakeKubelet(pr_grpc.PodResourcesListerServicer):
    """The kubelet's pod-resources API, answering List with `self.pods`."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pods: list[pr.PodResources] = []
        self.server: grpc.aio.Server | None = None

    def hold(self, namespace: str, pod: str, container: str, resource: str, *ids: str) -> None:
        self.pods.append(
            pr.PodResources(
                name=pod,
                namespace=namespace,
                containers=[
                    pr.ContainerResources(
                        name=container,
                        devices=[pr.ContainerDevices(resource_name=resource, device_ids=ids)],
                    )
                ],
            )
        )

    async def List(self, request: Any, context: Any) -> pr.ListPodResourcesResponse:
        return pr.ListPodResourcesResponse(pod_resources=self.pods)

    async def start(self) -> None:
        self.server = grpc.aio.server()
        pr_grpc.add_PodResourcesListerServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{self.socket}")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory for unix sockets (their paths are limited to ~100 characters)."""
    path = Path(tempfile.mkdtemp(prefix="kg-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def kubelet(short_dir: Path) -> AsyncIterator[FakeKubelet]:
    fake = FakeKubelet(short_dir / "kubelet.sock")
    await fake.start()
    yield fake
    await fake.stop()


MakeNode = Callable[[str], SimNvml]


@dataclass
class MigNode:
    """GPU 0 whole; GPU 1 in MIG mode with a 3g.40gb ("big") and a 1g.10gb ("small")."""

    node: SimNvml
    big: str  # MIG device UUIDs
    small: str
    big_gi: str  # their GPU-instance ids, as labels show them
    small_gi: str


def mig_node(sim_node: MakeNode) -> MigNode:
    node = sim_node("h100-80gb:2;seed=exporter")
    node.set_mig_mode(1, True)
    made = []
    for profile_id, ci_profile in ((9, 2), (19, 0)):  # 3g.40gb, 1g.10gb; full-size CIs
        gi = node.create_gpu_instance(1, profile_id)
        node.create_compute_instance(1, gi.id, ci_profile)
        (device,) = [d for d in node.mig_devices(1) if d.gpu_instance_id == gi.id]
        made.append((device.uuid, str(gi.id)))
    (big, big_gi), (small, small_gi) = made
    return MigNode(node, big, small, big_gi, small_gi)


# -- names, types, help, labels -------------------------------------------------------------------
async def test_default_counters_give_dcgm_names_types_and_help(sim_node: MakeNode) -> None:
    node = sim_node("h100-80gb:1;seed=names")
    async with serving(node) as exporter:
        got = await scrape(exporter)
    dcgm = {n: f.type for n, f in got.families.items() if n.startswith("DCGM_")}
    assert dcgm == DEFAULT_FAMILIES
    assert got.families["DCGM_FI_DEV_POWER_USAGE"].documentation == "Power draw (in W)."
    assert (
        got.families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].documentation
        == "Ratio of time the graphics engine is active."
    )
    # counters keep DCGM exporter's names: no _total suffix on the wire
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in got.text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in got.text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in got.text


async def test_gpu_series_carry_the_upstream_labels_in_order(sim_node: MakeNode) -> None:
    node = sim_node("h100-80gb:1,l4:1;seed=labels")
    async with serving(node) as exporter:
        got = await scrape(exporter)
    for index in (0, 1):
        info = node.device(index)
        (sample,) = got.samples("DCGM_FI_DEV_SM_CLOCK", gpu=str(index))
        assert list(sample.labels) == [*BASE_LABELS, "DCGM_FI_DRIVER_VERSION"]
        assert sample.labels == {
            "gpu": str(index),
            "UUID": info.uuid,
            "pci_bus_id": info.pci_bus_id,
            "device": f"nvidia{index}",
            "modelName": info.name,
            "Hostname": "node-a",
            "DCGM_FI_DRIVER_VERSION": node.system().driver_version,
        }
    # a value a GPU cannot report is left out, not invented: the L4 has no HBM sensor
    assert [s.labels["gpu"] for s in got.samples("DCGM_FI_DEV_MEMORY_TEMP")] == ["0"]


async def test_a_mig_gpu_is_reported_per_gpu_instance_only(sim_node: MakeNode) -> None:
    mig = mig_node(sim_node)
    node = mig.node
    async with serving(node) as exporter:
        got = await scrape(exporter)
    parent = node.device(1)
    instances = got.samples("DCGM_FI_DEV_FB_FREE", gpu="1")
    assert [(s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"]) for s in instances] == [
        ("3g.40gb", mig.big_gi),
        ("1g.10gb", mig.small_gi),
    ]
    for s in instances:
        assert list(s.labels) == [*MIG_LABELS, "DCGM_FI_DRIVER_VERSION"]
        assert s.labels["UUID"] == parent.uuid  # the parent's identity
    # framebuffer is the instance's own, clocks and power are the parent's
    assert got.value("DCGM_FI_DEV_FB_FREE", gpu="1", GPU_I_ID=mig.small_gi) == 9984
    assert got.value("DCGM_FI_DEV_FB_FREE", gpu="1", GPU_I_ID=mig.big_gi) == 40448
    assert len({s.value for s in got.samples("DCGM_FI_DEV_POWER_USAGE", gpu="1")}) == 1
    assert len(got.samples("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="1")) == 2
    # no whole-GPU series for a MIG GPU, and no *_UTIL series for instances
    for name in DEFAULT_FAMILIES:
        assert all("GPU_I_ID" in s.labels for s in got.samples(name, gpu="1")), name
    for name in NOT_ON_MIG:
        assert got.samples(name, gpu="1") == []
        assert len(got.samples(name, gpu="0")) == 1


# -- simulated load -----------------------------------------------------------------------------
async def test_allocated_devices_show_load_and_idle_ones_do_not(sim_node: MakeNode) -> None:
    mig = mig_node(sim_node)
    node = mig.node
    SimControls.of(node).set_busy({node.device(0).uuid: 1, mig.small: 1})
    async with serving(node) as exporter:
        got = await scrape(exporter)
    assert got.value("DCGM_FI_DEV_GPU_UTIL", gpu="0") > 30
    assert got.value("DCGM_FI_DEV_FB_USED", gpu="0") > 0
    assert got.value("DCGM_FI_DEV_POWER_USAGE", gpu="0") > 200
    assert got.value("DCGM_FI_DEV_GPU_TEMP", gpu="0") > got.value(
        "DCGM_FI_DEV_GPU_TEMP", gpu="1", GPU_I_ID=mig.big_gi
    )
    busy_gi = got.value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="1", GPU_I_ID=mig.small_gi)
    assert 0.3 < busy_gi <= 1.0
    assert got.value("DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID=mig.small_gi) > 0
    assert got.value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="1", GPU_I_ID=mig.big_gi) == 0
    assert got.value("DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID=mig.big_gi) == 0
    SimControls.of(node).set_busy({})
    async with serving(node) as exporter:
        idle = await scrape(exporter)
    assert idle.value("DCGM_FI_DEV_GPU_UTIL", gpu="0") == 0
    assert idle.value("DCGM_FI_DEV_POWER_USAGE", gpu="0") < 100


async def test_processes_drive_utilisation_and_memory(sim_node: MakeNode) -> None:
    node = sim_node("l4:1;seed=procs")
    SimControls.of(node).start_process(0, pid=10, used_memory_mib=4096, sm_percent=65)
    async with serving(node) as exporter:
        got = await scrape(exporter)
    assert got.value("DCGM_FI_DEV_GPU_UTIL") == 65
    assert got.value("DCGM_FI_DEV_FB_USED") == 4096
    assert got.value("DCGM_FI_DEV_FB_FREE") == node.device(0).memory_total_mib - 4096
    assert got.value("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == pytest.approx(0.65)


# -- pods ---------------------------------------------------------------------------------------
async def test_pods_are_attributed_to_gpus_mig_instances_and_replicas(
    sim_node: MakeNode, kubelet: FakeKubelet
) -> None:
    mig = mig_node(sim_node)
    node = mig.node
    third = sim_node("l4:1;seed=other")  # only to own a UUID this node does not have
    gpu0 = node.device(0).uuid
    kubelet.hold("team-a", "trainer", "main", "nvidia.com/gpu", gpu0)
    kubelet.hold("team-b", "notebook", "jupyter", "nvidia.com/mig-1g.10gb", mig.small)
    kubelet.hold("team-c", "server", "infer", "nvidia.com/mig-3g.40gb", f"{mig.big}::2")
    kubelet.hold("team-d", "other", "x", "example.com/fpga", gpu0)  # not an NVIDIA resource
    kubelet.hold("team-e", "elsewhere", "y", "nvidia.com/gpu", third.device(0).uuid)
    async with serving(node, kubernetes=True, pod_resources_socket=kubelet.socket) as exporter:
        got = await scrape(exporter)

    def pod_of(**labels: str) -> tuple[str, str, str] | None:
        (s,) = got.samples("DCGM_FI_DEV_FB_USED", **labels)
        return (
            (s.labels["namespace"], s.labels["pod"], s.labels["container"])
            if "pod" in s.labels
            else None
        )

    assert pod_of(gpu="0") == ("team-a", "trainer", "main")
    assert pod_of(gpu="1", GPU_I_ID=mig.small_gi) == ("team-b", "notebook", "jupyter")
    assert pod_of(gpu="1", GPU_I_ID=mig.big_gi) == ("team-c", "server", "infer")
    (s,) = got.samples("DCGM_FI_DEV_SM_CLOCK", gpu="1", GPU_I_ID=mig.small_gi)
    assert list(s.labels) == [
        *MIG_LABELS,
        "DCGM_FI_DRIVER_VERSION",
        "container",
        "namespace",
        "pod",
    ]
    assert "vgpu" not in s.labels


async def test_without_virtual_gpus_a_shared_gpu_names_one_pod(
    sim_node: MakeNode, kubelet: FakeKubelet
) -> None:
    node = sim_node("l4:1;seed=shared")
    uuid = node.device(0).uuid
    kubelet.hold("ns", "first", "c", "nvidia.com/gpu.shared", f"{uuid}::0")
    kubelet.hold("ns", "second", "c", "nvidia.com/gpu.shared", f"{uuid}::1")
    async with serving(node, kubernetes=True, pod_resources_socket=kubelet.socket) as exporter:
        got = await scrape(exporter)
    (s,) = got.samples("DCGM_FI_DEV_GPU_UTIL")
    assert s.labels["pod"] == "second"  # the last one listed, as DCGM exporter does


async def test_virtual_gpu_mode_gives_each_sharing_pod_its_series(
    sim_node: MakeNode, kubelet: FakeKubelet
) -> None:
    node = sim_node("l4:1;seed=shared")
    uuid = node.device(0).uuid
    kubelet.hold("ns", "first", "c", "nvidia.com/gpu.shared", f"{uuid}::0")
    kubelet.hold("ns", "second", "c", "nvidia.com/gpu.shared", f"{uuid}::3")
    async with serving(
        node, kubernetes=True, pod_resources_socket=kubelet.socket, virtual_gpus=True
    ) as exporter:
        got = await scrape(exporter)
    series = got.samples("DCGM_FI_DEV_GPU_UTIL")
    assert [(s.labels.get("pod"), s.labels.get("vgpu")) for s in series] == [
        (None, None),  # the device's own series stays
        ("first", "0"),
        ("second", "3"),
    ]
    assert list(series[1].labels)[-4:] == ["container", "namespace", "pod", "vgpu"]


async def test_a_broken_kubelet_socket_costs_only_the_pod_labels(
    sim_node: MakeNode, short_dir: Path
) -> None:
    node = sim_node("l4:1;seed=broken")
    stale = short_dir / "kubelet.sock"
    stale.write_text("not a socket")
    async with serving(
        node, kubernetes=True, pod_resources_socket=stale, pod_resources_timeout_s=0.5
    ) as exporter:
        got = await scrape(exporter)
    (s,) = got.samples("DCGM_FI_DEV_GPU_UTIL")
    assert "pod" not in s.labels
    assert got.value("kubegpu_exporter_pod_resources_errors") == 1
    # a node without the socket at all is normal (not Kubernetes): no error counted
    async with serving(
        node, kubernetes=True, pod_resources_socket=short_dir / "missing.sock"
    ) as exporter:
        quiet = await scrape(exporter)
    assert quiet.value("kubegpu_exporter_pod_resources_errors") == 0


# -- faults -------------------------------------------------------------------------------------
async def test_a_lost_gpu_is_left_out_and_marked_while_the_others_are_served(
    sim_node: MakeNode,
) -> None:
    node = sim_node("h100-80gb:2;seed=lost")
    async with serving(node) as exporter:
        await scrape(exporter)  # GPU 0 known before it falls off the bus
        SimControls.of(node).lose_gpu(0)
        got = await scrape(exporter)
    dcgm_gpus = {
        s.labels["gpu"] for n, f in got.families.items() if n.startswith("DCGM_") for s in f.samples
    }
    assert dcgm_gpus == {"1"}
    down = got.samples("kubegpu_exporter_gpu_up", gpu="0")[0]
    assert down.value == 0
    assert down.labels["err_code"] == "15"
    assert "fallen off the bus" in down.labels["err_msg"]
    assert down.labels["UUID"] == SimControls.of(node).raw_state()["gpus"][0]["uuid"]
    assert got.value("kubegpu_exporter_gpu_up", gpu="1") == 1


class FlakyNvml(SimNvml):
    """A backend whose GPU 1 fails with an unexpected error on every sample."""

    def sample(self, index: int) -> DeviceSample:
        if index == 1:
            raise RuntimeError("driver returned garbage")
        return super().sample(index)


async def test_an_unexpected_failure_on_one_gpu_never_fails_the_scrape(
    sim_node: MakeNode,
) -> None:
    node = sim_node("l4:2;seed=flaky")
    async with serving(FlakyNvml(node.store.path)) as exporter:
        got = await scrape(exporter)
    assert [s.labels["gpu"] for s in got.samples("DCGM_FI_DEV_GPU_TEMP")] == ["0"]
    up = got.samples("kubegpu_exporter_gpu_up", gpu="1")[0]
    assert (up.value, up.labels["err_code"], up.labels["err_msg"]) == (
        0,
        "999",
        "driver returned garbage",
    )


async def test_xid_errors_show_the_last_xid_with_its_code_and_name(sim_node: MakeNode) -> None:
    node = sim_node("h100-80gb:2;seed=xid")
    async with serving(node) as exporter:
        SimControls.of(node).inject_xid(1, 31)
        SimControls.of(node).inject_xid(1, 48)

        async def seen() -> Scrape:
            for _ in range(100):
                got = await scrape(exporter)
                if got.value("DCGM_FI_DEV_XID_ERRORS", gpu="1") == 48:
                    return got
                await asyncio.sleep(0.05)
            raise AssertionError("Xid 48 never showed")

        got = await seen()
    (one,) = got.samples("DCGM_FI_DEV_XID_ERRORS", gpu="1")
    assert list(one.labels)[-2:] == ["err_code", "err_msg"]
    assert (one.labels["err_code"], one.labels["err_msg"]) == ("48", "Double Bit ECC Error")
    (zero,) = got.samples("DCGM_FI_DEV_XID_ERRORS", gpu="0")
    assert (zero.value, zero.labels["err_code"], zero.labels["err_msg"]) == (0, "0", "No Error")


# -- configuration ------------------------------------------------------------------------------
async def test_a_counters_file_selects_metrics_and_labels(sim_node: MakeNode) -> None:
    node = sim_node("h200:1;seed=select")
    counters = parse_counters(
        "# mine\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
        "DCGM_FI_DEV_FB_TOTAL, gauge, Framebuffer total (in MiB).\n"
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0, counter, NVLink lane 0 (skipped: kubegpu cannot read it)\n"
        "DCGM_FI_CUDA_DRIVER_VERSION, label, CUDA\n",
        "mine.csv",
    )
    async with serving(node, counters=counters, no_hostname=True) as exporter:
        got = await scrape(exporter)
    assert {n for n in got.families if n.startswith("DCGM_")} == {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_FB_TOTAL",
    }
    (s,) = got.samples("DCGM_FI_DEV_FB_TOTAL")
    assert s.value == node.device(0).memory_total_mib
    assert list(s.labels)[-2:] == ["modelName", "DCGM_FI_CUDA_DRIVER_VERSION"]  # no Hostname
    assert s.labels["DCGM_FI_CUDA_DRIVER_VERSION"] == "13000"


async def test_readings_are_reused_within_the_collect_interval(sim_node: MakeNode) -> None:
    node = sim_node("l4:1;seed=interval")
    async with serving(node, collect_interval_s=3600) as exporter:
        first = await scrape(exporter)
        SimControls.of(node).start_process(0, pid=5, used_memory_mib=1000)
        again = await scrape(exporter)
    assert first.value("DCGM_FI_DEV_FB_USED") == again.value("DCGM_FI_DEV_FB_USED") == 0


async def test_health_index_and_other_routes(sim_node: MakeNode) -> None:
    node = sim_node("l4:1;seed=routes")
    async with serving(node) as exporter:
        port = exporter.port
        health = await asyncio.to_thread(get, port, "/health")
        index = await asyncio.to_thread(get, port, "/")
        missing = await asyncio.to_thread(get, port, "/nope")
        post = await asyncio.to_thread(get, port, "/metrics", "POST")
        zipped = await asyncio.to_thread(get, port, "/metrics", **{"Accept-Encoding": "gzip"})
    assert (health[0], health[2]) == (200, b"OK")
    assert index[0] == 200 and b"/metrics" in index[2]
    assert missing[0] == 404
    assert post[0] == 405
    assert zipped[1]["Content-Encoding"] == "gzip"
    assert b"DCGM_FI_DEV_GPU_TEMP" in gzip.decompress(zipped[2])


async def test_stop_releases_the_port_and_is_idempotent(sim_node: MakeNode) -> None:
    node = sim_node("l4:1;seed=stop")
    exporter = Exporter(ExporterConfig(address="127.0.0.1:0", hostname="h"), node)
    runner = asyncio.create_task(exporter.run())
    for _ in range(100):
        if exporter.port:
            break
        await asyncio.sleep(0.01)
    port = exporter.port
    assert (await asyncio.to_thread(get, port, "/health"))[0] == 200
    await exporter.stop()
    await exporter.stop()
    await asyncio.wait_for(runner, timeout=5)
    again = Exporter(ExporterConfig(address=f"127.0.0.1:{port}", hostname="h"), node)
    async with again:  # the same port binds again
        assert again.port == port


# -- requests it will not serve: a 4xx, never a dropped connection --------------------------------
def raw(port: int, data: bytes, *, close_write: bool = False, pause_s: float = 0.0) -> bytes:
    """Send `data` over a plain socket and read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        if close_write:
            conn.shutdown(socket.SHUT_WR)
        if pause_s:
            time.sleep(pause_s)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    line = answer.split(b"\r\n", 1)[0]
    assert line.startswith(b"HTTP/1.1 "), answer[:200]
    return int(line.split()[1])


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET /" + b"a" * 9_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"b" * 20_000 + b"\r\n\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\n" + b"X-A: 1\r\n" * 200 + b"\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n", 413),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"\x00\x01\x02\x03\r\n\r\n", 400),
        (b"GET /metrics\r\n\r\n", 400),
        (b"GET /m\xffetrics HTTP/1.1\r\n\r\n", 400),
        (b"GET metrics HTTP/1.1\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET /metrics SPDY/3\r\n\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
    ],
    ids=[
        "long-target",
        "target-over-8k",
        "huge-header",
        "many-headers",
        "huge-body",
        "negative-length",
        "length-digits",
        "chunked",
        "binary",
        "two-parts",
        "not-ascii",
        "relative-target",
        "header-without-colon",
        "not-http",
        "http2",
    ],
)
async def test_a_request_it_will_not_serve_gets_a_4xx_that_says_why(
    sim_node: MakeNode, request_bytes: bytes, status: int
) -> None:
    node = sim_node("l4:1;seed=raw")
    async with serving(node) as exporter:
        answer = await asyncio.to_thread(raw, exporter.port, request_bytes)
        assert status_of(answer) == status
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"Connection: close" in head and body  # says why, in words
        assert len(body) < 200
        assert (await asyncio.to_thread(get, exporter.port, "/health"))[0] == 200  # still up


async def test_an_incomplete_or_slow_request_gets_400_or_408(
    sim_node: MakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "REQUEST_TIMEOUT_S", 0.3)
    node = sim_node("l4:1;seed=slow")
    async with serving(node) as exporter:
        cut = await asyncio.to_thread(
            raw, exporter.port, b"GET /metrics HTTP/1.1\r\nHost: x", close_write=True
        )
        slow = await asyncio.to_thread(raw, exporter.port, b"GET /metrics HTT", pause_s=0.5)
        silent = await asyncio.to_thread(raw, exporter.port, b"", close_write=True)
    assert status_of(cut) == 400
    assert status_of(slow) == 408
    assert silent == b""  # nothing asked, nothing to answer


async def test_a_small_body_is_read_and_ignored(sim_node: MakeNode) -> None:
    node = sim_node("l4:1;seed=body")
    async with serving(node) as exporter:
        answer = await asyncio.to_thread(
            raw, exporter.port, b"GET /health HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
        )
    assert status_of(answer) == 200 and answer.endswith(b"OK")


async def test_gpus_that_cannot_be_read_are_logged_once_not_on_every_scrape(
    sim_node: MakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kubegpu")
    node = sim_node("l4:2;seed=gone")
    async with serving(node) as exporter:
        await scrape(exporter)
        saved = node.store.path.read_bytes()
        node.store.path.unlink()  # the simulated driver lost every GPU
        for _ in range(5):
            got = await scrape(exporter)
            await asyncio.sleep(0.1)
        assert not any(n.startswith("DCGM_") and f.samples for n, f in got.families.items())
        node.store.path.write_bytes(saved)
        back = await scrape(exporter)
        await asyncio.sleep(0.3)  # the XID thread retries after 5 polls
    assert back.value("kubegpu_exporter_gpu_up", gpu="1") == 1
    said = [r.getMessage() for r in caplog.records]
    assert sum("cannot count GPUs" in m for m in said) == 1
    assert sum("cannot read XID events" in m for m in said) == 1
    assert sum("GPUs can be counted again" in m for m in said) == 1
    assert not [r for r in caplog.records if r.exc_info]
