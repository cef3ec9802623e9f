"""GetPreferredAllocation: topology-aligned whole GPUs, and replicas spread or packed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kubegpu.nvml.sim import SimNvml
from kubegpu.nvml.types import GpuLink, GpuTopology, TopologyLevel
from kubegpu.sharing.config import parse_config
from kubegpu.sharing.devices import Device, GpuFacts, MigFacts, advertise, physical_id
from kubegpu.sharing.preferred import (
    PreferenceError,
    is_whole_gpu_resource,
    link_score,
    pair_scores,
    preferred_gpus,
    preferred_shared,
)


def sim_scores(tmp_path: Path, spec: str) -> tuple[dict[str, int], dict[tuple[int, int], int]]:
    nvml = SimNvml.create(tmp_path / "gpus.json", spec)
    topologies = [nvml.topology(i) for i in range(nvml.device_count())]
    gpu_of = {f"GPU-{t.index}": t.index for t in topologies}
    return gpu_of, pair_scores(topologies)


@pytest.mark.parametrize(
    ("link", "score"),
    [
        (GpuLink(1, TopologyLevel.SYSTEM), 10),
        (GpuLink(1, TopologyLevel.NODE), 20),
        (GpuLink(1, TopologyLevel.HOSTBRIDGE), 30),
        (GpuLink(1, TopologyLevel.MULTIPLE), 40),
        (GpuLink(1, TopologyLevel.SINGLE), 50),
        (GpuLink(1, TopologyLevel.INTERNAL), 60),
        (GpuLink(1, TopologyLevel.NODE, nvlinks=18), 1820),
    ],
)
def test_link_scores(link: GpuLink, score: int) -> None:
    assert link_score(link) == score


def test_the_simulated_topology_nvlinks_sxm_class_gpus_and_splits_pcie_cards_by_cpu(
    tmp_path: Path,
) -> None:
    h200 = SimNvml.create(tmp_path / "a.json", "h200-nvl:8")
    t0 = h200.topology(0)
    assert (t0.minor_number, t0.numa_node) == (0, 0)
    assert h200.topology(7).numa_node == 1
    assert {link.peer: link.nvlinks for link in t0.links} == dict.fromkeys(range(1, 8), 18)
    assert {link.peer: link.level for link in t0.links} == {
        **dict.fromkeys((1, 2, 3), TopologyLevel.NODE),
        **dict.fromkeys((4, 5, 6, 7), TopologyLevel.SYSTEM),
    }
    l4 = SimNvml.create(tmp_path / "b.json", "l4:4")
    assert [(link.peer, link.level, link.nvlinks) for link in l4.topology(1).links] == [
        (0, TopologyLevel.NODE, 0),
        (2, TopologyLevel.SYSTEM, 0),
        (3, TopologyLevel.SYSTEM, 0),
    ]
    mixed = SimNvml.create(tmp_path / "c.json", "h200:1,l4:1")
    assert mixed.topology(0).links == (GpuLink(1, TopologyLevel.SYSTEM, 0),)


@pytest.mark.parametrize(
    ("spec", "available", "required", "size", "expected"),
    [
        # PCIe cards: a pair on one CPU, not across
        ("l4:4", [0, 1, 2, 3], [], 2, [0, 1]),
        ("l4:4", [1, 2, 3], [], 2, [2, 3]),
        # one GPU: take the one whose leaving keeps the others together
        ("l4:4", [0, 1, 2], [], 1, [2]),
        ("l4:4", [0, 2, 3], [], 1, [0]),
        # required GPUs are always in, the rest fits around them
        ("l4:4", [0, 1, 2, 3], [3], 2, [3, 2]),
        # NVLink node: half the GPUs come from one CPU's side
        ("h200-nvl:8", list(range(8)), [], 4, [0, 1, 2, 3]),
        ("h200-nvl:8", [1, 2, 4, 5, 6, 7], [], 4, [4, 5, 6, 7]),
        ("h200-nvl:8", list(range(8)), [], 8, list(range(8))),
        # impossible or empty requests get no preference
        ("l4:4", [0, 1], [], 3, []),
        ("l4:4", [0, 1, 2], [], 0, []),
        ("l4:4", [0, 1, 2], [0, 1], 1, []),
    ],
)
def test_whole_gpus_follow_the_topology(
    tmp_path: Path,
    spec: str,
    available: list[int],
    required: list[int],
    size: int,
    expected: list[int],
) -> None:
    gpu_of, scores = sim_scores(tmp_path, spec)
    ids = preferred_gpus(
        gpu_of, [f"GPU-{i}" for i in available], [f"GPU-{i}" for i in required], size, scores
    )
    assert ids == [f"GPU-{i}" for i in expected]


def test_pcie_switches_group_gpus_below_one_switch() -> None:
    # 0-1 and 2-3 share a switch; everything else meets at the host bridge
    def topo(i: int) -> GpuTopology:
        links = tuple(
            GpuLink(
                p,
                TopologyLevel.SINGLE if p // 2 == i // 2 else TopologyLevel.HOSTBRIDGE,
            )
            for p in range(4)
            if p != i
        )
        return GpuTopology(i, i, 0, links)

    scores = pair_scores(topo(i) for i in range(4))
    gpu_of = {f"GPU-{i}": i for i in range(4)}
    assert preferred_gpus(gpu_of, ["GPU-0", "GPU-2", "GPU-3"], [], 2, scores) == ["GPU-2", "GPU-3"]


def test_many_gpus_use_the_greedy_search_and_still_honour_the_request() -> None:
    # 16 GPUs in two NVLink islands of 8: choosing 8 has too many sets to try them all
    topologies = [
        GpuTopology(
            i,
            i,
            i // 8,
            tuple(
                GpuLink(
                    p,
                    TopologyLevel.NODE if p // 8 == i // 8 else TopologyLevel.SYSTEM,
                    12 if p // 8 == i // 8 else 0,
                )
                for p in range(16)
                if p != i
            ),
        )
        for i in range(16)
    ]
    scores = pair_scores(topologies)
    gpu_of = {f"GPU-{i}": i for i in range(16)}
    ids = preferred_gpus(gpu_of, list(gpu_of), ["GPU-12"], 8, scores)
    assert len(ids) == 8 and ids[0] == "GPU-12"
    assert {gpu_of[i] // 8 for i in ids} == {1}


# -- shared devices ------------------------------------------------------------------------


def _gpus(n: int) -> list[GpuFacts]:
    return [GpuFacts(i, f"GPU-{i}", "NVIDIA L4", 23034, (8, 9), False, False) for i in range(n)]


def replicas(n: int, per: int) -> list[Device]:
    text = f"sharing: {{timeSlicing: {{resources: [{{name: gpu, replicas: {per}}}]}}}}"
    return advertise(_gpus(n), parse_config(text)).resources["nvidia.com/gpu"]


def gpus_of(ids: list[str]) -> list[str]:
    return [physical_id(i) for i in ids]


def test_distributed_spreads_a_request_over_distinct_gpus() -> None:
    devices = replicas(4, 4)
    ids = preferred_shared(devices, [d.id for d in devices], [], 4)
    assert sorted(gpus_of(ids)) == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]


def test_distributed_prefers_the_least_used_gpu() -> None:
    devices = replicas(3, 4)
    in_use = {"GPU-0::0", "GPU-0::1", "GPU-1::0"}  # GPU-0 gave out 2, GPU-1 1, GPU-2 none
    available = [d.id for d in devices if d.id not in in_use]
    assert gpus_of(preferred_shared(devices, available, [], 2)) == ["GPU-2", "GPU-1"]


def test_packed_fills_the_most_used_gpu_first() -> None:
    devices = replicas(3, 4)
    in_use = {"GPU-1::0"}
    available = [d.id for d in devices if d.id not in in_use]
    ids = preferred_shared(devices, available, [], 3, policy="packed")
    assert gpus_of(ids) == ["GPU-1", "GPU-1", "GPU-1"]
    # on an idle node packed still keeps to one GPU
    fresh = preferred_shared(devices, [d.id for d in devices], [], 2, policy="packed")
    assert gpus_of(fresh) == ["GPU-0", "GPU-0"]


def test_required_devices_come_first_and_count_as_picked() -> None:
    devices = replicas(2, 4)
    ids = preferred_shared(devices, [d.id for d in devices], ["GPU-0::3"], 2)
    assert ids[0] == "GPU-0::3"
    assert gpus_of(ids) == ["GPU-0", "GPU-1"]


def test_too_few_available_devices_is_an_error() -> None:
    devices = replicas(1, 2)
    with pytest.raises(PreferenceError, match="not enough available devices"):
        preferred_shared(devices, ["GPU-0::0"], [], 2)


def test_mig_devices_spread_over_their_parent_gpus() -> None:
    def mig(i: int, m: int) -> MigFacts:
        return MigFacts(m, f"MIG-{i}-{m}", "1g.18gb", m + 7, 0, True, 16384, 16, 1, 1)

    gpus = [
        GpuFacts(
            i,
            f"GPU-{i}",
            "NVIDIA H200 NVL",
            143771,
            (9, 0),
            True,
            True,
            tuple(mig(i, m) for m in range(7)),
        )
        for i in range(2)
    ]
    devices = advertise(gpus, parse_config("flags: {migStrategy: mixed}")).resources[
        "nvidia.com/mig-1g.18gb"
    ]
    used = {"MIG-0-0", "MIG-0-1"}
    ids = preferred_shared(devices, [d.id for d in devices if d.id not in used], [], 3)
    assert Counter(i.split("-")[1] for i in ids) == {"1": 2, "0": 1}


def test_which_resources_use_the_topology() -> None:
    assert is_whole_gpu_resource(advertise(_gpus(2), parse_config("")).resources["nvidia.com/gpu"])
    assert not is_whole_gpu_resource(replicas(2, 2))
