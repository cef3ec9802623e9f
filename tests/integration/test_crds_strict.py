"""NVIDIA's custom resources against our CRDs on the real API server, with strict field
validation (what `kubectl apply --validate=strict` asks for): every field of upstream's
ClusterPolicy and NVIDIADriver is known, and the ClusterPolicy our chart renders from
NVIDIA's own values file is accepted as is.

The field lists in tests/data/nvidia/ are upstream's CRDs flattened (one `path: type` a
line); the documents are built from them, one value of each field's type."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.kube.crds import crd_manifests
from kubegpu.sim.controlplane.binaries import find_bin_dir
from kubegpu.sim.controlplane.plane import ControlPlane

DATA = Path(__file__).parents[1] / "data" / "nvidia"
CHART = Path(__file__).parents[2] / "deploy" / "helm" / "kubegpu"


def reference_fields(name: str) -> dict[str, str]:
    """`spec.a.b[].c` -> its upstream type (`string`, `array<object>`, `string enum=x|y`...)."""
    fields = {}
    for line in (DATA / name).read_text().splitlines():
        path, kind = line.split(": ", 1)
        fields[path] = kind
    return fields


def our_schema(kind: str) -> dict[str, Any]:
    (crd,) = [c for c in crd_manifests() if c["spec"]["names"]["kind"] == kind]
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _sub(schema: dict[str, Any] | None, segment: str) -> dict[str, Any] | None:
    """The schema of `segment` (a property, or `name[]`: the items of an array) in `schema`."""
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return None
    name = segment.removesuffix("[]")
    node = (schema.get("properties") or {}).get(name)
    if node is not None and segment.endswith("[]"):
        node = node.get("items")
    return node


def sample(kind: str, ours: dict[str, Any] | None) -> Any:
    """A valid value of upstream type `kind`, within our schema's enum/minimum if it has one."""
    if ours and ours.get("enum"):
        return ours["enum"][0]
    base = kind.split(maxsplit=1)[0]
    if base.startswith("string"):
        enum = kind.partition("enum=")[2]
        return enum.split("|")[0] if enum else "x"
    if base == "integer":
        return max(1, (ours or {}).get("minimum", 1))
    if base == "boolean":
        return True
    if base == "int-or-string":
        return "25%"
    if base == "array<string>":
        return ["x"]
    if base == "array<integer>":
        return [1]
    if base == "array<object>":
        return [{}]
    if base == "object":
        return {}
    raise AssertionError(f"unknown reference type {kind!r}")


def full_spec(fields: dict[str, str], schema: dict[str, Any]) -> dict[str, Any]:
    """A `.spec` that sets every field in `fields` (arrays of objects get one item)."""
    root: dict[str, Any] = {}
    for path, kind in sorted(fields.items()):
        segments = path.split(".")[1:]
        node: Any = root
        ours: dict[str, Any] | None = schema
        for seg in segments[:-1]:
            ours = _sub(ours, seg)
            name = seg.removesuffix("[]")
            node = node.setdefault(name, [{}] if seg.endswith("[]") else {})
            if isinstance(node, list):
                node = node[0]
        last = segments[-1]
        ours = _sub(ours, last)
        if isinstance(node, dict) and last not in node:
            node[last] = sample(kind, ours)
    return root


