"""The Helm chart (deploy/helm/kubegpu) and the image: `helm lint`, `helm template`, what the
values turn into, and that the operator holds every permission it hands out."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command

from kubegpu.cli.app import app
from kubegpu.kube.crds import crd_files
from kubegpu.kube.policy import parse_policy_spec, unknown_fields
from kubegpu.operator.rbac import operand_rbac
from kubegpu.operator.render import KUBEGPU_COMMANDS
from kubegpu.operator.states import STATES
from kubegpu.sim.controlplane.binaries import find_bin_dir

ROOT = Path(__file__).parents[2]
CHART = ROOT / "deploy" / "helm" / "kubegpu"


def helm(*args: str) -> str:
    result = subprocess.run(
        [str(find_bin_dir() / "helm"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@cache
def template(*sets: str) -> tuple[dict[str, Any], ...]:
    # `str:key=value` sets a string (helm's --set would make `true` a boolean)
    flags = [f"--set-string={s[4:]}" if s.startswith("str:") else f"--set={s}" for s in sets]
    out = helm(
        "template", "kg", str(CHART), "--namespace", "gpu-operator", "--include-crds", *flags
    )
    return tuple(d for d in yaml.safe_load_all(out) if d)


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def test_helm_lint_passes() -> None:
    assert "0 chart(s) failed" in helm("lint", str(CHART))


def test_the_chart_installs_crds_operator_rbac_and_a_cluster_policy() -> None:
    docs = template()
    kinds = sorted({(d["kind"], d["metadata"]["name"]) for d in docs})
    assert kinds == [
        ("ClusterPolicy", "cluster-policy"),
        ("ClusterRole", "kubegpu-operator"),
        ("ClusterRoleBinding", "kubegpu-operator"),
        ("CustomResourceDefinition", "clusterpolicies.nvidia.com"),
        ("CustomResourceDefinition", "gpuclusters.nvidia.com"),
        ("CustomResourceDefinition", "nvidiadrivers.nvidia.com"),
        ("Deployment", "kubegpu-operator"),
        ("Role", "kubegpu-operator"),
        ("RoleBinding", "kubegpu-operator"),
        ("ServiceAccount", "kubegpu-operator"),
    ]
    shipped = {
        f"nvidia.com_{d['spec']['names']['plural']}.yaml"
        for d in docs
        if d["kind"] == "CustomResourceDefinition"
    }
    assert shipped == set(crd_files())


def test_the_operator_runs_the_kubegpu_image_tagged_with_the_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    deployment = one(template(), "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == f"ghcr.io/kubegpu/kubegpu:{chart['appVersion']}"
    assert c["command"] == ["kubegpu", "operator"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["KUBEGPU_IMAGE"] == c["image"]
    assert env["OPERATOR_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert pod["serviceAccountName"] == "kubegpu-operator"
    tagged = one(template("image.tag=dev"), "Deployment")
    assert (
        tagged["spec"]["template"]["spec"]["containers"][0]["image"]
        == "ghcr.io/kubegpu/kubegpu:dev"
    )


def test_the_rendered_cluster_policy_is_valid_for_the_crd() -> None:
    policy = one(template(), "ClusterPolicy")
    assert unknown_fields(policy["spec"]) == []
    spec = parse_policy_spec(policy["spec"])
    assert spec.mig_strategy == "single"
    assert spec.driver.is_enabled(True) and spec.toolkit.is_enabled(True)
    assert not spec.dcgm.is_enabled(True)
    assert spec.devicePlugin.config is None
    assert spec.migManager.config is not None and spec.migManager.config.default == "all-disabled"


def test_values_named_like_the_upstream_charts_reach_the_policy() -> None:
    docs = template(
        "mig.strategy=mixed",
        "driver.enabled=false",
        "toolkit.enabled=false",
        "devicePlugin.config.name=plugin-configs",
        "devicePlugin.config.default=any",
        "migManager.config.name=custom-mig-parted-config",
        "migManager.env[0].name=WITH_REBOOT",
        "str:migManager.env[0].value=true",
        "dcgmExporter.serviceMonitor.enabled=true",
        "nodeStatusExporter.enabled=true",
    )
    policy = one(docs, "ClusterPolicy")
    assert unknown_fields(policy["spec"]) == []
    spec = parse_policy_spec(policy["spec"])
    assert spec.mig_strategy == "mixed"
    assert spec.driver.enabled is False and spec.toolkit.enabled is False
    assert spec.devicePlugin.config is not None
    assert (spec.devicePlugin.config.name, spec.devicePlugin.config.default) == (
        "plugin-configs",
        "any",
    )
    assert (
        spec.migManager.config is not None
        and spec.migManager.config.name == "custom-mig-parted-config"
    )
    assert spec.migManager.env_pairs() == [("WITH_REBOOT", "true")]
    assert spec.dcgmExporter.serviceMonitor is not None and spec.dcgmExporter.serviceMonitor.enabled
    assert spec.nodeStatusExporter.enabled is True


def test_the_chart_can_create_the_plugin_and_mig_configmaps() -> None:
    docs = template(
        "devicePlugin.config.create=true",
        "devicePlugin.config.name=plugin-configs",
        "devicePlugin.config.data.default=version: v1",
        "migManager.config.create=true",
        "migManager.config.name=my-mig",
        "migManager.config.data.config\\.yaml=version: v1",
    )
    assert one(docs, "ConfigMap", "plugin-configs")["data"] == {"default": "version: v1"}
    assert one(docs, "ConfigMap", "my-mig")["data"] == {"config.yaml": "version: v1"}


def _covers(granted: list[dict[str, Any]], rule: dict[str, list[str]]) -> bool:
    for group in rule["apiGroups"]:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                if not any(
                    group in g["apiGroups"] and resource in g["resources"] and verb in g["verbs"]
                    for g in granted
                ):
                    return False
    return True


def test_the_operator_holds_every_permission_it_grants_operands() -> None:
    """Kubernetes refuses to let a ServiceAccount create roles beyond its own rights."""
    docs = template()
    cluster = one(docs, "ClusterRole")["rules"]
    namespaced = cluster + one(docs, "Role")["rules"]
    everything = parse_policy_spec(
        {"sandboxWorkloads": {"enabled": True}, "dcgmExporter": {"enablePodLabels": True}}
    )
    for state in STATES:
        if not state.daemonset:
            continue
        r = operand_rbac(state.name, everything)
        for rule in r.cluster_rules:
            assert _covers(cluster, rule), (state.name, rule)
        for rule in r.namespace_rules:
            assert _covers(namespaced, rule), (state.name, rule)


def test_the_operator_may_manage_every_kind_it_renders() -> None:
    docs = template()
    rules = one(docs, "ClusterRole")["rules"] + one(docs, "Role")["rules"]
    kinds = {
        ("", "serviceaccounts"),
        ("", "configmaps"),
        ("", "services"),
        ("apps", "daemonsets"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ("node.k8s.io", "runtimeclasses"),
        ("monitoring.coreos.com", "servicemonitors"),
    }
    for group, resource in kinds:
        assert _covers(
            rules,
            {
                "apiGroups": [group],
                "resources": [resource],
                "verbs": ["get", "list", "watch", "create", "patch", "delete"],
            },
        ), resource
    assert _covers(
        rules,
        {"apiGroups": ["nvidia.com"], "resources": ["clusterpolicies/status"], "verbs": ["patch"]},
    )


def test_the_dockerfile_builds_one_image_whose_entrypoint_is_kubegpu() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    assert re.search(r"^RUN pip install [^\n]*--no-deps[^\n]* \. ", text, re.M)  # the lock first
    assert re.search(r'^ENTRYPOINT \["kubegpu"\]', text, re.M)


@pytest.mark.parametrize("command", sorted(KUBEGPU_COMMANDS.values()))
def test_every_subcommand_the_operator_renders_exists_in_the_cli(command: tuple[str, ...]) -> None:
    group: Any = get_command(app)
    for word in command:
        ctx = group.context_class(group)  # commands load lazily: ask the group, not its dict
        names = group.list_commands(ctx)
        assert word in names, f"kubegpu {' '.join(command)}: no {word!r} in {sorted(names)}"
        group = group.get_command(ctx, word)
        assert group is not None
