"""The simulated kubelet's view of a pod whose `nvidia.com/gpu` limit is served through DRA
(KEP-5004): the scheduler's claim from `status.extendedResourceClaimStatus` is one of the
pod's claims, each container gets the requests mapped to it, and those resources need no
device plugin at admission."""

from __future__ import annotations

from typing import Any

from kubegpu.sim.kubelet.dramanager import (
    EXTENDED_CLAIM,
    dra_backed_resources,
    extended_claim,
    extended_requests,
    pod_claims,
)


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
        "spec": {
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {}},
            ]
        },
        "status": status,
    }


MAPPED = {
    "extendedResourceClaimStatus": {
        "resourceClaimName": "p-extended-resources-x7k2q",
        "requestMappings": [
            {
                "containerName": "a",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-0",
            }
        ],
    }
}


def test_the_schedulers_claim_is_one_of_the_pods_claims() -> None:
    p = pod(**MAPPED)
    assert extended_claim(p) == "p-extended-resources-x7k2q"
    assert pod_claims(p) == {EXTENDED_CLAIM: "p-extended-resources-x7k2q"}


def test_each_container_gets_only_the_requests_mapped_to_it() -> None:
    p = pod(**MAPPED)
    a, b = p["spec"]["containers"]
    assert extended_requests(p, a) == [(EXTENDED_CLAIM, "container-0-request-0")]
    assert extended_requests(p, b) == []
    assert dra_backed_resources(p, "a") == {"nvidia.com/gpu"}
    assert dra_backed_resources(p, "b") == set()


def test_a_pod_without_the_status_has_no_extended_claim() -> None:
    p = pod()
    assert extended_claim(p) is None
    assert pod_claims(p) == {}
    assert dra_backed_resources(p, "a") == set()
