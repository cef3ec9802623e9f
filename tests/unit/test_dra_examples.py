"""The DRA examples use only what the plugin publishes: the two DeviceClasses, attribute
and capacity names that exist on its devices, and opaque configs its parser accepts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.dra.classes import device_classes
from kubegpu.dra.config import FeatureGates, check_gates, parse_parameters
from kubegpu.dra.slices import DraGpu, DraMig, NodeGpus, devices

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "dra").glob("*.yaml"))
CLASSES = {c["metadata"]["name"] for c in device_classes()}

_GPU = DraGpu(
    0,
    0,
    "GPU-a",
    "NVIDIA H200",
    "Hopper",
    (9, 0),
    "0:1:0.0",
    143771,
    True,
    (DraMig("MIG-a", "1g.18gb", 19, 0, 1, 16384, 16),),
)
_PUBLISHED = devices(
    NodeGpus(
        "580.82.07",
        (13, 0),
        (_GPU, DraGpu(1, 1, "GPU-b", "NVIDIA H200", "Hopper", (9, 0), "0:2:0.0", 143771)),
    )
)
ATTRIBUTES = {k for d in _PUBLISHED for k, _ in d.attributes}
CAPACITIES = {k for d in _PUBLISHED for k, _ in d.capacity}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_there_is_an_example_for_each_pattern() -> None:
    assert {p.name for p in EXAMPLES} == {
        "gpu.yaml",
        "mig-1g18gb.yaml",
        "gpu-by-product-and-memory.yaml",
        "two-matching-gpus.yaml",
        "shared-by-two-containers.yaml",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_uses_only_published_names(path: Path) -> None:
    docs = _docs(path)
    templates = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert templates
    assert pods
    for t in templates:
        assert t["apiVersion"] == "resource.k8s.io/v1"
        spec = t["spec"]["spec"]["devices"]
        for r in spec["requests"]:
            assert r["exactly"]["deviceClassName"] in CLASSES
            for s in r["exactly"].get("selectors", []):
                expr = s["cel"]["expression"]
                used = set(re.findall(r"attributes\['gpu.nvidia.com'\]\.(\w+)", expr))
                assert used <= ATTRIBUTES, used - ATTRIBUTES
                caps = set(re.findall(r"capacity\['gpu.nvidia.com'\]\.(\w+)", expr))
                assert caps <= CAPACITIES, caps - CAPACITIES
        for c in spec.get("constraints", []):
            domain, _, name = c["matchAttribute"].partition("/")
            assert domain == "gpu.nvidia.com"
            assert name in ATTRIBUTES
        for c in spec.get("config", []):
            config = parse_parameters(c["opaque"]["parameters"], path.name)
            check_gates(config, FeatureGates.parse("TimeSlicingSettings=true"), path.name)
    names = {t["metadata"]["name"] for t in templates}
    for pod in pods:
        claims = {c["name"]: c["resourceClaimTemplateName"] for c in pod["spec"]["resourceClaims"]}
        assert set(claims.values()) <= names
        for container in pod["spec"]["containers"]:
            assert {c["name"] for c in container["resources"]["claims"]} <= set(claims)


def test_the_shared_claim_is_used_by_two_containers() -> None:
    (pod,) = [
        d for d in _docs(ROOT / "examples/dra/shared-by-two-containers.yaml") if d["kind"] == "Pod"
    ]
    used = [c["resources"]["claims"][0]["name"] for c in pod["spec"]["containers"]]
    assert used == ["gpu", "gpu"]
