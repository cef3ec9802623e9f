"""NVLink traffic and vGPU licence state: the last two of DCGM exporter's default counters.

`DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` comes from NVML's NVLink payload counters (the
simulated GPUs move data over their links while busy, within the links' bandwidth; a GPU
without NVLink reports 0), and `DCGM_FI_DEV_VGPU_LICENSE_STATUS` is 0, as on bare metal.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from fake_pynvml import FakeNvmlLibrary
from prometheus_client.parser import text_string_to_metric_families

from kubegpu.catalog import get_model
from kubegpu.exporter import Exporter, ExporterConfig
from kubegpu.nvml.real import RealNvml
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.nvml.sim.telemetry import NVLINK_LINK_GBPS_DEFAULT
from kubegpu.nvml.types import NvLinkThroughput

T0 = 1_800_000_000.0
KIB = 1024


def pinned(node: SimNvml, at: float) -> SimNvml:
    node.clock = lambda: at
    return node


def test_a_busy_nvlinked_gpu_moves_data_within_its_links_bandwidth(tmp_path: Path) -> None:
    node = pinned(SimNvml.create(tmp_path / "n.json", "h200:2;seed=nvlink"), T0)
    SimControls.of(node).set_busy({node.device(0).uuid: 1})
    start = node.nvlink_throughput(0)
    pinned(node, T0 + 10)
    later = node.nvlink_throughput(0)
    assert later.active_links == 18
    moved = later.total_kib - start.total_kib
    peak = 18 * 2 * NVLINK_LINK_GBPS_DEFAULT * 1e9 / KIB * 10  # both directions, 10 s
    assert 0 < moved < peak
    assert later.tx_kib > start.tx_kib and later.rx_kib > start.rx_kib
    assert node.nvlink_throughput(1) == NvLinkThroughput(18, 0, 0)  # its idle peer


def test_the_counter_keeps_its_total_when_the_gpu_goes_idle(tmp_path: Path) -> None:
    node = pinned(SimNvml.create(tmp_path / "n.json", "h100-80gb:2;seed=idle"), T0)
    lab = SimControls.of(node)
    lab.set_busy({node.device(1).uuid: 1})
    pinned(node, T0 + 5)
    lab.set_busy({})
    booked = node.nvlink_throughput(1)
    pinned(node, T0 + 60)
    assert node.nvlink_throughput(1) == booked
    assert booked.total_kib > 0


def test_a_gpu_with_no_peer_or_no_nvlink_has_no_active_link(tmp_path: Path) -> None:
    lone = SimNvml.create(tmp_path / "a.json", "h200:1,l4:1")
    assert lone.nvlink_throughput(0) == NvLinkThroughput(0, 0, 0)  # SXM, but alone
    assert lone.nvlink_throughput(1) == NvLinkThroughput(0, 0, 0)  # PCIe card


def test_mig_devices_do_not_use_nvlink(tmp_path: Path) -> None:
    node = pinned(SimNvml.create(tmp_path / "n.json", "h100-80gb:2;seed=mig"), T0)
    mig = get_model("h100-80gb").mig
    assert mig is not None
    node.set_mig_mode(0, True)
    gi = node.create_gpu_instance(0, mig.profile("7g.80gb").id, 0)
    ci = node.create_compute_instance(0, gi.id, 0)
    (device,) = [d for d in node.mig_devices(0) if d.compute_instance_id == ci.id]
    SimControls.of(node).set_busy({device.uuid: 1})
    before = node.nvlink_throughput(0)
    pinned(node, T0 + 30)
    assert node.nvlink_throughput(0) == before


def test_the_real_backend_sums_each_active_links_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    h100 = get_model("h100-80gb")
    fake = FakeNvmlLibrary([h100, h100], nvlinks={0: 18, 1: 18})
    fake.gpus[0].nvlink_kib = (1_000_003, 2_000_017)
    fake.install(monkeypatch)
    with RealNvml() as nvml:
        assert nvml.nvlink_throughput(0) == NvLinkThroughput(18, 1_000_003, 2_000_017)


async def test_the_exporter_serves_nvlink_traffic_and_the_vgpu_licence_state(
    tmp_path: Path,
) -> None:
    node = pinned(SimNvml.create(tmp_path / "n.json", "h200:2,l4:1;seed=exp"), T0)
    SimControls.of(node).set_busy({node.device(0).uuid: 1})
    pinned(node, T0 + 20)
    config = ExporterConfig(address="127.0.0.1:0", collect_interval_s=0.0, hostname="n")
    async with Exporter(config, node) as exporter:
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url).read().decode())
    families = {f.name: f for f in text_string_to_metric_families(text)}
    nvlink = families["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
    assert nvlink.type == "counter"
    by_gpu = {s.labels["gpu"]: s.value for s in nvlink.samples}
    assert by_gpu["0"] == node.nvlink_throughput(0).total_kib > 0
    assert by_gpu["1"] == 0 and by_gpu["2"] == 0  # idle peer; a PCIe L4
    licence = families["DCGM_FI_DEV_VGPU_LICENSE_STATUS"]
    assert {s.labels["gpu"]: s.value for s in licence.samples} == {"0": 0, "1": 0, "2": 0}
