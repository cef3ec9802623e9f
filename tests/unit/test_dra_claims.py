"""Planning a claim: only this node's results, every device published, configs applied per
device (MPS limits, time-slice interval), and every problem named before anything changes."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.dra.claims import ClaimError, ClaimRef, node_results, plan_claim
from kubegpu.dra.config import FeatureGates
from kubegpu.dra.slices import DraDevice

REF = ClaimRef("ml", "c", "u1")
GATES = FeatureGates.parse("TimeSlicingSettings=true,MPSSupport=true")
API = "resource.nvidia.com/v1beta1"

PUBLISHED = {
    "gpu-0": DraDevice("gpu-0", "gpu", "GPU-a", 0, 0, "GPU-a", memory_mib=81920),
    "gpu-1": DraDevice("gpu-1", "gpu", "GPU-b", 1, 1, "GPU-b", memory_mib=81920),
    "gpu-2-mig-1g10gb-19-0": DraDevice(
        "gpu-2-mig-1g10gb-19-0", "mig", "MIG-c", 2, 2, "GPU-c", memory_mib=9856, profile="1g.10gb"
    ),
}


def claim(
    results: list[tuple[str, str]], config: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": "c", "uid": "u1"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": "gpu.nvidia.com", "pool": "node-a", "device": d}
                        for r, d in results
                    ]
                    + extra.get("more", []),
                    "config": config or [],
                }
            }
        },
    }


def opaque(requests: list[str], **sharing: Any) -> dict[str, Any]:
    return {
        "source": "FromClaim",
        "requests": requests,
        "opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {"apiVersion": API, "kind": "GpuConfig", "sharing": sharing},
        },
    }


def test_a_plain_claim() -> None:
    plan = plan_claim(claim([("gpu", "gpu-0")]), REF, "node-a", PUBLISHED, GATES)
    assert [(d.request, d.device.name) for d in plan.devices] == [("gpu", "gpu-0")]
    assert plan.env == {"KUBEGPU_DRA_CLAIM": "ml/c"}
    assert plan.mps is None


def test_only_this_nodes_results_of_this_driver() -> None:
    other = [
        {"request": "x", "driver": "gpu.nvidia.com", "pool": "node-b", "device": "gpu-0"},
        {"request": "y", "driver": "net.example.com", "pool": "node-a", "device": "eth0"},
    ]
    c = claim([("gpu", "gpu-1")], more=other)
    assert [r["device"] for r in node_results(c["status"]["allocation"], "node-a")] == ["gpu-1"]
    plan = plan_claim(c, REF, "node-a", PUBLISHED, GATES)
    assert [d.device.name for d in plan.devices] == ["gpu-1"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"metadata": {"uid": "u0"}}, "claim ml/c: the API server has UID 'u0', the kubelet asked"),
        ({"metadata": {"uid": "u1"}, "status": {}}, "claim ml/c: not allocated"),
        (claim([]), "no device of driver gpu.nvidia.com in pool node-a"),
        (
            claim([("gpu", "gpu-7")]),
            "device 'gpu-7' is not (or no longer) published by node node-a",
        ),
    ],
)
def test_claims_that_cannot_be_prepared(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ClaimError) as err:
        plan_claim(data, REF, "node-a", PUBLISHED, GATES)
    assert message in str(err.value)


def test_an_invalid_config_is_the_claims_error() -> None:
    c = claim([("gpu", "gpu-0")], [opaque(["gpu"], strategy="MPS", mpsConfig={"bogus": 1})])
    with pytest.raises(ClaimError, match=r"claim ml/c: config 0 .*field sharing.mpsConfig.bogus"):
        plan_claim(c, REF, "node-a", PUBLISHED, GATES)


def test_a_strategy_without_its_gate_is_refused() -> None:
    c = claim([("gpu", "gpu-0")], [opaque(["gpu"], strategy="MPS")])
    with pytest.raises(ClaimError, match="'MPSSupport' feature gate is not enabled"):
        plan_claim(c, REF, "node-a", PUBLISHED, FeatureGates.parse(None))


def test_mps_limits_per_device() -> None:
    c = claim(
        [("gpu", "gpu-0"), ("gpu", "gpu-1"), ("mig", "gpu-2-mig-1g10gb-19-0")],
        [
            opaque(
                ["gpu"],
                strategy="MPS",
                mpsConfig={
                    "defaultActiveThreadPercentage": 25,
                    "defaultPinnedDeviceMemoryLimit": "10Gi",
                    "defaultPerDevicePinnedMemoryLimit": {"1": "2Gi"},
                },
            ),
        ],
    )
    plan = plan_claim(c, REF, "node-a", PUBLISHED, GATES)
    assert plan.mps is not None
    assert [(m.uuid, m.pinned_memory_mib, m.active_thread_percentage) for m in plan.mps.limits] == [
        ("GPU-a", 10240, 25),
        ("GPU-b", 2048, 25),
    ]


def test_mps_defaults_leave_the_device_unlimited() -> None:
    c = claim([("gpu", "gpu-0")], [opaque([], strategy="MPS")])
    plan = plan_claim(c, REF, "node-a", PUBLISHED, GATES)
    assert plan.mps is not None
    (limit,) = plan.mps.limits
    assert (limit.pinned_memory_mib, limit.active_thread_percentage) == (81920, 100)


def test_a_per_device_limit_must_name_a_device_of_the_request() -> None:
    c = claim(
        [("gpu", "gpu-0")],
        [
            opaque(
                ["gpu"],
                strategy="MPS",
                mpsConfig={"defaultPerDevicePinnedMemoryLimit": {"GPU-z": "1Gi"}},
            )
        ],
    )
    with pytest.raises(ClaimError, match="value 'GPU-z': not a device of this request"):
        plan_claim(c, REF, "node-a", PUBLISHED, GATES)


def test_time_slicing_interval_goes_to_the_time_sliced_devices_only() -> None:
    c = claim(
        [("a", "gpu-0"), ("b", "gpu-1"), ("m", "gpu-2-mig-1g10gb-19-0")],
        [opaque(["a", "b"], strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"})],
    )
    plan = plan_claim(c, REF, "node-a", PUBLISHED, GATES)
    assert {d.request: dict(d.env) for d in plan.devices} == {
        "a": {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Long"},
        "b": {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Long"},
        "m": {},  # the MIG device's default config shares nothing
    }
    assert plan.env == {"KUBEGPU_DRA_CLAIM": "ml/c"}
    mixed = claim(
        [("a", "gpu-0"), ("b", "gpu-1")],
        [
            opaque(["a"], strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"}),
            opaque(["b"], strategy="TimeSlicing"),
        ],
    )
    envs = [dict(d.env) for d in plan_claim(mixed, REF, "node-a", PUBLISHED, GATES).devices]
    assert envs == [
        {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Long"},
        {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Default"},
    ]


def from_class(requests: list[str], **sharing: Any) -> dict[str, Any]:
    return {**opaque(requests, **sharing), "source": "FromClass"}


def test_gpu_test5_each_config_applies_to_the_devices_of_its_requests() -> None:
    c = claim(
        [("ts-gpu", "gpu-0"), ("mps-gpu", "gpu-1")],
        [
            opaque(["ts-gpu"], strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"}),
            opaque(["mps-gpu"], strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 50}),
        ],
    )
    plan = plan_claim(c, REF, "node-a", PUBLISHED, GATES)
    by_request = {d.request: d for d in plan.devices}
    assert by_request["ts-gpu"].env == {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Long"}
    assert not by_request["ts-gpu"].mps
    assert by_request["mps-gpu"].env == {} and by_request["mps-gpu"].mps
    assert plan.mps is not None
    assert [(lim.uuid, lim.active_thread_percentage) for lim in plan.mps.limits] == [("GPU-b", 50)]


def test_a_claim_config_overrides_the_class_config_of_the_same_request() -> None:
    # the allocator writes class configs (tagged with the request) before the claim's
    c = claim(
        [("gpu", "gpu-0")],
        [
            from_class(["gpu"], strategy="MPS"),
            opaque(["gpu"], strategy="TimeSlicing", timeSlicingConfig={"interval": "Short"}),
        ],
    )
    (d,) = plan_claim(c, REF, "node-a", PUBLISHED, GATES).devices
    assert d.env == {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Short"} and not d.mps


def test_a_class_config_applies_where_the_claim_names_another_request() -> None:
    c = claim(
        [("a", "gpu-0"), ("b", "gpu-1")],
        [
            from_class(
                ["a", "b"], strategy="TimeSlicing", timeSlicingConfig={"interval": "Medium"}
            ),
            opaque(["b"], strategy="MPS"),
        ],
    )
    plan = plan_claim(c, REF, "node-a", PUBLISHED, GATES)
    a, b = plan.devices
    assert a.env == {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Medium"} and not a.mps
    assert b.env == {} and b.mps
    assert plan.mps is not None and [lim.uuid for lim in plan.mps.limits] == ["GPU-b"]


def test_a_later_config_for_all_requests_wins_over_an_earlier_named_one() -> None:
    # upstream walks the list backwards: the claim's request-less config comes last
    c = claim(
        [("gpu", "gpu-0")],
        [from_class(["gpu"], strategy="MPS"), opaque([], strategy="TimeSlicing")],
    )
    (d,) = plan_claim(c, REF, "node-a", PUBLISHED, GATES).devices
    assert d.env == {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Default"} and not d.mps
