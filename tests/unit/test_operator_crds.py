"""The ClusterPolicy and GPUCluster CRDs: generated from the models, structural, and they
accept ClusterPolicies written for the upstream operator unchanged.

The two documents below have the shape of upstream's sample ClusterPolicy and of what the
upstream Helm chart renders with its default values (written here from the CRD's field
list in reference/gpu-operator.md, not copied).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.kube.crds import crd_files, crd_manifests
from kubegpu.kube.policy import ClusterPolicySpec, parse_policy_spec, unknown_fields

ROOT = Path(__file__).parents[2]
CHART_CRDS = ROOT / "deploy" / "helm" / "kubegpu" / "crds"

# upstream's sample: sparse sections, deprecated fields, and a `plugin:` with no value
UPSTREAM_SAMPLE = """
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: gpu-cluster-policy}
spec:
  operator: {defaultRuntime: crio, runtimeClass: nvidia, initContainer: {}}
  psp: {enabled: false}
  mig: {strategy: single}
  daemonsets: {}
  validator:
    plugin:
    env: [{name: WITH_WORKLOAD, value: "true"}]
  devicePlugin: {}
  gfd: {}
  toolkit: {enabled: true}
  dcgm: {enabled: true}
  dcgmExporter: {config: {name: ""}}
  migManager: {enabled: true, config: {name: ""}, gpuClientsConfig: {name: ""}}
  nodeStatusExporter: {enabled: false}
  driver:
    enabled: true
    use_ocp_driver_toolkit: false
    rdma: {enabled: false}
    repoConfig: {configMapName: ""}
    certConfig: {name: ""}
    licensingConfig: {configMapName: "", nlsEnabled: false}
    virtualTopology: {config: ""}
"""

# what the upstream chart renders with its defaults (every section, nulls where a value is unset)
UPSTREAM_CHART_RENDERED = """
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata:
  name: cluster-policy
  labels: {app.kubernetes.io/component: gpu-operator}
