"""What a node advertises: every MIG strategy, every sharing form, and every refusal."""

from __future__ import annotations

import pytest

from kubegpu.sharing.config import PluginConfig, parse_config
from kubegpu.sharing.devices import (
    GpuFacts,
    MigFacts,
    StrategyError,
    advertise,
    mig_resource_name,
    physical_id,
)


def gpu(
    index: int,
    product: str = "NVIDIA L4",
    *,
    mig: tuple[str, ...] | None = None,
    cc: tuple[int, int] = (8, 9),
    memory: int = 23034,
) -> GpuFacts:
    """A GPU; `mig` lists MIG device profiles (MIG enabled), None for MIG disabled."""
    devices = tuple(
        MigFacts(
            index=i,
            uuid=f"MIG-{index}-{i}",
            profile=p,
            gi=i + 1,
            ci=0,
            full="c." not in p,
            memory_mib=18000,
            multiprocessors=16,
            gi_slices=1,
            ci_slices=1,
        )
        for i, p in enumerate(mig or ())
    )
    return GpuFacts(
        index=index,
        uuid=f"GPU-{index}",
        product=product,
        memory_mib=memory,
        compute_capability=cc,
        mig_capable=mig is not None or "H200" in product,
        mig_enabled=mig is not None,
        mig_devices=devices,
    )


def h200(index: int, mig: tuple[str, ...] | None = None) -> GpuFacts:
    return gpu(index, "NVIDIA H200 NVL", mig=mig, cc=(9, 0), memory=143771)


L4X4 = [gpu(i) for i in range(4)]
SEVEN = ("1g.18gb",) * 7


def config(text: str = "", strategy: str = "none") -> PluginConfig:
    return parse_config(f"flags: {{migStrategy: {strategy}, mpsRoot: /run/nvidia/mps}}\n{text}")


def ts(*entries: str, rename_by_default: bool = False) -> str:
    body = "\n".join(f"    - {e}" for e in entries)
    return f"sharing:\n  timeSlicing:\n    renameByDefault: {str(rename_by_default).lower()}\n    resources:\n{body}"


def mps(*entries: str) -> str:
    body = "\n".join(f"    - {e}" for e in entries)
    return f"sharing:\n  mps:\n    resources:\n{body}"


def counts(gpus: list[GpuFacts], text: str = "", strategy: str = "none") -> dict[str, int]:
    return advertise(gpus, config(text, strategy)).counts()


# -- MIG strategies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "strategy", "expected"),
    [
        (L4X4, "none", {"nvidia.com/gpu": 4}),
        (L4X4, "single", {"nvidia.com/gpu": 4}),  # no GPU has MIG: whole GPUs
        (L4X4, "mixed", {"nvidia.com/gpu": 4}),
        # none: a MIG-enabled GPU is still advertised whole
        ([h200(0, SEVEN), h200(1)], "none", {"nvidia.com/gpu": 2}),
        # single: MIG devices under nvidia.com/gpu
        ([h200(0, SEVEN), h200(1, SEVEN)], "single", {"nvidia.com/gpu": 14}),
        # mixed: each profile its own resource, non-MIG GPUs stay whole
        (
            [h200(0, ("1g.18gb", "1g.18gb", "3g.71gb")), h200(1)],
            "mixed",
            {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.18gb": 2, "nvidia.com/mig-3g.71gb": 1},
        ),
        # mixed: a MIG-enabled GPU without MIG devices contributes nothing
        ([h200(0, ()), h200(1)], "mixed", {"nvidia.com/gpu": 1}),
        # mixed: only profiles whose compute instance spans the GPU instance (C == G)
        ([h200(0, ("1c.2g.35gb", "2g.35gb"))], "mixed", {"nvidia.com/mig-2g.35gb": 1}),
        # mixed: +me variants are their own resource, '+' becomes '.'
        (
            [h200(0, ("1g.18gb", "1g.18gb+me"))],
            "mixed",
            {"nvidia.com/mig-1g.18gb": 1, "nvidia.com/mig-1g.18gb.me": 1},
        ),
        # 8 H200 NVL, 7 x 1g.18gb each: the node
        ([h200(i, SEVEN) for i in range(8)], "mixed", {"nvidia.com/mig-1g.18gb": 56}),
    ],
)
def test_mig_strategies(gpus: list[GpuFacts], strategy: str, expected: dict[str, int]) -> None:
    assert counts(gpus, strategy=strategy) == expected


@pytest.mark.parametrize(
    ("gpus", "error"),
    [
        (
            [h200(0, SEVEN), h200(1)],
            "all devices on the node must be configured with the same migEnabled value",
        ),
        ([h200(0, SEVEN), h200(1, ())], "device 1 has no MIG devices configured"),
        (
            [h200(0, SEVEN), h200(1, ("3g.71gb",))],
            "more than one MIG device type present on node: 1g.18gb, 3g.71gb",
        ),
    ],
)
def test_single_strategy_refusals(gpus: list[GpuFacts], error: str) -> None:
    with pytest.raises(StrategyError, match=error):
        counts(gpus, strategy="single")


