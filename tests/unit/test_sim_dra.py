"""The simulated kubelet's DRA decisions: which plugins register, which claims a pod uses and
when they may be prepared, and what the claims' CDI devices put in a container's env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubegpu.cdi.registry import Registry
from kubegpu.cdi.spec import parse_spec
from kubegpu.kube.kubelet import pluginregistration_v1_pb2 as reg
from kubegpu.sim.kubelet.dramanager import (
    PreparedDevice,
    cdi_env,
    choose_version,
    claim_drivers,
    claim_not_ready,
    pod_claims,
    registration_problem,
)


def test_the_newest_common_version_is_chosen() -> None:
    assert choose_version(["v1beta1.DRAPlugin", "v1.DRAPlugin"]) == "v1.DRAPlugin"
    assert choose_version(["v1beta1.DRAPlugin"]) == "v1beta1.DRAPlugin"
    assert choose_version(["v1alpha4.DRAPlugin"]) is None


@pytest.mark.parametrize(
    ("info", "problem"),
    [
        (
            reg.PluginInfo(
                type="CSIPlugin", name="d", endpoint="/e", supported_versions=["v1.DRAPlugin"]
            ),
            "CSIPlugin",
        ),
        (
            reg.PluginInfo(type="DRAPlugin", endpoint="/e", supported_versions=["v1.DRAPlugin"]),
            "name",
        ),
        (
            reg.PluginInfo(type="DRAPlugin", name="d", supported_versions=["v1.DRAPlugin"]),
            "endpoint",
        ),
        (
            reg.PluginInfo(type="DRAPlugin", name="d", endpoint="/e", supported_versions=["v9"]),
            "v9",
        ),
    ],
)
def test_a_plugin_that_cannot_serve_as_a_dra_driver_is_refused_with_the_reason(
    info: reg.PluginInfo, problem: str
) -> None:
    why = registration_problem(info)
    assert why is not None and problem in why


def test_a_dra_plugin_is_accepted() -> None:
    info = reg.PluginInfo(
        type="DRAPlugin", name="gpu.nvidia.com", endpoint="/e", supported_versions=["v1.DRAPlugin"]
    )
    assert registration_problem(info) is None


def test_pod_claims_come_from_names_or_from_the_controllers_status() -> None:
    pod: dict[str, Any] = {
        "spec": {
            "resourceClaims": [
                {"name": "direct", "resourceClaimName": "shared"},
                {"name": "made", "resourceClaimTemplateName": "t"},
                {"name": "pending", "resourceClaimTemplateName": "t"},
                {"name": "unneeded", "resourceClaimTemplateName": "t"},
            ]
        },
        "status": {
            "resourceClaimStatuses": [
                {"name": "made", "resourceClaimName": "pod-made-x7k2"},
                {"name": "unneeded"},
            ]
        },
    }
    assert pod_claims(pod) == {"direct": "shared", "made": "pod-made-x7k2", "pending": None}


def _claim(allocated: bool, reserved_for: list[str]) -> dict[str, Any]:
    status: dict[str, Any] = {"reservedFor": [{"resource": "pods", "uid": u} for u in reserved_for]}
    if allocated:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"request": "a", "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0"},
                    {"request": "b", "driver": "other.example.com", "pool": "n", "device": "x"},
                    {"request": "c", "driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-1"},
                ]
            }
        }
    return {"metadata": {"name": "c", "namespace": "ns"}, "status": status}


def test_a_claim_is_prepared_only_once_allocated_and_reserved_for_the_pod() -> None:
    assert "not allocated" in (claim_not_ready(_claim(False, ["p1"]), "p1") or "")
    assert "not reserved for pod p1" in (claim_not_ready(_claim(True, ["p2"]), "p1") or "")
    assert claim_not_ready(_claim(True, ["p2", "p1"]), "p1") is None


def test_a_claims_drivers_are_listed_once_in_allocation_order() -> None:
    assert claim_drivers(_claim(True, [])) == ["gpu.nvidia.com", "other.example.com"]
    assert claim_drivers(_claim(False, [])) == []


def test_a_container_gets_the_devices_of_its_request_or_all_of_the_claim() -> None:
    device = PreparedDevice("d", "p", "gpu-0", ("gpus/big",), ())
    assert device.serves(None)
    assert device.serves("gpus")
    assert device.serves("gpus/big")
    assert not device.serves("other")
    assert PreparedDevice("d", "p", "gpu-0", (), ()).serves("anything")


SPEC = {
    "cdiVersion": "0.6.0",
    "kind": "k8s.gpu.nvidia.com/claim",
    "containerEdits": {"env": ["NVIDIA_DRA_CLAIM=ns/c"]},
    "devices": [
        {"name": "u-gpu-0", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-a"]}},
        {"name": "u-gpu-1", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-b", "X=1"]}},
    ],
}


def specs(*docs: dict[str, Any]) -> Registry:
    registry = Registry()
    for i, doc in enumerate(docs):
        registry.add(Path(f"/var/run/cdi/{i}.json"), parse_spec(doc, f"{i}.json"))
    return registry


def test_cdi_env_applies_common_then_device_edits_and_joins_visible_devices() -> None:
    ids = ["k8s.gpu.nvidia.com/claim=u-gpu-0", "k8s.gpu.nvidia.com/claim=u-gpu-1"]
    assert cdi_env(ids, specs(SPEC)) == {
        "NVIDIA_DRA_CLAIM": "ns/c",
        "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b",
        "X": "1",
    }
    assert cdi_env(ids[:1], specs(SPEC))["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"


def test_a_void_visible_devices_is_replaced_by_a_device() -> None:
    spec = {**SPEC, "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}
    assert cdi_env(["k8s.gpu.nvidia.com/claim=u-gpu-1"], specs(spec))["NVIDIA_VISIBLE_DEVICES"] == (
        "GPU-b"
    )


@pytest.mark.parametrize(
    ("cdi_id", "error"),
    [
        ("k8s.gpu.nvidia.com/claim=u-gpu-9", "unresolvable CDI device"),
        ("other.example.com/claim=u-gpu-0", "unresolvable CDI device"),
        ("no-kind-here", 'invalid CDI device name "no-kind-here"'),
    ],
)
def test_a_cdi_device_no_spec_names_fails_the_container(cdi_id: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        cdi_env([cdi_id], specs(SPEC))
