"""`kubegpu_mig_free_instances` (issue 30): per node and profile, how many more MIG
instances the free slices could still hold; and the headroom rules behind it."""

from __future__ import annotations

from pathlib import Path

from kubegpu.catalog import get_model
from kubegpu.catalog.placement import PlacedInstance
from kubegpu.exporter.server import Exporter, ExporterConfig
from kubegpu.mig.headroom import fits_after_repack, free_slices, more_instances
from kubegpu.nvml.sim import SimNvml

H200 = get_model("h200-nvl")
assert H200.mig is not None
ONE_G = H200.mig.profile("1g.18gb")


def test_two_small_instances_in_the_wrong_places_leave_no_room_for_a_3g() -> None:
    placed = [PlacedInstance(0, ONE_G), PlacedInstance(4, ONE_G)]
    room = more_instances(H200, placed)
    assert room["1g.18gb"] == 5 and room["3g.71gb"] == 0 and room["7g.141gb"] == 0
    assert free_slices(H200, placed) == 6
    # ...though moving them would make room: a repack, not more hardware
    assert fits_after_repack(H200, placed, "3g.71gb")
    assert not fits_after_repack(H200, placed, "7g.141gb")


def test_an_empty_gpu_holds_each_profile_up_to_its_count() -> None:
    room = more_instances(H200, [])
    assert room["1g.18gb"] == 7 and room["3g.71gb"] == 2 and room["7g.141gb"] == 1


def metric_lines(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("kubegpu_mig_free_instances{"):
            labels, value = line.rsplit(" ", 1)
            profile = labels.split('profile="')[1].split('"')[0]
            out[profile] = float(value)
    return out


def test_the_exporter_sums_the_headroom_of_the_nodes_mig_gpus(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "node.json", "h200-nvl:3")
    for i in (0, 1):
        nvml.set_mig_mode(i, True)
        nvml.reset(i)
    nvml.create_gpu_instance(0, ONE_G.id, 0)
    nvml.create_gpu_instance(0, ONE_G.id, 4)
    exporter = Exporter(ExporterConfig(hostname="gpu-1"), nvml)
    series = metric_lines(exporter.scrape().decode())
    # GPU 0: five more 1g, no 3g; GPU 1 (MIG on, empty): seven and two; GPU 2 has no MIG
    assert series["1g.18gb"] == 12
    assert series["3g.71gb"] == 2
    assert series["7g.141gb"] == 1
    assert 'Hostname="gpu-1"' in exporter.scrape().decode()
