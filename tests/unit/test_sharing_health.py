"""Device health: which XIDs count, what they mark, and when a GPU is healthy again."""

from __future__ import annotations

import pytest

from kubegpu.sharing.config import parse_config
from kubegpu.sharing.devices import Device, GpuFacts, MigFacts, advertise
from kubegpu.sharing.health import DEFAULT_IGNORED_XIDS, HealthBook, XidPolicy, affected


@pytest.mark.parametrize(
    ("env", "counted", "ignored"),
    [
        ({}, [48, 79, 94, 119], [13, 31, 43, 45, 68, 109]),
        ({"DP_DISABLE_HEALTHCHECKS": "all"}, [], [48, 79, 13]),
        ({"DP_DISABLE_HEALTHCHECKS": "xids"}, [], [48, 79]),
        ({"DP_DISABLE_HEALTHCHECKS": "48, 94"}, [79, 119], [48, 94, 13]),
        ({"DP_ENABLE_HEALTHCHECKS": "13"}, [13, 48], [31, 43]),
        ({"DP_ENABLE_HEALTHCHECKS": "all"}, [13, 31, 43, 45, 68, 109, 48], []),
        (
            {"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "48,31"},
            [48, 31],
            [79, 13],
        ),
        ({"DP_DISABLE_HEALTHCHECKS": "48", "DP_ENABLE_HEALTHCHECKS": "48"}, [48], [13]),
    ],
)
def test_which_xids_count(env: dict[str, str], counted: list[int], ignored: list[int]) -> None:
    policy = XidPolicy.from_env(env)
    assert [x for x in counted if policy.counts(x)] == counted
    assert [x for x in ignored if not policy.counts(x)] == ignored


def test_the_default_ignore_list_is_upstreams() -> None:
    assert frozenset({13, 31, 43, 45, 68, 109}) == DEFAULT_IGNORED_XIDS
    assert XidPolicy().active


def test_entries_that_are_not_xids_are_reported_not_guessed() -> None:
    policy = XidPolicy.from_env(
        {"DP_DISABLE_HEALTHCHECKS": "48,ecc", "DP_ENABLE_HEALTHCHECKS": "x"}
    )
    assert policy.invalid == ("DP_DISABLE_HEALTHCHECKS=ecc", "DP_ENABLE_HEALTHCHECKS=x")
    assert not policy.counts(48)


def test_with_every_check_off_nothing_needs_watching() -> None:
    assert not XidPolicy.from_env({"DP_DISABLE_HEALTHCHECKS": "all"}).active
    assert XidPolicy.from_env(
        {"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "79"}
    ).active


def _node() -> tuple[list[Device], list[Device]]:
    """GPU 0 whole and shared 3 ways; GPU 1 with two MIG devices (GI 7 and 8)."""
    gpus = [
        GpuFacts(0, "GPU-0", "NVIDIA H200 NVL", 143771, (9, 0), True, False),
        GpuFacts(
            1,
            "GPU-1",
            "NVIDIA H200 NVL",
            143771,
            (9, 0),
            True,
            True,
            tuple(
                MigFacts(m, f"MIG-1-{m}", "1g.18gb", 7 + m, 0, True, 16384, 16, 1, 1)
                for m in range(2)
            ),
        ),
    ]
    config = parse_config(
        "flags: {migStrategy: mixed}\nsharing: {timeSlicing: {resources: [{name: gpu, replicas: 3}]}}"
    )
    adv = advertise(gpus, config)
    return adv.resources["nvidia.com/gpu"], adv.resources["nvidia.com/mig-1g.18gb"]


def test_an_xid_marks_every_replica_and_mig_device_of_its_gpu() -> None:
    shared, migs = _node()
    book = HealthBook()
    book.record((0, None, None), now=1.0)
    assert book.unhealthy(shared + migs) == {"GPU-0::0", "GPU-0::1", "GPU-0::2"}
    book.record((1, None, None), now=1.0)
    assert book.unhealthy(migs) == {"MIG-1-0", "MIG-1-1"}


def test_an_xid_scoped_to_a_gpu_instance_marks_only_its_mig_devices() -> None:
    shared, migs = _node()
    assert [affected(d, (1, 8, None)) for d in migs] == [False, True]
    assert [affected(d, (1, 8, 0)) for d in migs] == [False, True]
    assert [affected(d, (1, 8, 3)) for d in migs] == [False, False]
    # a whole GPU (MIG off, or MIG strategy none) is hit by any scope on it
    assert all(affected(d, (0, 8, 0)) for d in shared)
    assert not any(affected(d, (1, None, None)) for d in shared)


def test_recovery_waits_for_the_quiet_period_after_the_last_xid() -> None:
    book = HealthBook(recovery_s=10.0)
    book.record((0, None, None), now=100.0)
    assert book.due(now=105.0) == []
    book.record((0, None, None), now=105.0)  # another XID restarts the clock
    assert book.due(now=114.0) == []
    assert book.due(now=115.0) == [(0, None, None)]
    book.recover((0, None, None))
    shared, _ = _node()
    assert book.unhealthy(shared) == set()


def test_without_a_recovery_period_devices_stay_unhealthy_as_upstream() -> None:
    book = HealthBook(recovery_s=0)
    book.record((0, None, None), now=0.0)
    assert book.due(now=1e9) == []
