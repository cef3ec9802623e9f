"""Pure parts of the simulated kubelet's pod handling."""

from __future__ import annotations

import pytest

from kubegpu.sim.pods import qos_class


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
