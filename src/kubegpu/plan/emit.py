"""A plan as the files an administrator applies, in the upstream formats.

- `mig-parted-config.yaml`: a mig-parted config (`version: v1`, `mig-configs`) with one
  named config per distinct node layout, plus `all-disabled`;
- `mig-parted-configmap.yaml`: the same as the ConfigMap the MIG manager mounts (key
  `config.yaml`);
- `device-plugin/<name>.yaml`: one device-plugin config file per distinct node setting;
- `device-plugin-configmap.yaml`: those files as one ConfigMap, a key per config;
- `clusterpolicy-values.yaml`: the GPU operator's Helm values that point at both;
- `label-nodes.sh`: `kubectl label` commands that select each node's configs;
- `plan.json`: the whole plan for tools.

With `--api dra` (`render_dra`): `dra/deviceclasses.yaml`, `dra/claims.yaml` (templates and
shared claims), `dra/pod-groups.yaml` (which pods use which claim, on which node), the
mig-parted config and `apply-mig.sh` where the plan has MIG, and `plan.json` (plan.dra).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from kubegpu.catalog import get_model, nvidia
from kubegpu.plan.dra import POD_CLAIM, claim_objects, dra_plan, pod_groups
from kubegpu.plan.inputs import Workload
from kubegpu.plan.result import MPS_ROOT, NodePlan, Plan, model_resource, plan_json
from kubegpu.sharing.devices import GPU_RESOURCE

NAMESPACE = "gpu-operator"
MIG_CONFIGMAP = "kubegpu-plan-mig-parted-config"
DP_CONFIGMAP = "kubegpu-plan-device-plugin-config"
MIG_CONFIG_LABEL = nvidia.MIG_CONFIG
DP_CONFIG_LABEL = nvidia.DEVICE_PLUGIN_CONFIG
ALL_DISABLED = "all-disabled"


def device_plugin_config(node: NodePlan) -> tuple[str, dict[str, Any]]:
    """The device-plugin config file a node needs, and its (content-derived) name."""
    flags: dict[str, Any] = {"migStrategy": node.mig_strategy}
    data: dict[str, Any] = {"version": "v1", "flags": flags}
    name = f"plan-{node.mig_strategy}"
    if node.renamed:
        # each model's full GPUs under their own name (matched by NVML product name)
        data["resources"] = {
            "gpus": [
                {"pattern": get_model(m).product_name, "name": model_resource(m)}
                for m in node.renamed
            ]
        }
        name += "-" + "-".join(node.renamed)
    if node.sharing != "none":
        shared = sorted({g.model for g in node.gpus if g.role == "shared"})
        names = [model_resource(m) if m in node.renamed else GPU_RESOURCE for m in shared]
        replicated = {
            "renameByDefault": True,
            "resources": [
                {"name": n, "replicas": node.replicas} for n in sorted(set(names or [GPU_RESOURCE]))
            ],
        }
        if node.sharing == "mps":
            flags["mpsRoot"] = MPS_ROOT
            data["sharing"] = {"mps": replicated}
            name += f"-mps{node.replicas}"
        else:
            data["sharing"] = {"timeSlicing": replicated}
            name += f"-ts{node.replicas}"
    return name, data


def mig_entries(node: NodePlan) -> list[dict[str, Any]]:
    """mig-parted entries for every GPU of a node, grouped by identical setting (a config
    with explicit device lists must cover each GPU, MIG-capable or not)."""
    groups: dict[tuple[str, bool, tuple[tuple[str, int], ...]], list[int]] = {}
    for g in node.gpus:
        key = (g.model, g.mig_enabled, tuple(sorted(g.mig.items())) if g.mig_enabled else ())
        groups.setdefault(key, []).append(g.index)
    out = []
    for (model, enabled, mix), idx in sorted(groups.items(), key=lambda kv: kv[1][0]):
        entry: dict[str, Any] = {
            "device-filter": [f"0x{get_model(model).pci_device_id:08X}"],
            "devices": idx,
            "mig-enabled": enabled,
        }
        if enabled:
            entry["mig-devices"] = dict(mix)
        out.append(entry)
    return out


def assign_configs(plan: Plan) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    """Name every node's configs and set its labels; returns (mig configs, plugin configs)."""
    mig_configs: dict[str, list[dict[str, Any]]] = {
        ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]
    }
    by_content: dict[str, str] = {}
    dp_configs: dict[str, dict[str, Any]] = {}
    for n in sorted(plan.nodes, key=lambda n: n.name):
        dp_name, dp = device_plugin_config(n)
        dp_configs[dp_name] = dp
        n.device_plugin_config = dp_name
        n.labels = {DP_CONFIG_LABEL: dp_name}
        if not n.mig_capable:
            n.mig_config = None
            continue
        entries = mig_entries(n)
        if not any(e["mig-enabled"] for e in entries):
            n.mig_config = ALL_DISABLED
        else:
            key = json.dumps(entries, sort_keys=True)
            if key not in by_content:
                by_content[key] = f"plan-{len(by_content) + 1}"
                mig_configs[by_content[key]] = entries
            n.mig_config = by_content[key]
        n.labels[MIG_CONFIG_LABEL] = n.mig_config
    return mig_configs, dp_configs