def test_device_ids_and_indexes() -> None:
    adv = advertise([h200(0, ("1g.18gb",)), h200(1)], config(strategy="mixed"))
    (whole,) = adv.resources["nvidia.com/gpu"]
    (mig,) = adv.resources["nvidia.com/mig-1g.18gb"]
    assert (whole.id, whole.index, whole.uuid, whole.gpu, whole.mig) == (
        "GPU-1",
        "1",
        "GPU-1",
        1,
        None,
    )
    assert (mig.id, mig.index, mig.uuid, mig.gpu) == ("MIG-0-0", "0:0", "MIG-0-0", 0)
    assert mig.mig is not None and mig.mig.profile == "1g.18gb"
    assert not whole.is_replica and not mig.is_replica


@pytest.mark.parametrize(
    ("profile", "name"),
    [
        ("1g.10gb", "nvidia.com/mig-1g.10gb"),
        ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me"),
        ("1g.24gb+me.all", "nvidia.com/mig-1g.24gb.me.all"),
        ("1g.24gb+gfx", "nvidia.com/mig-1g.24gb.gfx"),
        ("1g.24gb-me", "nvidia.com/mig-1g.24gb-me"),
    ],
)
def test_mig_resource_names(profile: str, name: str) -> None:
    assert mig_resource_name(profile) == name


def test_resource_patterns_name_gpus_and_refuse_unmatched_ones() -> None:
    text = "resources:\n  gpus:\n    - {pattern: '*L4*', name: l4}\n    - {pattern: '*H200*', name: h200}"
    assert counts([gpu(0), h200(1)], text) == {"nvidia.com/h200": 1, "nvidia.com/l4": 1}
    only_l4 = "resources:\n  gpus:\n    - {pattern: '*L4*', name: l4}"
    with pytest.raises(StrategyError, match="GPU name 'NVIDIA H200 NVL' does not match"):
        counts([gpu(0), h200(1)], only_l4)
    mig = "resources:\n  mig:\n    - {pattern: '1g.*', name: small}"
    assert counts([h200(0, SEVEN)], mig, "mixed") == {"nvidia.com/small": 7}


@pytest.mark.parametrize(
    ("gpus", "resources", "error"),
    [
        # a wildcard the loader cannot judge: on this node it gathers two MIG profiles
        (
            [h200(0, ("1g.18gb", "1g.18gb+me"))],
            "mig: [{pattern: '1g.*', name: small}]",
            "nvidia.com/small would advertise MIG 1g.18gb and MIG 1g.18gb[+]me devices",
        ),
        # whole GPUs and MIG devices through a wildcard GPU name match
        (
            [h200(0, ("1g.18gb",)), gpu(1)],
            "mig: [{pattern: '*', name: any}]\n  gpus: [{pattern: '*', name: any-gpu}]",
            None,
        ),
    ],
)
def test_one_resource_name_carries_one_kind_of_device(
    gpus: list[GpuFacts], resources: str, error: str | None
) -> None:
    text = f"resources:\n  {resources}"
    if error is None:
        assert counts(gpus, text, "mixed") == {"nvidia.com/any": 1, "nvidia.com/any-gpu": 1}
        return
    with pytest.raises(StrategyError, match=error):
        counts(gpus, text, "mixed")


# -- time-slicing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "strategy", "sharing", "expected"),
    [
        (L4X4, "none", ts("{name: gpu, replicas: 4}"), {"nvidia.com/gpu": 16}),
        (
            L4X4,
            "none",
            ts("{name: gpu, replicas: 4}", rename_by_default=True),
            {"nvidia.com/gpu.shared": 16},
        ),
        (
            L4X4,
            "none",
            ts("{name: gpu, rename: l4-shared, replicas: 3}"),
            {"nvidia.com/l4-shared": 12},
        ),
        # subsets are honoured (upstream resets them to all)
        (L4X4, "none", ts("{name: gpu, replicas: 4, devices: 2}"), {"nvidia.com/gpu": 10}),
        (
            L4X4,
            "none",
            ts("{name: gpu, replicas: 4, devices: [0, '3']}", rename_by_default=True),
            {"nvidia.com/gpu": 2, "nvidia.com/gpu.shared": 8},
        ),
        (
            L4X4,
            "none",
            ts("{name: gpu, replicas: 2, devices: [GPU-2]}"),
            {"nvidia.com/gpu": 5},
        ),
        # an entry for a resource this node does not have is ignored (the config is valid:
        # other nodes under mixed have it; under none it is refused, test_sharing_config)
        (L4X4, "mixed", ts("{name: mig-1g.18gb, replicas: 4}"), {"nvidia.com/gpu": 4}),
        # MIG devices can be time-sliced too, per resource
        (
            [h200(0, ("1g.18gb", "1g.18gb", "3g.71gb"))],
            "mixed",
            ts("{name: mig-1g.18gb, replicas: 3}"),
            {"nvidia.com/mig-1g.18gb": 6, "nvidia.com/mig-3g.71gb": 1},
        ),
        (
            [h200(0, SEVEN)],
            "mixed",
            ts("{name: mig-1g.18gb, replicas: 2, devices: ['0:1', MIG-0-6]}"),
            {"nvidia.com/mig-1g.18gb": 9},
        ),
    ],
)
def test_time_slicing(
    gpus: list[GpuFacts], strategy: str, sharing: str, expected: dict[str, int]
) -> None:
    assert counts(gpus, sharing, strategy) == expected


