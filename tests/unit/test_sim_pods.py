"""Pure parts of the simulated kubelet's pod handling."""

from __future__ import annotations

import pytest

from kubegpu.sim.kubelet.qos import qos_class
from kubegpu.sim.kubelet.status import newer_version, status_view


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ([{"name": "a"}], "BestEffort"),
        ([{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}], "BestEffort"),
        ([{"name": "a", "resources": {"requests": {"cpu": "100m"}}}], "Burstable"),
        ([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}], "Guaranteed"),
        (
            [
                {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                {
                    "name": "b",
                    "resources": {
                        "requests": {"cpu": "1"},
                        "limits": {"cpu": "2", "memory": "1Gi"},
                    },
                },
            ],
            "Burstable",
        ),
    ],
)
def test_simulated_pods_report_the_qos_class_the_api_server_derived(
    containers: list[dict[str, object]], expected: str
) -> None:
    assert qos_class({"containers": containers}) == expected


def test_the_status_view_holds_the_phase_and_the_kubelets_own_conditions_only() -> None:
    def status(ready: str, *extra: dict[str, str]) -> dict[str, object]:
        conditions = [{"type": "Ready", "status": ready, "lastTransitionTime": "t"}, *extra]
        return {"phase": "Running", "conditions": conditions, "podIP": "10.0.0.1"}

    assert status_view(status("True")) == ("Running", frozenset({("Ready", "True")}))
    assert status_view(status("True")) != status_view(status("False"))
    # a condition another controller owns is not the kubelet's to keep true
    taint = {"type": "DisruptionTarget", "status": "True"}
    assert status_view(status("True", taint)) == status_view(status("True"))
    assert status_view({}) == (None, frozenset())


@pytest.mark.parametrize(
    ("version", "than", "newer"),
    [("12", "9", True), ("9", "12", False), ("9", "9", False), ("abc", "9", True), ("", "", False)],
)
def test_resource_versions_compare_as_etcd_revisions(version: str, than: str, newer: bool) -> None:
    assert newer_version(version, than) is newer
