"""Least-privilege RBAC for each operand's ServiceAccount.

Node agents read only what they need; the only cluster-wide write they get is `patch` on
Nodes (labels), and only the agents that publish labels get that. Nothing reads Secrets,
and no rule uses `*`. The operator itself (the Helm chart's ClusterRole) must hold every
permission it grants here, so Kubernetes' escalation check lets it create these roles; a
test checks that. What each ServiceAccount may do, and why, is listed in docs/security.md;
tests compare that list with these rules and ask a real API server (a rule added here
without a row there fails).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubegpu.kube.policy import ClusterPolicySpec

Rule = dict[str, list[str]]

READ = ["get", "list", "watch"]


def rule(group: str, resources: list[str], verbs: list[str]) -> Rule:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


NODES_READ = rule("", ["nodes"], READ)
NODES_LABEL = rule("", ["nodes"], [*READ, "patch"])
# node agents record what they did as Events on their Node (namespace default)
EVENTS_CREATE = rule("", ["events"], ["create"])


@dataclass(frozen=True)
class OperandRbac:
    service_account: str
    cluster_rules: list[Rule] = field(default_factory=list)
    namespace_rules: list[Rule] = field(default_factory=list)


def operand_rbac(state: str, spec: ClusterPolicySpec) -> OperandRbac:
    """The ServiceAccount name and rules of one state's operand."""
    match state:
        case "state-driver":
            # the driver manager (upstream image) evicts GPU pods before a driver reload
            return OperandRbac(
                "nvidia-driver",
                [
                    NODES_LABEL,
                    rule("", ["pods"], [*READ, "delete"]),
                    rule("", ["pods/eviction"], ["create"]),
                    rule("apps", ["daemonsets"], READ),
                ],
            )
        case "state-container-toolkit":
            return OperandRbac("nvidia-container-toolkit", [NODES_READ])
        case "state-operator-validation":
            # workload pods (CUDA, plugin) run in the operator namespace
            return OperandRbac(
                "nvidia-operator-validator",
                [NODES_READ, EVENTS_CREATE],
                [rule("", ["pods"], ["create", *READ, "delete"])],
            )
        case "state-device-plugin":
            # annotates each GPU pod with the isolation it got (a merge patch, nothing read)
            return OperandRbac(
                "nvidia-device-plugin", [NODES_READ, EVENTS_CREATE, rule("", ["pods"], ["patch"])]
            )
        case "state-mps-control-daemon":
            return OperandRbac("nvidia-mps-control-daemon", [NODES_READ, EVENTS_CREATE])
        case "state-dcgm":
            return OperandRbac("nvidia-dcgm")
        case "state-dcgm-exporter":
            e = spec.dcgmExporter
            rules = [NODES_READ]
            if e.enablePodLabels or e.enablePodUID or e.process_metrics():
                rules.append(rule("", ["pods"], READ))
            return OperandRbac("nvidia-dcgm-exporter", rules)
        case "gpu-feature-discovery":
            return OperandRbac("nvidia-gpu-feature-discovery", [NODES_LABEL, EVENTS_CREATE])
        case "state-mig-manager":
            # pauses operands through deploy labels, waits for the pods on its node to go
            # (operands and third-party GPU clients, in any namespace), keeps its generated
            # config in a ConfigMap owned by its pod
            return OperandRbac(
                "nvidia-mig-manager",
                [NODES_LABEL, EVENTS_CREATE, rule("", ["pods"], ["list"])],
                [
                    rule("", ["pods"], ["get"]),
                    rule("", ["configmaps"], [*READ, "create", "update", "patch"]),
                ],
            )
        case "state-node-status-exporter":
            return OperandRbac("nvidia-node-status-exporter", [NODES_READ])
        case "state-vgpu-manager":
            return OperandRbac("nvidia-vgpu-manager", [NODES_READ])
        case "state-vgpu-device-manager":
            return OperandRbac("nvidia-vgpu-device-manager", [NODES_LABEL])
        case "state-sandbox-validation":
            return OperandRbac("nvidia-sandbox-validator", [NODES_READ])
        case "state-vfio-manager":
            return OperandRbac("nvidia-vfio-manager", [NODES_READ])
        case "state-sandbox-device-plugin":
            return OperandRbac("nvidia-sandbox-device-plugin", [NODES_READ])
        case "state-kata-device-plugin":
            return OperandRbac("nvidia-kata-sandbox-device-plugin", [NODES_READ])
        case "state-kata-manager":
            return OperandRbac("nvidia-kata-manager", [NODES_READ])
        case "state-cc-manager":
            return OperandRbac("nvidia-cc-manager", [NODES_LABEL])
        case "state-dra-driver":
            # publishes its node's ResourceSlices, reads the claims it prepares and its
            # Node (the slices' owner), reports failed prepares
            return OperandRbac(
                "nvidia-dra-driver-gpu",
                [
                    rule("resource.k8s.io", ["resourceslices"], [*READ, "create", "delete"]),
                    rule("resource.k8s.io", ["resourceclaims"], ["get"]),
                    rule("", ["nodes"], ["get"]),
                    EVENTS_CREATE,
                ],
            )
    raise KeyError(f"no operand RBAC for state {state!r}")


def rbac_objects(rbac: OperandRbac, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole(+Binding) and Role(+Binding) for one operand."""
    name = rbac.service_account
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
        }
    ]
    if rbac.cluster_rules:
        objects += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name, "labels": labels},
                "rules": rbac.cluster_rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name, "labels": labels},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": subject,
            },
        ]
    if rbac.namespace_rules:
        objects += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "rules": rbac.namespace_rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": subject,
            },
        ]
    return objects