spec:
  hostPaths: {rootFS: /, driverInstallDir: /run/nvidia/driver}
  operator:
    defaultRuntime: docker
    runtimeClass: nvidia
    initContainer:
      repository: nvcr.io/nvidia
      image: cuda
      version: "13.0.1-base-ubi9"
      imagePullPolicy: IfNotPresent
  daemonsets:
    labels: {helm.sh/chart: gpu-operator-v26.3.0, app.kubernetes.io/managed-by: gpu-operator}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    priorityClassName: system-node-critical
    updateStrategy: RollingUpdate
    rollingUpdate: {maxUnavailable: "1"}
  validator:
    repository: nvcr.io/nvidia/cloud-native
    image: gpu-operator-validator
    version: "v26.3.0"
    imagePullPolicy: IfNotPresent
    plugin:
      env: [{name: WITH_WORKLOAD, value: "false"}]
  mig: {strategy: single}
  psa: {enabled: false}
  cdi: {enabled: true, default: false, nriPluginEnabled: false}
  driver:
    enabled: true
    useNvidiaDriverCRD: false
    kernelModuleType: auto
    usePrecompiled: false
    repository: nvcr.io/nvidia
    image: driver
    version: "595.91.07"
    imagePullPolicy: IfNotPresent
    startupProbe: {initialDelaySeconds: 60, periodSeconds: 10, timeoutSeconds: 60, failureThreshold: 120}
    rdma: {enabled: false, useHostMofed: false}
    manager:
      repository: nvcr.io/nvidia/cloud-native
      image: k8s-driver-manager
      version: "v0.9.1"
      imagePullPolicy: IfNotPresent
      env:
        - {name: ENABLE_GPU_POD_EVICTION, value: "true"}
        - {name: ENABLE_AUTO_DRAIN, value: "false"}
        - {name: DRAIN_USE_FORCE, value: "false"}
        - {name: DRAIN_POD_SELECTOR_LABEL, value: ""}
        - {name: DRAIN_TIMEOUT_SECONDS, value: 0s}
        - {name: DRAIN_DELETE_EMPTYDIR_DATA, value: "false"}
    repoConfig: {configMapName: ""}
    certConfig: {name: ""}
    licensingConfig: {nlsEnabled: true, secretName: ""}
    virtualTopology: {config: ""}
    kernelModuleConfig: {name: ""}
    upgradePolicy:
      autoUpgrade: true
      maxParallelUpgrades: 1
      maxUnavailable: 25%
      waitForCompletion: {timeoutSeconds: 0}
      podDeletion: {force: false, timeoutSeconds: 300, deleteEmptyDir: false}
      drain: {enable: false, force: false, timeoutSeconds: 300, deleteEmptyDir: false}
  vgpuManager:
    enabled: false
    image: vgpu-manager
    imagePullPolicy: IfNotPresent
    driverManager:
      repository: nvcr.io/nvidia/cloud-native
      image: k8s-driver-manager
      version: "v0.9.1"
      imagePullPolicy: IfNotPresent
      env: [{name: ENABLE_GPU_POD_EVICTION, value: "false"}, {name: ENABLE_AUTO_DRAIN, value: "false"}]
  kataManager:
    enabled: false
    config:
      artifactsDir: /opt/nvidia-gpu-operator/artifacts/runtimeclasses
      runtimeClasses:
        - {name: kata-nvidia-gpu, nodeSelector: {}, artifacts: {url: "nvcr.io/nvidia/cloud-native/kata-gpu-artifacts:ubuntu22.04-535.54.03", pullSecret: ""}}
    repository: nvcr.io/nvidia/cloud-native
    image: k8s-kata-manager
    version: "v0.2.3"
    imagePullPolicy: IfNotPresent
  vfioManager:
    enabled: true
    repository: nvcr.io/nvidia
    image: cuda
    version: "13.0.1-base-ubi9"
    imagePullPolicy: IfNotPresent
    driverManager:
      repository: nvcr.io/nvidia/cloud-native
      image: k8s-driver-manager
      version: "v0.9.1"
      imagePullPolicy: IfNotPresent
      env: [{name: ENABLE_GPU_POD_EVICTION, value: "false"}, {name: ENABLE_AUTO_DRAIN, value: "false"}]
  vgpuDeviceManager:
    enabled: true
    repository: nvcr.io/nvidia/cloud-native
    image: vgpu-device-manager
    version: "v0.4.1"
    imagePullPolicy: IfNotPresent
    config: {default: default, name: null}
  ccManager:
    enabled: false
    defaultMode: "off"
    repository: nvcr.io/nvidia/cloud-native
    image: k8s-cc-manager
    version: "v0.1.1"
    imagePullPolicy: IfNotPresent
    env: [{name: CC_CAPABLE_DEVICE_IDS, value: "0x2339,0x2331,0x2330,0x2324,0x2322,0x233d"}]
  toolkit:
    enabled: true
    repository: nvcr.io/nvidia/k8s
    image: container-toolkit
    version: "v1.18.1-ubuntu20.04"
    imagePullPolicy: IfNotPresent
    installDir: /usr/local/nvidia
  devicePlugin:
    enabled: true
    repository: nvcr.io/nvidia
    image: k8s-device-plugin
    version: "v0.20.0"
    imagePullPolicy: IfNotPresent
    env:
      - {name: PASS_DEVICE_SPECS, value: "true"}
      - {name: FAIL_ON_INIT_ERROR, value: "true"}
      - {name: DEVICE_LIST_STRATEGY, value: envvar}
      - {name: DEVICE_ID_STRATEGY, value: uuid}
      - {name: NVIDIA_VISIBLE_DEVICES, value: all}
      - {name: NVIDIA_DRIVER_CAPABILITIES, value: all}
  dcgm:
    enabled: false
    repository: nvcr.io/nvidia/cloud-native
    image: dcgm
    version: "4.4.1-1-ubuntu22.04"
    imagePullPolicy: IfNotPresent
  dcgmExporter:
    enabled: true
    repository: nvcr.io/nvidia/k8s
    image: dcgm-exporter
    version: "4.4.1-4.5.2-ubuntu22.04"
    imagePullPolicy: IfNotPresent
    env:
      - {name: DCGM_EXPORTER_LISTEN, value: ":9400"}
      - {name: DCGM_EXPORTER_KUBERNETES, value: "true"}
      - {name: DCGM_EXPORTER_COLLECTORS, value: /etc/dcgm-exporter/dcp-metrics-included.csv}
    serviceMonitor: {enabled: false, interval: 15s, honorLabels: false, additionalLabels: {}, relabelings: []}
  gfd:
    enabled: true
    repository: nvcr.io/nvidia
    image: k8s-device-plugin
    version: "v0.20.0"
    imagePullPolicy: IfNotPresent
    env: [{name: GFD_SLEEP_INTERVAL, value: 60s}, {name: GFD_FAIL_ON_INIT_ERROR, value: "true"}]
  migManager:
    enabled: true
    repository: nvcr.io/nvidia/cloud-native
    image: k8s-mig-manager
    version: "v0.15.0"
    imagePullPolicy: IfNotPresent
    env: [{name: WITH_REBOOT, value: "false"}]
    config: {name: null, default: all-disabled}
    gpuClientsConfig: {name: ""}
  nodeStatusExporter:
    enabled: false
    repository: nvcr.io/nvidia/cloud-native
    image: gpu-operator-validator
    version: "v26.3.0"
    imagePullPolicy: IfNotPresent
  sandboxWorkloads: {enabled: false, defaultWorkload: container}
  sandboxDevicePlugin:
    enabled: true
    repository: nvcr.io/nvidia
    image: kubevirt-gpu-device-plugin
    version: "v1.4.0"
    imagePullPolicy: IfNotPresent
  kataSandboxDevicePlugin:
    enabled: true
    repository: nvcr.io/nvidia/cloud-native
    image: nvidia-sandbox-device-plugin
    version: "v0.0.3"
    imagePullPolicy: IfNotPresent
