"""Least privilege, asked of a real kube-apiserver: the chart's and the operator's
ServiceAccounts, roles and bindings are installed as they ship, and the API server's own
authorizer says what each ServiceAccount may do (SubjectAccessReview) and lists everything it
may do (SelfSubjectRulesReview, with the ServiceAccount's own token). Both must match
docs/security.md exactly, and nothing under "Never allowed" may be allowed."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import Client, KubeConfig
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.authorization_v1 import (
    ResourceAttributes,
    SelfSubjectRulesReviewSpec,
    SubjectAccessReviewSpec,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.authorization_v1 import SelfSubjectRulesReview, SubjectAccessReview
from lightkube.resources.core_v1 import Namespace, ServiceAccount, ServiceAccountToken

from kube_objects import meta
from kubegpu.kube.policy import parse_policy_spec
from kubegpu.operator.access import SENSITIVE, Forbidden, Grant, expand, parse_documented
from kubegpu.operator.gpucluster import dra_states
from kubegpu.operator.rbac import operand_rbac, rbac_objects
from kubegpu.operator.states import STATES
from kubegpu.sim.controlplane.binaries import find_bin_dir
from kubegpu.sim.controlplane.plane import ControlPlane

ROOT = Path(__file__).parents[2]
CHART = ROOT / "deploy" / "helm" / "kubegpu"
OTHER_NAMESPACE = (
    "kube-system"  # where a cluster-wide grant is checked, and a namespaced one refused
)
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
EVERYTHING = parse_policy_spec(
    {
        "sandboxWorkloads": {"enabled": True},
        "nodeStatusExporter": {"enabled": True},
        "dcgmExporter": {"enabled": True, "enablePodLabels": True},
    }
)


@cache
def documented() -> dict[str, set[Grant]]:
    doc = ROOT / "docs" / "security.md"
    return parse_documented(doc.read_text(), "docs/security.md")


@dataclass(frozen=True)
class Installed:
    client: Client
    namespace: str
    kubeconfig: dict[str, Any]


def _chart_rbac(namespace: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(find_bin_dir() / "helm"), "template", "kg", str(CHART), "--namespace", namespace],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] in RBAC_KINDS]


def _operand_rbac(namespace: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    names = dict.fromkeys(s.name for s in (*STATES, *dra_states()) if s.daemonset)
    for name in names:
        objects += rbac_objects(operand_rbac(name, EVERYTHING), namespace, {})
    return objects


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> Iterator[Installed]:
    """The chart's and every operand's RBAC, installed in a fresh operator namespace."""
    client = Client(KubeConfig.from_file(control_plane.kubeconfig_path), field_manager="kg-test")
    namespace = f"lp-{uuid.uuid4().hex[:8]}"
    client.create(Namespace(metadata=ObjectMeta(name=namespace)))
    created = []
    try:
        for obj in [*_chart_rbac(namespace), *_operand_rbac(namespace)]:
            resource = from_dict(obj)
            client.apply(resource, force=True)
            if obj["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
                created.append(resource)
        kubeconfig = yaml.safe_load(control_plane.kubeconfig_path.read_text())
        yield Installed(client, namespace, kubeconfig)
    finally:
        for resource in created:
            with contextlib.suppress(ApiError):
                client.delete(cast(Any, type(resource)), cast(str, meta(resource).name))
        client.delete(Namespace, namespace)
        client.close()


def _split(resource: str) -> tuple[str, str | None]:
    name, _, sub = resource.partition("/")
    return name, sub or None


def allowed(env: Installed, account: str, verb: str, group: str, resource: str, ns: str) -> bool:
    """The API server's answer to "may this ServiceAccount do this?"."""
    name, sub = _split(resource)
    review = SubjectAccessReview(
        spec=SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{env.namespace}:{account}",
            groups=[
                "system:serviceaccounts",
                f"system:serviceaccounts:{env.namespace}",
                "system:authenticated",
            ],
            resourceAttributes=ResourceAttributes(
                verb=verb, group=group, resource=name, subresource=sub, namespace=ns
            ),
        )
    )
    result = env.client.create(review)
    assert result.status is not None
    return bool(result.status.allowed)


