"""The GPUCluster: what it renders (the DRA plugin, its RBAC, the DeviceClasses, the
exporter with DRA attribution; never a device plugin), how nodes are labelled under it,
and which of a ClusterPolicy or a GPUCluster is in charge (the oldest, both ways)."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.dra.classes import device_classes
from kubegpu.kube.crds import crd_manifests
from kubegpu.kube.policy import parse_gpu_cluster_spec, parse_policy_spec
from kubegpu.operator import status as st
from kubegpu.operator.gpucluster import (
    DRA_DAEMONSET,
    EXPORTER_DRA_ENV,
    GPU_CLUSTER_NAME,
    choose,
    dra_label_changes,
    policy_label_changes,
    render_gpu_cluster,
)
from kubegpu.operator.operands.context import ClusterFacts, Owner

Obj = dict[str, Any]
NFD_GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}
DEPLOY = "nvidia.com/gpu.deploy."
DCGM_IMAGE = {"repository": "nvcr.io/nvidia/cloud-native", "image": "dcgm", "version": "4.4.1"}
FACTS = ClusterFacts(
    gpu_nodes=1, owner=Owner(GPU_CLUSTER_NAME, "uid-1", "GPUCluster", "nvidia.com/v1alpha1")
)


def rendered(spec: Obj | None = None) -> dict[tuple[str, str], Obj]:
    r = render_gpu_cluster(parse_gpu_cluster_spec(spec or {}), FACTS)
    assert not r.problems
    return {(o["kind"], o["metadata"]["name"]): o for o in r.objects()}


def env_of(ds: Obj) -> dict[str, Any]:
    main = ds["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in main["env"]}


def test_a_gpu_cluster_renders_the_dra_plugin_the_device_classes_and_the_exporter() -> None:
    objects = rendered()
    daemonsets = {name for kind, name in objects if kind == "DaemonSet"}
    assert daemonsets == {DRA_DAEMONSET, "nvidia-dcgm-exporter"}
    for cls in device_classes():
        assert objects[("DeviceClass", cls["metadata"]["name"])]["spec"] == cls["spec"]
    ds = objects[("DaemonSet", DRA_DAEMONSET)]
    main = ds["spec"]["template"]["spec"]["containers"][0]
    assert main["command"] == ["kubegpu", "dra-plugin"]
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {f"{DEPLOY}dra-driver": "true"}
    owner = ds["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["apiVersion"]) == ("GPUCluster", "nvidia.com/v1alpha1")


def test_the_gpu_class_serves_nvidia_com_gpu_only_when_asked() -> None:
    gpu_class = ("DeviceClass", "gpu.nvidia.com")
    assert "extendedResourceName" not in rendered()[gpu_class]["spec"]  # off by default
    off = {"draDriver": {"gpus": {"extendedResourceName": ""}}}  # the chart's default value
    assert "extendedResourceName" not in rendered(off)[gpu_class]["spec"]
    spec = {"draDriver": {"gpus": {"extendedResourceName": "nvidia.com/gpu"}}}
    assert rendered(spec)[gpu_class]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in rendered(spec)[("DeviceClass", "mig.nvidia.com")]["spec"]


def test_another_extended_resource_name_is_refused_by_field_and_value() -> None:
    with pytest.raises(ValueError, match="extendedResourceName") as err:
        parse_gpu_cluster_spec({"draDriver": {"gpus": {"extendedResourceName": "nvidia.com/mig"}}})
    assert "nvidia.com/mig" in str(err.value)


def test_the_plugin_gets_the_kubelet_paths_the_cdi_root_and_the_mig_lock() -> None:
    ds = rendered({"hostPaths": {"kubeletRootDir": "/k"}})[("DaemonSet", DRA_DAEMONSET)]
    env = env_of(ds)
    assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == "/k/plugins_registry"
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/k/plugins"
    assert env["KUBEGPU_DEVICE_PLUGIN_DIR"] == "/k/device-plugins"
    assert env["CDI_ROOT"] == "/var/run/cdi"
    paths = {v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert paths == {
        "/k/plugins_registry",
        "/k/plugins",
        "/k/device-plugins",
        "/var/run/cdi",
        "/run/kubegpu",
        "/",  # the driver root: a GPUCluster's driver is the host's
    }


def test_the_plugin_finds_the_driver_under_the_driver_root_as_nvidias_chart_does() -> None:
    """No runtime injection (NVIDIA_VISIBLE_DEVICES=void): NVML comes from the driver root,
    mounted with propagation so a driver mounted after the plugin started is seen."""
    ds = rendered()[("DaemonSet", DRA_DAEMONSET)]
    env = env_of(ds)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["NVIDIA_DRIVER_ROOT"] == "/"
    assert env["DRIVER_ROOT_CTR_PATH"] == "/driver-root"
    assert env["KUBEGPU_DRIVER_LIBRARY_ROOT"] == "/driver-root"
    pod = ds["spec"]["template"]["spec"]
    mount = next(
        m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/driver-root"
    )
    assert mount["mountPropagation"] == "HostToContainer"
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == "/"


def test_nvidias_sample_gpu_cluster_with_a_root_fs_is_accepted() -> None:
    """Strict apply refuses a field the CRD's schema lacks; NVIDIA's sample sets rootFS."""
    sample = {"hostPaths": {"rootFS": "/", "driverInstallDir": "/run/nvidia/driver"}}
    assert parse_gpu_cluster_spec(sample).hostPaths.rootFS == "/"
    (crd,) = [c for c in crd_manifests() if c["spec"]["names"]["kind"] == "GPUCluster"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    host_paths = schema["properties"]["spec"]["properties"]["hostPaths"]["properties"]
    assert host_paths["rootFS"]["type"] == "string"


def test_feature_gates_env_and_resources_come_from_the_gpu_cluster() -> None:
    ds = rendered(
        {
            "draDriver": {
                "featureGates": {"DynamicMIG": True, "MPSSupport": False},
                "gpus": {
                    "kubeletPlugin": {
                        "env": [{"name": "LOG_VERBOSITY", "value": "6"}],
                        "resources": {"limits": {"memory": "1Gi"}},
                    }
                },
            }
        }
    )[("DaemonSet", DRA_DAEMONSET)]
    env = env_of(ds)
    assert env["FEATURE_GATES"] == "DynamicMIG=true,MPSSupport=false"
    assert env["LOG_VERBOSITY"] == "6"
    main = ds["spec"]["template"]["spec"]["containers"][0]
    assert main["resources"] == {"limits": {"memory": "1Gi"}}


def test_the_plugin_has_least_privilege_rbac() -> None:
    objects = rendered()
    rules = objects[("ClusterRole", "nvidia-dra-driver-gpu")]["rules"]
    assert {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims"],
        "verbs": ["get"],
    } in (rules)
    slices = next(r for r in rules if r["resources"] == ["resourceslices"])
    assert "update" not in slices["verbs"] and "create" in slices["verbs"]
    assert not any("secrets" in r["resources"] for r in rules)


def test_the_exporter_attributes_dra_claims_and_waits_for_no_validator() -> None:
    ds = rendered()[("DaemonSet", "nvidia-dcgm-exporter")]
    assert env_of(ds)[EXPORTER_DRA_ENV] == "true"
    pod = ds["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert all(v["name"] != "run-nvidia-validations" for v in pod["volumes"])


def test_no_driver_toolkit_validator_or_device_plugin_is_rendered() -> None:
    names = {
        name
        for kind, name in rendered({"dcgm": {"enabled": True, **DCGM_IMAGE}})
        if kind == "DaemonSet"
    }
    assert names == {DRA_DAEMONSET, "nvidia-dcgm", "nvidia-dcgm-exporter"}


def test_the_upstream_default_gpu_cluster_renders_compute_domains_are_read_past() -> None:
    r = render_gpu_cluster(
        parse_gpu_cluster_spec({"draDriver": {"computeDomains": {"enabled": True}}}), FACTS
    )
    assert not r.problems and not any(s.error for s in r.states)


# -- node labels ----------------------------------------------------------------------------
def test_a_gpu_node_gets_the_dra_stack_and_loses_the_device_plugin() -> None:
    labels = {
        **NFD_GPU,
        "nvidia.com/gpu.present": "true",
        f"{DEPLOY}device-plugin": "true",
        f"{DEPLOY}gpu-feature-discovery": "true",
        f"{DEPLOY}dcgm-exporter": "true",
    }
    patch = dra_label_changes(labels, parse_gpu_cluster_spec({}))
    assert patch == {
        f"{DEPLOY}dra-driver": "true",
        f"{DEPLOY}device-plugin": None,
        f"{DEPLOY}gpu-feature-discovery": None,
    }


def test_a_paused_dra_plugin_stays_paused() -> None:
    labels = {**NFD_GPU, "nvidia.com/gpu.present": "true", f"{DEPLOY}dra-driver": "false"}
    patch = dra_label_changes(labels, parse_gpu_cluster_spec({}))
    assert f"{DEPLOY}dra-driver" not in patch


def test_back_under_a_cluster_policy_the_dra_label_goes() -> None:
    labels = {**NFD_GPU, "nvidia.com/gpu.present": "true", f"{DEPLOY}dra-driver": "true"}
    patch = policy_label_changes(labels, parse_policy_spec({}))
    assert patch[f"{DEPLOY}dra-driver"] is None
    assert patch[f"{DEPLOY}device-plugin"] == "true"


# -- who is in charge -------------------------------------------------------------------------
def cr(name: str, created: str) -> Obj:
    return {"metadata": {"name": name, "creationTimestamp": created, "uid": name}}


def test_an_older_cluster_policy_wins_and_the_gpu_cluster_is_told_why() -> None:
    policy, cluster = (
        cr("cluster-policy", "2026-01-01T00:00:00Z"),
        cr(GPU_CLUSTER_NAME, "2026-01-02T00:00:00Z"),
    )
    choice = choose([policy], [cluster])
    assert choice.kind == "ClusterPolicy" and choice.active is policy
    (ignored,) = choice.ignored_clusters
    assert ignored.reason == st.CLUSTER_POLICY_CONFLICT
    assert "ClusterPolicy cluster-policy is older and active" in ignored.message
    assert choice.conflicting == (f"GPUCluster {GPU_CLUSTER_NAME}",)


def test_an_older_gpu_cluster_wins_and_the_cluster_policy_is_told_why() -> None:
    policy, cluster = (
        cr("cluster-policy", "2026-01-02T00:00:00Z"),
        cr(GPU_CLUSTER_NAME, "2026-01-01T00:00:00Z"),
    )
    choice = choose([policy], [cluster])
    assert choice.kind == "GPUCluster" and choice.active is cluster
    (ignored,) = choice.ignored_policies
    assert ignored.reason == st.GPU_CLUSTER_CONFLICT
    assert "GPUCluster gpu-cluster is older and active" in ignored.message
    assert choice.conflicting == ("ClusterPolicy cluster-policy",)


def test_a_gpu_cluster_alone_is_active_and_one_with_another_name_is_ignored() -> None:
    assert choose([], [cr(GPU_CLUSTER_NAME, "t")]).kind == "GPUCluster"
    choice = choose([], [cr("dra", "t")])
    assert choice.kind is None
    (ignored,) = choice.ignored_clusters
    assert ignored.reason == st.IGNORED_REASON and "must be named 'gpu-cluster'" in ignored.message


def test_a_badly_named_gpu_cluster_still_conflicts_with_the_policy() -> None:
    choice = choose(
        [cr("cluster-policy", "2026-01-02T00:00:00Z")], [cr("dra", "2026-01-01T00:00:00Z")]
    )
    assert choice.kind == "ClusterPolicy"
    assert choice.conflicting == ("GPUCluster dra",)


def test_a_tie_goes_to_the_cluster_policy_and_deleted_ones_do_not_count() -> None:
    same = "2026-01-01T00:00:00Z"
    assert choose([cr("p", same)], [cr(GPU_CLUSTER_NAME, same)]).kind == "ClusterPolicy"
    gone = {**cr("p", "2025-01-01T00:00:00Z")}
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert choose([gone], [cr(GPU_CLUSTER_NAME, same)]).kind == "GPUCluster"


def test_the_loser_status_is_ignored_with_an_error_condition() -> None:
    status = st.ignored_status(st.GPU_CLUSTER_CONFLICT, "why", None, "ns", "now")
    assert status["state"] == st.IGNORED
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Ready"]["status"] == "False" and by_type["Error"]["status"] == "True"
    assert by_type["Error"]["reason"] == st.GPU_CLUSTER_CONFLICT
    plain = st.ignored_status(st.IGNORED_REASON, "why", None, "ns", "now")
    assert [c["type"] for c in plain["conditions"]] == ["Ready"]