def _configmap(name: str, data: dict[str, str]) -> str:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": data,
    }
    return yaml.safe_dump(obj, sort_keys=False, width=1000)


def cluster_strategy(plan: Plan) -> str:
    """The ClusterPolicy's mig.strategy: it reaches every node's plugin as MIG_STRATEGY,
    which overrides the config file, so it may only be set when one value suits every node."""
    mig_nodes = {n.mig_strategy for n in plan.nodes if n.mig_strategy != "none"}
    mps = any(n.sharing == "mps" for n in plan.nodes)
    if not mig_nodes:
        return "none"
    if len(mig_nodes) == 1:
        only = next(iter(mig_nodes))
        # MPS is refused with mixed: then leave the strategy to each node's config file
        return "" if only == "mixed" and mps else only
    return ""


def render(plan: Plan) -> dict[str, str]:
    """Every output file, by relative path."""
    mig_configs, dp_configs = assign_configs(plan)
    files: dict[str, str] = {}
    mig_doc = {"version": "v1", "mig-configs": mig_configs}
    mig_text = yaml.safe_dump(mig_doc, sort_keys=False)
    files["mig-parted-config.yaml"] = mig_text
    files["mig-parted-configmap.yaml"] = _configmap(MIG_CONFIGMAP, {"config.yaml": mig_text})
    dp_texts = {}
    for name, data in sorted(dp_configs.items()):
        text = yaml.safe_dump(data, sort_keys=False)
        files[f"device-plugin/{name}.yaml"] = text
        dp_texts[name] = text
    files["device-plugin-configmap.yaml"] = _configmap(DP_CONFIGMAP, dp_texts)
    default_dp = (
        "plan-none"
        if "plan-none" in dp_configs
        else sorted(dp_configs)[0]
        if dp_configs
        else "plan-none"
    )
    strategy = cluster_strategy(plan)
    values: dict[str, Any] = {
        "mig": {"strategy": strategy},
        "devicePlugin": {"config": {"name": DP_CONFIGMAP, "default": default_dp}},
        "migManager": {"config": {"name": MIG_CONFIGMAP, "default": ALL_DISABLED}},
    }
    header = (
        "# GPU operator Helm values (ClusterPolicy) for this plan, written by `kubegpu plan`.\n"
        "# Create the two ConfigMaps first (mig-parted-configmap.yaml, device-plugin-configmap.yaml).\n"
    )
    if strategy == "":
        header += (
            "# mig.strategy is empty: nodes need different strategies (set in each node's\n"
            "# device-plugin config), and MIG_STRATEGY from the ClusterPolicy would override them.\n"
        )
    files["clusterpolicy-values.yaml"] = header + yaml.safe_dump(values, sort_keys=False)
    lines = [
        "#!/bin/sh",
        "# Select each node's MIG layout and device-plugin config (written by `kubegpu plan`).",
        "# Drain a node before its MIG layout changes; the MIG manager reports",
        "# nvidia.com/mig.config.state=success when the layout is applied.",
        "set -eu",
    ]
    for n in sorted(plan.nodes, key=lambda n: n.name):
        if n.bought:
            lines.append(f"# {n.name}: a {n.bought} server to buy")
        pairs = " ".join(f"{k}={v}" for k, v in sorted(n.labels.items()))
        lines.append(f"kubectl label node {n.name} --overwrite {pairs}")
    files["label-nodes.sh"] = "\n".join(lines) + "\n"
    files["plan.json"] = json.dumps(plan_json(plan), indent=2) + "\n"
    return files