def test_replica_ids_name_their_gpu_and_carry_the_replica_count() -> None:
    adv = advertise(L4X4[:2], config(ts("{name: gpu, replicas: 3}")))
    devices = adv.resources["nvidia.com/gpu"]
    assert [d.id for d in devices] == [
        "GPU-0::0",
        "GPU-0::1",
        "GPU-0::2",
        "GPU-1::0",
        "GPU-1::1",
        "GPU-1::2",
    ]
    assert {physical_id(d.id) for d in devices} == {"GPU-0", "GPU-1"}
    assert all(d.is_replica and d.replicas == 3 for d in devices)
    assert adv.replicas == {"nvidia.com/gpu": 3}


def test_a_subset_keeps_the_others_whole_under_the_same_name() -> None:
    adv = advertise(L4X4, config(ts("{name: gpu, replicas: 2, devices: [1]}")))
    ids = [d.id for d in adv.resources["nvidia.com/gpu"]]
    assert ids == ["GPU-0", "GPU-2", "GPU-3", "GPU-1::0", "GPU-1::1"]


@pytest.mark.parametrize(
    ("gpus", "strategy", "sharing", "error"),
    [
        (
            L4X4,
            "none",
            ts("{name: gpu, replicas: 2, devices: 5}"),
            "requested 5 devices to be replicated, but only 4 devices available",
        ),
        (
            L4X4,
            "none",
            ts("{name: gpu, replicas: 2, devices: [7]}"),
            "device 7 is not one of this resource's devices",
        ),
        (
            L4X4,
            "none",
            ts("{name: gpu, replicas: 2, devices: [MIG-0-0]}"),
            "device 'MIG-0-0' is not one of",
        ),
        # renames onto an advertised name, or two entries onto one name, are refused
        # when the config is read: test_sharing_config.test_renames_that_make_names_collide
    ],
)
def test_time_slicing_refusals(
    gpus: list[GpuFacts], strategy: str, sharing: str, error: str
) -> None:
    with pytest.raises(StrategyError, match=error):
        counts(gpus, sharing, strategy)


# -- MPS ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "strategy", "sharing", "expected"),
    [
        (L4X4, "none", mps("{name: gpu, replicas: 4}"), {"nvidia.com/gpu": 16}),
        (L4X4, "none", mps("{name: gpu, replicas: 48}"), {"nvidia.com/gpu": 192}),
        (
            [gpu(0, cc=(7, 0)), gpu(1, cc=(7, 0))],
            "none",
            mps("{name: gpu, replicas: 16}"),
            {"nvidia.com/gpu": 32},
        ),
        # a MIG-enabled GPU left out of the MPS subset does not block MPS on the others
        (
            [h200(0, SEVEN), h200(1)],
            "none",
            mps("{name: gpu, replicas: 2, devices: [1]}"),
            {"nvidia.com/gpu": 3},
        ),
        # GPUs missing from the list (one fell off the bus) do not confuse the checks
        ([gpu(1), gpu(3)], "none", mps("{name: gpu, replicas: 2}"), {"nvidia.com/gpu": 4}),
    ],
)
def test_mps(gpus: list[GpuFacts], strategy: str, sharing: str, expected: dict[str, int]) -> None:
    assert counts(gpus, sharing, strategy) == expected


@pytest.mark.parametrize(
    ("gpus", "strategy", "sharing", "error"),
    [
        (
            [h200(0, SEVEN), h200(1, SEVEN)],
            "single",
            mps("{name: gpu, replicas: 2}"),
            "sharing using MPS is not supported for MIG devices",
        ),
        (
            [h200(0, SEVEN), h200(1)],
            "none",
            mps("{name: gpu, replicas: 2}"),
            r"not supported on MIG-enabled GPUs \(GPU 0 has MIG enabled\)",
        ),
        (
            L4X4,
            "none",
            mps("{name: gpu, replicas: 49}"),
            r"invalid MPS configuration: .* maximum allowed replicas exceeded \(48\)",
        ),
        (
            [gpu(0, cc=(7, 0))],
            "none",
            mps("{name: gpu, replicas: 17}"),
            r"maximum allowed replicas exceeded \(16\)",
        ),
    ],
)
def test_mps_refusals(gpus: list[GpuFacts], strategy: str, sharing: str, error: str) -> None:
    with pytest.raises(StrategyError, match=error):
        counts(gpus, sharing, strategy)
