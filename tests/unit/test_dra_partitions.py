"""Dynamic MIG's pool: every placement a partitionable device consuming its share of its
GPU's counters, static MIG devices kept out of the counters, and Kubernetes 1.35's slice
layout within the API's limits."""

from __future__ import annotations

from kubegpu.dra.partitions import (
    MAX_COUNTER_SETS_PER_SLICE,
    counter_set_name,
    partitioned_pool,
    partitioned_slices,
)
from kubegpu.dra.slices import DraGpu, DraMig, GiProfile, MigEngines, NodeGpus

# an H100 80GB's GPU-instance profiles, as the simulated GPU reports them
PROFILES = (
    GiProfile(19, "1g.10gb", 9984, 16, MigEngines(1, 1, 0, 1, 0), tuple((i, 1) for i in range(7))),
    GiProfile(
        20, "1g.10gb+me", 9984, 16, MigEngines(1, 1, 0, 1, 1), tuple((i, 1) for i in range(7))
    ),
    GiProfile(14, "2g.20gb", 20096, 32, MigEngines(2, 2, 0, 2, 0), ((0, 2), (2, 2), (4, 2))),
    GiProfile(9, "3g.40gb", 40448, 60, MigEngines(3, 3, 0, 3, 0), ((0, 4), (4, 4))),
    GiProfile(0, "7g.80gb", 81152, 132, MigEngines(8, 7, 0, 7, 1), ((0, 8),)),
)


def _gpu(minor: int, mig: bool = True, migs: tuple[DraMig, ...] = ()) -> DraGpu:
    return DraGpu(
        index=minor,
        minor=minor,
        uuid=f"GPU-{minor}",
        product_name="NVIDIA H100 80GB HBM3",
        architecture="Hopper",
        compute_capability=(9, 0),
        pci_bus_id=f"0:{minor}:0.0",
        memory_mib=81559,
        mig_enabled=mig,
        migs=migs,
        gi_profiles=PROFILES if mig else (),
    )


def _node(*gpus: DraGpu) -> NodeGpus:
    return NodeGpus("580.82.07", (13, 0), gpus)


def test_every_placement_is_a_device_that_consumes_its_counters() -> None:
    pool = partitioned_pool(_node(_gpu(0)), created=())
    names = [d.name for d in pool.devices]
    assert len(names) == 7 + 7 + 3 + 2 + 1
    assert "gpu-0-mig-1g10gb-19-6" in names
    assert "gpu-0-mig-1g10gbme-20-0" in names
    assert "gpu-0-mig-7g80gb-0-0" in names
    dev = next(d for d in pool.devices if d.name == "gpu-0-mig-3g40gb-9-4").to_json()
    assert "uuid" not in dev["attributes"], "a dynamic device has no UUID until it exists"
    assert dev["attributes"]["parentUUID"] == {"string": "GPU-0"}
    assert dev["attributes"]["profile"] == {"string": "3g.40gb"}
    assert dev["consumesCounters"] == [
        {
            "counterSet": "gpu-0-counter-set",
            "counters": {
                "multiprocessors": {"value": "60"},
                "copy-engines": {"value": "3"},
                "decoders": {"value": "3"},
                "encoders": {"value": "0"},
                "jpeg-engines": {"value": "3"},
                "ofa-engines": {"value": "0"},
                "memory": {"value": "40448Mi"},
                **{f"memory-slice-{i}": {"value": "1"} for i in range(4, 8)},
            },
        }
    ]
    assert {f"memorySlice{i}" for i in range(4, 8)} <= set(dev["capacity"])


def test_the_counter_set_is_the_whole_gpu() -> None:
    (cs,) = partitioned_pool(_node(_gpu(0)), created=()).counter_sets
    assert cs.name == counter_set_name(0) == "gpu-0-counter-set"
    assert dict(cs.counters) == {
        "multiprocessors": "132",
        "copy-engines": "8",
        "decoders": "7",
        "encoders": "0",
        "jpeg-engines": "7",
        "ofa-engines": "1",
        "memory": "81152Mi",
        **{f"memory-slice-{i}": "1" for i in range(8)},
    }
    assert len(cs.counters) <= 32


def test_static_mig_devices_take_their_slices_and_engines_off_the_counters() -> None:
    static = DraMig("MIG-s", "3g.40gb", 9, 0, 4, 40448, 60, MigEngines(3, 3, 0, 3, 0))
    pool = partitioned_pool(_node(_gpu(0, migs=(static,))), created=())
    by_name = {d.name: d for d in pool.devices}
    assert by_name["gpu-0-mig-3g40gb-9-0"].uuid == "MIG-s"
    assert not by_name["gpu-0-mig-3g40gb-9-0"].dynamic
    # nothing overlapping slices 0-3 is offered, the rest is
    dynamic = {n for n, d in by_name.items() if d.dynamic}
    assert dynamic == {
        "gpu-0-mig-1g10gb-19-4",
        "gpu-0-mig-1g10gb-19-5",
        "gpu-0-mig-1g10gb-19-6",
        "gpu-0-mig-1g10gbme-20-4",
        "gpu-0-mig-1g10gbme-20-5",
        "gpu-0-mig-1g10gbme-20-6",
        "gpu-0-mig-2g20gb-14-4",
        "gpu-0-mig-3g40gb-9-4",
    }
    counters = dict(pool.counter_sets[0].counters)
    assert counters["multiprocessors"] == "72"
    assert counters["memory-slice-0"] == "0"
    assert counters["memory-slice-4"] == "1"


def test_a_mig_device_created_for_a_claim_stays_a_dynamic_device() -> None:
    made = DraMig("MIG-d", "1g.10gb", 19, 2, 1, 9984, 16, MigEngines(1, 1, 0, 1, 0))
    pool = partitioned_pool(_node(_gpu(0, migs=(made,))), created={(0, 19, 2)})
    dev = next(d for d in pool.devices if d.name == "gpu-0-mig-1g10gb-19-2")
    assert dev.dynamic
    assert dict(pool.counter_sets[0].counters)["memory-slice-2"] == "1"


def test_gpus_without_mig_stay_whole_gpus() -> None:
    pool = partitioned_pool(_node(_gpu(0), _gpu(1, mig=False)), created=())
    whole = next(d for d in pool.devices if d.name == "gpu-1")
    assert not whole.counter_set
    assert [c.name for c in pool.counter_sets] == ["gpu-0-counter-set"]


def test_slices_follow_kubernetes_1_35s_layout() -> None:
    node = _node(*(_gpu(i) for i in range(9)), _gpu(9, mig=False))
    pool = partitioned_pool(node, created=())
    slices = partitioned_slices("n", pool, 4)
    specs = [s["spec"] for s in slices]
    # counter sets first (at most 8 per slice), never next to devices
    assert [len(s.get("sharedCounters", [])) for s in specs[:2]] == [MAX_COUNTER_SETS_PER_SLICE, 1]
    assert all("devices" not in s for s in specs[:2])
    assert all("sharedCounters" not in s for s in specs[2:])
    # one devices slice per MIG GPU, then the whole GPUs
    assert len(specs) == 2 + 9 + 1
    assert {d["name"][:6] for d in specs[2]["devices"]} == {"gpu-0-"}
    assert [d["name"] for d in specs[-1]["devices"]] == ["gpu-9"]
    for s in specs:
        assert s["pool"] == {"name": "n", "generation": 4, "resourceSliceCount": len(specs)}
        assert s["nodeName"] == "n"
        assert len(s.get("devices", [])) <= 64
        for d in s.get("devices", []):
            assert len(d["attributes"]) + len(d["capacity"]) <= 32
