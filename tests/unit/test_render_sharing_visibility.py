"""What the operator renders for sharing visibility: the device plugin can find the pod it
allocated to (pod-resources) and annotate it (patch pods, nothing more); the exporter reads
the host's /proc and the node's pods only when process metrics are asked for."""

from __future__ import annotations

from typing import Any

from kubegpu.kube.policy import parse_policy_spec
from kubegpu.operator.rbac import operand_rbac
from kubegpu.operator.render import ClusterFacts, Rendered, render

FACTS = ClusterFacts(
    gpu_nodes=1,
    service_monitor_crd=True,
    image_env={"DRIVER_IMAGE": "d", "CONTAINER_TOOLKIT_IMAGE": "t"},
)
PROCESS_METRICS = [{"name": "KUBEGPU_EXPORTER_PROCESS_METRICS", "value": "true"}]


def rendered(spec: dict[str, Any]) -> Rendered:
    return render(parse_policy_spec({"dcgm": {"enabled": False}, **spec}), FACTS)


def mounts_and_paths(r: Rendered, name: str) -> tuple[dict[str, Any], dict[str, str]]:
    pod = r.daemonset(name)["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    return mounts, paths


def test_the_device_plugin_sees_pod_resources_read_only_and_may_only_patch_pods() -> None:
    mounts, paths = mounts_and_paths(rendered({}), "nvidia-device-plugin-daemonset")
    mount = mounts["/var/lib/kubelet/pod-resources"]
    assert mount["readOnly"] and paths[mount["name"]] == "/var/lib/kubelet/pod-resources"
    rules = operand_rbac("state-device-plugin", parse_policy_spec({})).cluster_rules
    assert [r["verbs"] for r in rules if "pods" in r["resources"]] == [["patch"]]


def test_process_metrics_bring_the_host_proc_and_a_pod_list() -> None:
    plain = rendered({})
    mounts, _ = mounts_and_paths(plain, "nvidia-dcgm-exporter")
    assert "/host/proc" not in mounts
    assert not any(
        "pods" in r["resources"]
        for r in operand_rbac("state-dcgm-exporter", parse_policy_spec({})).cluster_rules
    )

    spec = {"dcgmExporter": {"env": PROCESS_METRICS}}
    mounts, paths = mounts_and_paths(rendered(spec), "nvidia-dcgm-exporter")
    proc = mounts["/host/proc"]
    assert proc["readOnly"] and paths[proc["name"]] == "/proc"
    pod = rendered(spec).daemonset("nvidia-dcgm-exporter")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["KUBEGPU_EXPORTER_PROC_ROOT"] == "/host/proc"
    assert env["KUBEGPU_EXPORTER_PROCESS_METRICS"] == "true"
    rules = operand_rbac("state-dcgm-exporter", parse_policy_spec(spec)).cluster_rules
    assert [r["verbs"] for r in rules if "pods" in r["resources"]] == [["get", "list", "watch"]]
