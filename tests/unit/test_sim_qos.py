"""The one QoS rule of the simulated kubelet: the class it reports in the pod's status
(which the API server refuses to see changed) and the class that names its cgroup."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.sim.kubelet.gpuload import cgroup_qos
from kubegpu.sim.kubelet.qos import qos_class


def container(name: str = "main", **resources: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "resources": resources}


BOTH = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        ({"cpu": "1000m", "memory": "1024Mi"}, BOTH),
        ({"cpu": "0.5", "memory": "512Mi"}, {"cpu": "500m", "memory": "0.5Gi"}),
    ],
)
def test_requests_equal_to_the_limits_as_quantities_are_guaranteed(
    requests: dict[str, str], limits: dict[str, str]
) -> None:
    spec = {"containers": [container(requests=requests, limits=limits)]}
    assert qos_class(spec) == "Guaranteed"


def test_a_zero_request_or_limit_counts_as_none() -> None:
    assert qos_class({"containers": [container(requests={"cpu": "0"})]}) == "BestEffort"
    zero_cpu = {"cpu": "0", "memory": "1Gi"}
    assert qos_class({"containers": [container(limits=zero_cpu)]}) == "Burstable"


def test_init_containers_count_like_the_others() -> None:
    spec = {
        "initContainers": [container("init", requests={"memory": "64Mi"})],
        "containers": [container()],
    }
    assert qos_class(spec) == "Burstable"
    spec = {
        "initContainers": [container("init", limits=BOTH)],
        "containers": [container(limits=BOTH)],
    }
    assert qos_class(spec) == "Guaranteed"
    spec = {"initContainers": [container("init")], "containers": [container(limits=BOTH)]}
    assert qos_class(spec) == "Burstable"


def test_only_cpu_and_memory_count() -> None:
    gpus = {"nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"}
    assert qos_class({"containers": [container(requests=gpus, limits=gpus)]}) == "BestEffort"
    assert qos_class({"containers": [container(limits={**BOTH, **gpus})]}) == "Guaranteed"


@pytest.mark.parametrize(
    "spec",
    [
        {"containers": [container()]},
        {"containers": [container(limits=BOTH)]},
        {"containers": [container(requests={"cpu": "1000m"}, limits=BOTH)]},
        {"initContainers": [container("init", requests={"cpu": "1"})], "containers": [container()]},
        {
            "containers": [
                container(limits={"cpu": "2000m", "memory": "2Gi"}, requests={"cpu": "2"})
            ]
        },
    ],
)
def test_the_cgroup_is_named_by_the_class_the_status_reports(spec: dict[str, Any]) -> None:
    assert cgroup_qos({"spec": spec}) == qos_class(spec).lower()


def test_a_quantity_that_is_none_is_refused_naming_the_container_and_field() -> None:
    with pytest.raises(ValueError, match=r"container 'main': resources.limits.cpu: 'lots'"):
        qos_class({"containers": [container(limits={"cpu": "lots"})]})