DRA_FILES = (
    "dra/deviceclasses.yaml",
    "dra/claims.yaml",
    "dra/pod-groups.yaml",
)


def _yaml_docs(objects: list[dict[str, Any]]) -> str:
    return "---\n".join(yaml.safe_dump(o, sort_keys=False, width=1000) for o in objects)


def render_dra(
    plan: Plan, workloads: Mapping[str, Workload], mig_fallback: bool = False
) -> dict[str, str]:
    """`kubegpu plan --api dra`: the plan as DeviceClasses, ResourceClaimTemplates and shared
    ResourceClaims, which pods use which claim, and the MIG layouts that must exist first.
    No device-plugin config or ClusterPolicy values: a GPUCluster's DRA plugin serves the
    nodes. Raises DraPlanError where DRA cannot express a decision of the plan."""
    dp = dra_plan(plan, workloads, mig_fallback)
    mig_configs, _dp_configs = assign_configs(plan)
    for n in plan.nodes:  # no device plugin and no MIG manager read labels here
        n.device_plugin_config = ""
        n.labels = {}
        # the DRA plugin runs MPS per claim: the device plugin's MPS prerequisite is not one
        n.prerequisites = [p for p in n.prerequisites if not p.startswith("MPS: ")]
    files: dict[str, str] = {}
    notes = "".join(f"# - {n}\n" for n in dp.notes)
    files["dra/deviceclasses.yaml"] = (
        "# The DeviceClasses the claims use (as deploy/dra/deviceclasses.yaml; a GPUCluster\n"
        "# installs them too). Written by `kubegpu plan --api dra`.\n" + _yaml_docs(dp.classes())
    )
    files["dra/claims.yaml"] = (
        "# ResourceClaimTemplates (one claim per pod) and shared ResourceClaims (one per shared\n"
        "# GPU, used by the pods in its kubegpu.dev/planned-pods annotation), written by\n"
        "# `kubegpu plan --api dra`. Apply in the workloads' namespace.\n"
        + notes
        + _yaml_docs(claim_objects(dp))
    )
    files["dra/pod-groups.yaml"] = (
        "# Which pods use which claim: put each group's `spec` fields in those pods' spec (one\n"
        "# Deployment or StatefulSet per group) and list the claim in every container that\n"
        f"# uses the GPU: resources.claims: [{{name: {POD_CLAIM}}}].\n"
        + yaml.safe_dump(pod_groups(dp), sort_keys=False, width=1000, default_flow_style=None)
    )
    if any(n.mig_config not in (None, ALL_DISABLED) for n in plan.nodes):
        files["mig-parted-config.yaml"] = yaml.safe_dump(
            {"version": "v1", "mig-configs": mig_configs}, sort_keys=False
        )
        lines = [
            "#!/bin/sh",
            "# Apply this node's MIG layout (static MIG: its claims need the MIG devices to",
            "# exist; a GPUCluster runs no MIG manager). Run it on each node, drained, before",
            "# the pods. Written by `kubegpu plan --api dra`.",
            "set -eu",
            'here=$(dirname "$0")',
            'case "${NODE_NAME:-$(hostname)}" in',
        ]
        for n in sorted(plan.nodes, key=lambda n: n.name):
            if n.mig_config is not None:
                lines.append(
                    f'  {n.name}) exec kubegpu mig apply -f "$here/mig-parted-config.yaml" '
                    f"-c {n.mig_config} ;;"
                )
        lines += ['  *) echo "no MIG layout in this plan for this node" >&2; exit 1 ;;', "esac"]
        files["apply-mig.sh"] = "\n".join(lines) + "\n"
    files["plan.json"] = json.dumps(plan_json(plan), indent=2) + "\n"
    return files