def rules_seen_by(env: Installed, account: str, namespace: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every rule the API server applies to the ServiceAccount in
    one namespace, as the ServiceAccount itself sees them with its own token."""
    token_request = ServiceAccountToken(
        metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], expirationSeconds=600)
    )
    token = env.client.create(token_request, account, namespace=env.namespace)
    assert token.status is not None
    config = dict(env.kubeconfig)
    config["users"] = [{**u, "user": {"token": token.status.token}} for u in config["users"]]
    with Client(KubeConfig.from_dict(config)) as as_account:
        review = as_account.create(
            SelfSubjectRulesReview(spec=SelfSubjectRulesReviewSpec(namespace=namespace))
        )
    assert review.status is not None and not review.status.incomplete
    rules = [r.to_dict() for r in review.status.resourceRules]
    return {(g.group, g.resource, g.verb) for g in expand(rules, "cluster")}


def accounts() -> list[str]:
    return sorted(documented())


@pytest.fixture(scope="module")
def baseline(installed: Installed) -> dict[str, set[tuple[str, str, str]]]:
    """What any ServiceAccount may do with no binding of ours (the API server's defaults:
    reviewing its own access), per namespace."""
    name = "kg-nobody"
    installed.client.create(
        ServiceAccount(metadata=ObjectMeta(name=name, namespace=installed.namespace))
    )
    return {ns: rules_seen_by(installed, name, ns) for ns in (installed.namespace, OTHER_NAMESPACE)}


@pytest.mark.parametrize("account", accounts())
def test_the_api_server_allows_every_documented_grant(installed: Installed, account: str) -> None:
    refused = [
        str(g)
        for g in sorted(documented()[account])
        if not allowed(
            installed,
            account,
            g.verb,
            g.group,
            g.resource,
            installed.namespace if g.scope == "namespace" else OTHER_NAMESPACE,
        )
    ]
    assert not refused, f"{account}: documented but refused: {refused}"


@pytest.mark.parametrize("account", accounts())
def test_namespaced_grants_stop_at_the_operator_namespace(
    installed: Installed, account: str
) -> None:
    grants = documented()[account]
    cluster = {(g.group, g.resource, g.verb) for g in grants if g.scope == "cluster"}
    leaking = [
        str(g)
        for g in sorted(grants)
        if g.scope == "namespace"
        and (g.group, g.resource, g.verb) not in cluster
        and allowed(installed, account, g.verb, g.group, g.resource, OTHER_NAMESPACE)
    ]
    assert not leaking, f"{account}: allowed outside its namespace: {leaking}"


@pytest.mark.parametrize("account", accounts())
def test_the_api_server_refuses_every_sensitive_request(installed: Installed, account: str) -> None:
    def ns(f: Forbidden) -> str:
        return installed.namespace if f.scope == "namespace" else OTHER_NAMESPACE

    granted = [
        f"{f.scope}: {f.verb} {f.resource}.{f.group} ({f.why})"
        for f in SENSITIVE
        if allowed(installed, account, f.verb, f.group, f.resource, ns(f))
    ]
    assert not granted, f"{account} may do what no kubegpu ServiceAccount may: {granted}"


@pytest.mark.parametrize("account", accounts())
def test_the_api_server_grants_nothing_beyond_the_documented_list(
    installed: Installed, baseline: dict[str, set[tuple[str, str, str]]], account: str
) -> None:
    grants = documented()[account]
    everywhere = {(g.group, g.resource, g.verb) for g in grants if g.scope == "cluster"}
    at_home = everywhere | {(g.group, g.resource, g.verb) for g in grants}
    for ns, expected in ((installed.namespace, at_home), (OTHER_NAMESPACE, everywhere)):
        seen = rules_seen_by(installed, account, ns) - baseline[ns]
        assert seen == expected, (
            f"{account} in {ns}: beyond the documented list {sorted(seen - expected)}; "
            f"documented but not granted {sorted(expected - seen)}"
        )


def test_a_grown_role_is_caught(installed: Installed) -> None:
    """The check above can fail: give one ServiceAccount one more verb and look again."""
    account = "nvidia-node-status-exporter"
    role = from_dict(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "kg-grown", "namespace": installed.namespace},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        }
    )
    binding = from_dict(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "kg-grown", "namespace": installed.namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "kg-grown",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": installed.namespace}
            ],
        }
    )
    installed.client.create(role)
    installed.client.create(binding)
    try:
        seen = rules_seen_by(installed, account, installed.namespace)
        assert ("", "configmaps", "get") in seen
        assert allowed(installed, account, "get", "", "configmaps", installed.namespace)
    finally:
        installed.client.delete(cast(Any, type(binding)), "kg-grown", namespace=installed.namespace)
        installed.client.delete(cast(Any, type(role)), "kg-grown", namespace=installed.namespace)
