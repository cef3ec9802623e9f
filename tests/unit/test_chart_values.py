"""Every value of NVIDIA's gpu-operator chart is honoured by ours or refused at install with
a message saying it is not supported; none is dropped without a word (issue 17 item 3).

NVIDIA's values file (tests/data/nvidia/gpu-operator-values.yaml, all 294 keys of
chart-values-keys.txt with upstream's defaults) installs unchanged."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.kube import schema
from kubegpu.kube.policy import (
    GPUClusterSpec,
    parse_gpu_cluster_spec,
    parse_policy_spec,
    unknown_fields,
)
from kubegpu.sim.controlplane.binaries import find_bin_dir

ROOT = Path(__file__).parents[2]
CHART = ROOT / "deploy" / "helm" / "kubegpu"
NVIDIA = ROOT / "tests" / "data" / "nvidia"
NVIDIA_VALUES = NVIDIA / "gpu-operator-values.yaml"

Docs = tuple[dict[str, Any], ...]


def helm_template(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_bin_dir() / "helm"), "template", "gpu-operator", str(CHART),
         "--namespace", "gpu-operator", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@cache
def render(*sets: str, nvidia: bool = True) -> Docs:
    """The chart rendered from NVIDIA's values file (unless nvidia=False) plus `--set`s."""
    flags = ["-f", str(NVIDIA_VALUES)] if nvidia else []
    for s in sets:
        flags.append(f"--set-string={s[4:]}" if s.startswith("str:") else f"--set={s}")
    result = helm_template(*flags)
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def refused(*sets: str) -> str:
    result = helm_template("-f", str(NVIDIA_VALUES), *(f"--set={s}" for s in sets))
    assert result.returncode != 0, f"{sets} was accepted"
    return result.stderr


def find(docs: Docs, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]


def policy_spec(docs: Docs) -> dict[str, Any]:
    (policy,) = find(docs, "ClusterPolicy")
    spec: dict[str, Any] = policy["spec"]
    return spec


def operator_container(docs: Docs) -> dict[str, Any]:
    (deployment,) = find(docs, "Deployment", "kubegpu-operator")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def upstream_keys() -> list[str]:
    return [
        line.split(": ")[0]
        for line in (NVIDIA / "chart-values-keys.txt").read_text().split("\n")
        if line
    ]


# -- NVIDIA's file as it is --------------------------------------------------------------------
def test_nvidias_values_file_has_every_upstream_key() -> None:
    values = yaml.safe_load(NVIDIA_VALUES.read_text())
    for key in upstream_keys():
        node: Any = values
        parts = key.split(".")
        while parts:  # keys may hold dots (operator.nodeSelector.kubernetes.io/os)
            for n in range(len(parts), 0, -1):
                head = ".".join(parts[:n])
                if isinstance(node, dict) and head in node:
                    node, parts = node[head], parts[n:]
                    break
            else:
                raise AssertionError(f"{key} is not in {NVIDIA_VALUES.name}")


def test_nvidias_values_file_installs_unchanged_into_a_policy_the_crd_knows() -> None:
    spec = policy_spec(render())
    assert unknown_fields(spec) == []
    policy = parse_policy_spec(spec)
    assert policy.mig_strategy == "single"
    assert policy.driver.upgradePolicy is not None
    assert policy.driver.upgradePolicy.podDeletion is not None
    assert policy.driver.upgradePolicy.podDeletion.timeoutSeconds == 300


def test_the_schema_refuses_a_key_nobody_defines() -> None:
    result = helm_template("--set", "devicePlugin.enabeld=true")
    assert result.returncode != 0
    assert "enabeld" in result.stderr


def test_the_schema_is_generated_from_the_values_files() -> None:
    check = subprocess.run(
        [str(ROOT / "scripts" / "gen-values-schema"), "--check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr


# -- refused, each with its reason ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        ("platform.openshift=true", "OpenShift"),
        ("nfd.nodefeaturerules=true", "NodeFeatureRules"),
        ("operator.cleanupCRD=true", "pre-delete hook"),
        ("operator.logging.develMode=true", "development logging"),
        ("operator.logging.timeEncoding=iso8601", "time encoding"),
        ("kataManager.enabled=true", "Kata manager is deprecated"),
    ],
)
def test_a_value_kubegpu_cannot_honour_is_refused_with_its_reason(
    setting: str, reason: str
) -> None:
    err = refused(setting)
    assert f"{setting} is not supported by kubegpu" in err
    assert reason in err