"""


def upstream_documents() -> dict[str, dict[str, Any]]:
    return {
        "sample": yaml.safe_load(UPSTREAM_SAMPLE),
        "chart": yaml.safe_load(UPSTREAM_CHART_RENDERED),
    }


@pytest.mark.parametrize("which", ["sample", "chart"])
def test_upstream_policies_use_only_fields_the_schema_defines(which: str) -> None:
    doc = upstream_documents()[which]
    assert unknown_fields(doc["spec"]) == []


@pytest.mark.parametrize("which", ["sample", "chart"])
def test_upstream_policies_parse_with_their_meaning(which: str) -> None:
    spec = parse_policy_spec(upstream_documents()[which]["spec"])
    assert spec.mig_strategy == "single"
    assert spec.driver.is_enabled(True)
    assert spec.migManager.is_enabled(True)
    assert not spec.nodeStatusExporter.is_enabled(False)


def test_a_misspelled_field_is_reported_with_its_path() -> None:
    spec = {"devicePlugin": {"config": {"name": "x", "defualt": "a"}}, "migManagr": {}}
    assert unknown_fields(spec) == ["devicePlugin.config.defualt", "migManagr"]


def test_an_empty_spec_means_upstream_defaults() -> None:
    spec = parse_policy_spec({})
    assert spec == ClusterPolicySpec()
    assert spec.mig_strategy == ""
    assert spec.cdi_enabled
    assert spec.runtime_class == "nvidia"
    assert spec.default_workload == "container"


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, prop in schema.get("properties", {}).items():
        out += _walk(prop, f"{path}.{name}")
    if "items" in schema:
        out += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _walk(schema["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("crd", crd_manifests(), ids=lambda c: c["spec"]["names"]["kind"])
def test_the_crd_schemas_are_structural(crd: dict[str, Any]) -> None:
    """Every node has a type (or is int-or-string / preserves unknown fields); no refs."""
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node, path
        typed = "type" in node or node.get("x-kubernetes-int-or-string")
        assert typed, f"{path} has no type"
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string"), path
    assert crd["spec"]["scope"] == "Cluster"
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Status"] == ".status.state"


def test_the_status_schema_has_state_and_conditions() -> None:
    crd = crd_manifests()[0]
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["state"]["enum"] == ["ignored", "ready", "notReady"]
    condition = status["properties"]["conditions"]["items"]
    assert set(condition["required"]) == {"type", "status", "lastTransitionTime", "reason"}


def test_the_charts_crds_are_generated_from_the_models() -> None:
    """scripts/gen-crds regenerates them; this fails when someone forgot."""
    wanted = crd_files()
    shipped = {p.name: p.read_text() for p in CHART_CRDS.glob("*.yaml")}
    assert sorted(shipped) == sorted(wanted), "run scripts/gen-crds"
    for name, text in wanted.items():
        assert shipped[name] == text, f"{name} is stale: run scripts/gen-crds"
