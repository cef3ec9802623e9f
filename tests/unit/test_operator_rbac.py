"""Least privilege for the operands' ServiceAccounts."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.kube.policy import parse_policy_spec
from kubegpu.operator.rbac import operand_rbac
from kubegpu.operator.render import ClusterFacts, render
from kubegpu.operator.states import STATES

# every operand enabled, so every state's RBAC is looked at
EVERYTHING = parse_policy_spec(
    {
        "sandboxWorkloads": {"enabled": True},
        "nodeStatusExporter": {"enabled": True},
        "dcgmExporter": {"enabled": True, "enablePodLabels": True},
    }
)
OPERAND_STATES = [s.name for s in STATES if s.daemonset]
KUBEGPU_AGENTS = [
    "state-operator-validation",
    "state-device-plugin",
    "state-mps-control-daemon",
    "state-dcgm-exporter",
    "gpu-feature-discovery",
    "state-mig-manager",
    "state-node-status-exporter",
]


def verbs_on(rules: list[dict[str, list[str]]], resource: str, group: str = "") -> set[str]:
    return {
        v
        for r in rules
        if group in r["apiGroups"] and resource in r["resources"]
        for v in r["verbs"]
    }


@pytest.mark.parametrize("state", OPERAND_STATES)
def test_no_wildcards_and_no_secrets(state: str) -> None:
    r = operand_rbac(state, EVERYTHING)
    for rule in [*r.cluster_rules, *r.namespace_rules]:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[key], (state, rule)
        assert "secrets" not in rule["resources"], (state, rule)


@pytest.mark.parametrize("state", OPERAND_STATES)
def test_cluster_wide_a_node_agent_may_patch_only_nodes(state: str) -> None:
    r = operand_rbac(state, EVERYTHING)
    assert verbs_on(r.cluster_rules, "nodes") <= {"get", "list", "watch", "patch"}
    for rule in r.cluster_rules:
        writes = set(rule["verbs"]) & {"patch", "update"}
        if writes and rule["resources"] == ["pods"]:
            # the one exception: the device plugin's isolation annotation on GPU pods
            assert state == "state-device-plugin" and rule["verbs"] == ["patch"], (state, rule)
        elif writes:
            assert rule["resources"] == ["nodes"] and writes == {"patch"}, (state, rule)
        assert "deletecollection" not in rule["verbs"]


@pytest.mark.parametrize("state", KUBEGPU_AGENTS)
def test_kubegpu_agents_only_read_pods_or_manage_their_own_workload_pods(state: str) -> None:
    r = operand_rbac(state, EVERYTHING)
    if state == "state-device-plugin":  # annotates the pods it allocated to; reads none
        assert verbs_on(r.cluster_rules, "pods") == {"patch"}
    else:
        assert verbs_on(r.cluster_rules, "pods") <= {"get", "list", "watch"}
    if state == "state-operator-validation":
        assert verbs_on(r.namespace_rules, "pods") == {"create", "get", "list", "watch", "delete"}
    else:
        assert verbs_on(r.namespace_rules, "pods") <= {"get", "list", "watch"}


def test_who_may_label_nodes() -> None:
    labellers = {
        s
        for s in OPERAND_STATES
        if "patch" in verbs_on(operand_rbac(s, EVERYTHING).cluster_rules, "nodes")
    }
    assert labellers == {
        "state-driver",  # the upstream driver manager pauses operands during upgrades
        "gpu-feature-discovery",
        "state-mig-manager",
        "state-vgpu-device-manager",
        "state-cc-manager",
    }


def test_the_exporter_reads_pods_only_when_asked_for_pod_labels() -> None:
    plain = operand_rbac("state-dcgm-exporter", parse_policy_spec({}))
    assert verbs_on(plain.cluster_rules, "pods") == set()
    assert verbs_on(operand_rbac("state-dcgm-exporter", EVERYTHING).cluster_rules, "pods") == {
        "get",
        "list",
        "watch",
    }


def test_rendered_bindings_bind_each_operands_own_service_account() -> None:
    rendered = render(EVERYTHING, ClusterFacts(namespace="ops", gpu_nodes=1, image_env=_images()))
    accounts = {o["metadata"]["name"] for o in rendered.objects() if o["kind"] == "ServiceAccount"}
    for obj in rendered.objects():
        if obj["kind"] in {"ClusterRoleBinding", "RoleBinding"}:
            (subject,) = obj["subjects"]
            assert subject == {
                "kind": "ServiceAccount",
                "name": obj["metadata"]["name"],
                "namespace": "ops",
            }
            assert subject["name"] in accounts
        if obj["kind"] == "DaemonSet":
            assert obj["spec"]["template"]["spec"]["serviceAccountName"] in accounts


def _images() -> dict[str, Any]:
    names = [
        "DRIVER_IMAGE",
        "CONTAINER_TOOLKIT_IMAGE",
        "DCGM_IMAGE",
        "VGPU_MANAGER_IMAGE",
        "VGPU_DEVICE_MANAGER_IMAGE",
        "VFIO_MANAGER_IMAGE",
        "SANDBOX_DEVICE_PLUGIN_IMAGE",
        "KATA_SANDBOX_DEVICE_PLUGIN_IMAGE",
        "KATA_MANAGER_IMAGE",
        "CC_MANAGER_IMAGE",
    ]
    return {n: f"example.com/{n.lower()}:1" for n in names}