def test_every_refused_value_is_named_at_once() -> None:
    err = refused("kataManager.enabled=true", "platform.openshift=true")
    assert "kataManager.enabled=true" in err and "platform.openshift=true" in err


# -- honoured -----------------------------------------------------------------------------------
def test_deploy_cr_false_creates_no_cluster_policy() -> None:
    docs = render("clusterPolicy.deployCR=false")
    assert find(docs, "ClusterPolicy") == []
    assert find(docs, "Deployment", "kubegpu-operator")


def test_gpu_cluster_deploy_cr_creates_the_gpu_cluster_instead_of_the_policy() -> None:
    docs = render("gpuCluster.deployCR=true", "clusterPolicy.deployCR=false")
    assert find(docs, "ClusterPolicy") == []
    (gc,) = find(docs, "GPUCluster", "gpu-cluster")
    spec = parse_gpu_cluster_spec(gc["spec"])
    assert spec.draDriver.image == "k8s-dra-driver-gpu"  # NVIDIA's values, unchanged
    assert spec.dcgmExporter.is_enabled(False)
    assert schema.unknown_fields(gc["spec"], GPUClusterSpec) == []


def test_gpu_cluster_feature_gates_reach_the_gpu_cluster() -> None:
    docs = render(
        "gpuCluster.deployCR=true",
        "clusterPolicy.deployCR=false",
        "draDriver.featureGates.DynamicMIG=true",
    )
    (gc,) = find(docs, "GPUCluster", "gpu-cluster")
    assert gc["spec"]["draDriver"]["featureGates"] == {"DynamicMIG": True}


def test_a_gpu_cluster_next_to_a_cluster_policy_is_refused() -> None:
    err = refused("gpuCluster.deployCR=true")
    assert "gpuCluster.deployCR=true needs clusterPolicy.deployCR=false" in err


def test_custom_dcgm_metrics_configmap_is_created_and_named_in_the_policy() -> None:
    csv = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %)."
    docs = render(
        "dcgmExporter.config.create=true",
        "dcgmExporter.config.name=custom-dcgm-metrics",
        f"dcgmExporter.config.data={csv.replace(',', chr(92) + ',')}",
    )
    (cm,) = find(docs, "ConfigMap", "custom-dcgm-metrics")
    assert cm["data"] == {"dcgm-metrics.csv": csv}
    assert policy_spec(docs)["dcgmExporter"]["config"] == {"name": "custom-dcgm-metrics"}


def test_an_existing_metrics_configmap_is_only_named() -> None:
    docs = render("dcgmExporter.config.name=mine")
    assert find(docs, "ConfigMap", "mine") == []
    assert policy_spec(docs)["dcgmExporter"]["config"] == {"name": "mine"}


def test_service_monitor_scrape_timeout_reaches_the_policy() -> None:
    spec = policy_spec(render("dcgmExporter.serviceMonitor.scrapeTimeout=7s"))
    assert spec["dcgmExporter"]["serviceMonitor"]["scrapeTimeout"] == "7s"


def test_gpu_pod_deletion_becomes_the_policys_pod_deletion() -> None:
    spec = policy_spec(
        render("driver.upgradePolicy.gpuPodDeletion.force=true",
               "driver.upgradePolicy.gpuPodDeletion.timeoutSeconds=42")
    )  # fmt: skip
    policy = spec["driver"]["upgradePolicy"]
    assert "gpuPodDeletion" not in policy
    assert policy["podDeletion"] == {"force": True, "timeoutSeconds": 42, "deleteEmptyDir": False}