def kubectl(cp: ControlPlane, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_bin_dir() / "kubectl"), "--kubeconfig", str(cp.kubeconfig_path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def apply_strict(cp: ControlPlane, doc: dict[str, Any]) -> None:
    result = kubectl(
        cp, "apply", "--server-side", "--validate=strict", "-f", "-", stdin=json.dumps(doc)
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def crds_installed(control_plane: ControlPlane) -> ControlPlane:
    for crd in crd_manifests():
        apply_strict(control_plane, crd)
    for crd in crd_manifests():
        name = crd["metadata"]["name"]
        result = kubectl(
            control_plane, "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s"
        )
        assert result.returncode == 0, result.stderr
    return control_plane


@pytest.mark.parametrize(
    ("kind", "api_version", "fields"),
    [
        ("ClusterPolicy", "nvidia.com/v1", "clusterpolicy-v1-fields.txt"),
        ("NVIDIADriver", "nvidia.com/v1alpha1", "nvidiadriver-v1alpha1-fields.txt"),
        ("GPUCluster", "nvidia.com/v1alpha1", "gpucluster-v1alpha1-fields.txt"),
    ],
)
def test_every_upstream_field_is_accepted_strictly(
    crds_installed: ControlPlane, kind: str, api_version: str, fields: str
) -> None:
    schema = our_schema(kind)["properties"]["spec"]
    spec = full_spec(reference_fields(fields), schema)
    name = f"every-field-{kind.lower()}"
    apply_strict(
        crds_installed,
        {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec},
    )
    stored = kubectl(crds_installed, "get", kind.lower(), name, "-o", "json")
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["spec"] == spec  # nothing pruned
    kubectl(crds_installed, "delete", kind.lower(), name)


def test_an_unknown_field_is_still_refused(crds_installed: ControlPlane) -> None:
    doc = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "typo"},
        "spec": {"dcgmExporter": {"serviceMonitor": {"scrapeTimout": "10s"}}},
    }
    result = kubectl(
        crds_installed, "apply", "--server-side", "--validate=strict", "-f", "-",
        stdin=json.dumps(doc),
    )  # fmt: skip
    assert result.returncode != 0
    assert "scrapeTimout" in result.stderr


def render_chart(*sets: str) -> list[dict[str, Any]]:
    """Our chart rendered from NVIDIA's values file, unchanged but for `--set`s."""
    out = subprocess.run(
        [
            str(find_bin_dir() / "helm"),
            "template", "gpu-operator", str(CHART), "--namespace", "gpu-operator",
            "-f", str(DATA / "gpu-operator-values.yaml"), *(f"--set={s}" for s in sets),
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_the_chart_renders_nvidias_values_into_a_policy_strict_clients_accept(
    crds_installed: ControlPlane,
) -> None:
    (policy,) = [d for d in render_chart() if d["kind"] == "ClusterPolicy"]
    apply_strict(crds_installed, policy)
    stored = kubectl(
        crds_installed, "get", "clusterpolicy", policy["metadata"]["name"], "-o", "json"
    )
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["spec"] == policy["spec"]
    assert policy["spec"]["dcgmExporter"]["serviceMonitor"]["scrapeTimeout"] == "10s"
    kubectl(crds_installed, "delete", "clusterpolicy", policy["metadata"]["name"])


def test_the_charts_default_nvidiadriver_is_accepted_strictly(crds_installed: ControlPlane) -> None:
    docs = render_chart("driver.nvidiaDriverCRD.enabled=true")
    (driver,) = [d for d in docs if d["kind"] == "NVIDIADriver"]
    apply_strict(crds_installed, driver)
    stored = kubectl(crds_installed, "get", "nvidiadriver", "default", "-o", "json")
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["spec"] == driver["spec"]
    kubectl(crds_installed, "delete", "nvidiadriver", "default")


def test_nvidias_sample_gpu_cluster_is_accepted_strictly(crds_installed: ControlPlane) -> None:
    """NVIDIA's sample GPUCluster sets spec.hostPaths.rootFS, which NVIDIA's schema lacks;
    a strict apply of the sample must not be refused."""
    doc = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster"},
        "spec": {"hostPaths": {"rootFS": "/", "driverInstallDir": "/run/nvidia/driver"}},
    }
    apply_strict(crds_installed, doc)
    stored = kubectl(crds_installed, "get", "gpucluster", "gpu-cluster", "-o", "json")
    assert json.loads(stored.stdout)["spec"]["hostPaths"]["rootFS"] == "/"
    kubectl(crds_installed, "delete", "gpucluster", "gpu-cluster")