def test_nvidia_driver_crd_values_hand_the_driver_to_a_default_nvidiadriver() -> None:
    docs = render(
        "driver.nvidiaDriverCRD.enabled=true",
        "driver.nvidiaDriverCRD.nodeSelector.pool=gold",
    )
    spec = policy_spec(docs)
    assert spec["driver"]["useNvidiaDriverCRD"] is True
    assert "nvidiaDriverCRD" not in spec["driver"]
    (driver,) = find(docs, "NVIDIADriver", "default")
    assert driver["apiVersion"] == "nvidia.com/v1alpha1"
    assert driver["spec"]["driverType"] == "gpu"
    assert driver["spec"]["nodeSelector"] == {"pool": "gold"}
    assert driver["spec"]["version"] == "595.91.07"
    assert driver["spec"]["upgradePolicy"]["podDeletion"]["timeoutSeconds"] == 300
    assert find(render("driver.nvidiaDriverCRD.enabled=true",
                       "driver.nvidiaDriverCRD.deployDefaultCR=false"), "NVIDIADriver") == []  # fmt: skip
    assert find(render(), "NVIDIADriver") == []


def test_nvidias_operator_image_is_replaced_by_kubegpus_and_the_rest_applies() -> None:
    docs = render(
        "operator.imagePullPolicy=Always",
        "operator.imagePullSecrets[0]=regcred",
        "operator.env[0].name=EXTRA",
        "str:operator.env[0].value=1",
        "operator.logging.level=debug",
    )
    c = operator_container(docs)
    assert c["image"].startswith("ghcr.io/kubegpu/kubegpu:")  # NVIDIA's gpu-operator: replaced
    assert c["imagePullPolicy"] == "Always"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["EXTRA"] == "1"
    assert env["LOG_LEVEL"] == "DEBUG"
    (deployment,) = find(docs, "Deployment", "kubegpu-operator")
    assert {"name": "regcred"} in deployment["spec"]["template"]["spec"]["imagePullSecrets"]


def test_a_kubegpu_operator_image_is_used_as_named() -> None:
    c = operator_container(
        render("operator.repository=registry.local/mirror", "operator.image=kubegpu",
               "operator.version=1.2.3")
    )  # fmt: skip
    assert c["image"] == "registry.local/mirror/kubegpu:1.2.3"
    digest = "sha256:" + "a" * 64
    c = operator_container(render("operator.image=kubegpu", f"operator.version={digest}"))
    assert c["image"] == f"nvcr.io/nvidia/kubegpu@{digest}"  # NVIDIA's file names the repository


def test_without_nfd_the_chart_labels_gpu_nodes_itself() -> None:
    assert find(render(), "DaemonSet") == []  # NFD's labels are expected
    (labeller,) = find(render("nfd.enabled=false"), "DaemonSet")
    assert "node-labeller" in labeller["metadata"]["name"]


def test_kata_manager_values_pass_to_the_policy_where_upstream_keeps_them_inert() -> None:
    spec = policy_spec(render())
    assert spec["kataManager"]["enabled"] is False


def test_extra_objects_are_installed() -> None:
    docs = render(
        "extraObjects[0].apiVersion=v1",
        "extraObjects[0].kind=ConfigMap",
        "extraObjects[0].metadata.name=extra",
    )
    assert find(docs, "ConfigMap", "extra")


# -- the table ----------------------------------------------------------------------------------
def values_table() -> dict[str, str]:
    """docs/operator.md's values table: `pattern` -> what kubegpu does."""
    text = (ROOT / "docs" / "operator.md").read_text()
    section = text.split("### Every value of NVIDIA's chart", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*(`[^|]+`)\s*\|\s*(\w+)", line)
        if m:
            for pattern in re.findall(r"`([^`]+)`", m.group(1)):
                rows[pattern] = m.group(2)
    return rows


def test_the_docs_table_says_what_happens_to_every_upstream_value() -> None:
    table = values_table()
    assert set(table.values()) <= {"honoured", "refused", "notice"}
    uncovered = [k for k in upstream_keys() if not any(fnmatch.fnmatchcase(k, p) for p in table)]
    assert uncovered == []


def test_the_docs_table_marks_exactly_the_refused_values_as_refused() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    rules = re.findall(r"^- path: (\S+)$", helpers, re.M)
    refused_rows = {p for p, what in values_table().items() if what == "refused"}
    assert refused_rows == set(rules)
