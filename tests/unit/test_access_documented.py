"""Every permission kubegpu installs is the one docs/security.md lists, no more and no less,
and none of them is one of the sensitive things no ServiceAccount may hold."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.kube.policy import parse_policy_spec
from kubegpu.operator.access import (
    SENSITIVE,
    AccessDocError,
    Forbidden,
    Grant,
    expand,
    parse_documented,
    violations,
)
from kubegpu.operator.gpucluster import dra_states
from kubegpu.operator.rbac import operand_rbac
from kubegpu.operator.states import STATES
from kubegpu.sim.controlplane.binaries import find_bin_dir

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "security.md"
CHART = ROOT / "deploy" / "helm" / "kubegpu"
OPERATOR_SA = "kubegpu-operator"

# every optional feature that adds a permission, on
EVERYTHING = parse_policy_spec(
    {
        "sandboxWorkloads": {"enabled": True},
        "nodeStatusExporter": {"enabled": True},
        "dcgmExporter": {"enabled": True, "enablePodLabels": True, "enablePodUID": True},
    }
)
OPERAND_STATES = list(dict.fromkeys(s.name for s in (*STATES, *dra_states()) if s.daemonset))


@cache
def documented() -> dict[str, set[Grant]]:
    return parse_documented(DOC.read_text(), str(DOC.relative_to(ROOT)))


@cache
def chart_docs() -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [str(find_bin_dir() / "helm"), "template", "kg", str(CHART), "--namespace", "gpu-operator"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def operator_grants() -> set[Grant]:
    """What the chart's roles give the operator's ServiceAccount."""
    grants: set[Grant] = set()
    for d in chart_docs():
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == OPERATOR_SA:
            grants |= expand(d["rules"], "cluster")
        if d["kind"] == "Role" and d["metadata"]["name"] == OPERATOR_SA:
            grants |= expand(d["rules"], "namespace")
    return grants


def operand_grants(state: str, spec: Any = EVERYTHING) -> tuple[str, set[Grant]]:
    r = operand_rbac(state, spec)
    return r.service_account, expand(r.cluster_rules, "cluster") | expand(
        r.namespace_rules, "namespace"
    )


def difference(installed: set[Grant], listed: set[Grant]) -> str:
    extra = "\n".join(f"  installed, not documented: {g}" for g in sorted(installed - listed))
    missing = "\n".join(f"  documented, not installed: {g}" for g in sorted(listed - installed))
    return f"docs/security.md and the rules differ:\n{extra}\n{missing}"


def installed() -> dict[str, set[Grant]]:
    out = {OPERATOR_SA: operator_grants()}
    for state in OPERAND_STATES:
        account, grants = operand_grants(state)
        out[account] = grants
    return out


# -- the documented list and the installed rules are the same -----------------------------------


@pytest.mark.parametrize("state", OPERAND_STATES)
def test_each_operands_rules_are_exactly_the_documented_ones(state: str) -> None:
    account, grants = operand_grants(state)
    assert account in documented(), f"docs/security.md has no section for {account}"
    assert grants == documented()[account], difference(grants, documented()[account])


def test_the_operators_chart_rules_are_exactly_the_documented_ones() -> None:
    grants = operator_grants()
    assert grants, "the chart renders no role for the operator"
    assert grants == documented()[OPERATOR_SA], difference(grants, documented()[OPERATOR_SA])


def test_every_documented_service_account_is_created_by_the_chart_or_the_operator() -> None:
    chart_accounts = {d["metadata"]["name"] for d in chart_docs() if d["kind"] == "ServiceAccount"}
    assert chart_accounts == {OPERATOR_SA}
    assert set(documented()) == set(installed())


def test_an_optional_permission_is_granted_only_with_its_feature() -> None:
    _, plain = operand_grants("state-dcgm-exporter", parse_policy_spec({}))
    assert plain < documented()["nvidia-dcgm-exporter"]
    assert not any(g.resource == "pods" for g in plain)


def test_the_operator_holds_every_grant_it_hands_out() -> None:
    """Kubernetes' escalation check: a role can only be created by someone who holds it all
    (a namespaced grant may be held cluster-wide)."""
    operator = operator_grants()
    for account, grants in installed().items():
        lacking = [
            g
            for g in grants
            if g not in operator and Grant("cluster", g.group, g.resource, g.verb) not in operator
        ]
        assert not lacking, (account, sorted(map(str, lacking)))


# -- nobody holds a sensitive permission ----------------------------------------------------------


@pytest.mark.parametrize("account", sorted(installed()))
def test_no_service_account_holds_a_sensitive_permission(account: str) -> None:
    found = violations(installed()[account])
    assert not found, [f"{f.verb} {f.resource} ({f.why}) via {g}" for f, g in found]


def test_a_wildcard_or_a_secret_rule_would_be_caught() -> None:
    wildcard = expand([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], "namespace")
    caught = {(f.scope, f.resource, f.verb) for f, _ in violations(wildcard)}
    assert ("namespace", "secrets", "get") in caught
    assert ("namespace", "*", "*") in caught
    assert ("cluster", "secrets", "get") not in caught  # a Role reaches only its namespace
    secrets = expand([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}], "cluster")
    assert [(f.scope, f.verb) for f, _ in violations(secrets)] == [
        ("cluster", "list"),
        ("namespace", "list"),
    ]


def test_the_sensitive_list_covers_secrets_nodes_exec_escalation_and_wildcards() -> None:
    wanted = {
        ("", "secrets", "list"),
        ("", "nodes", "delete"),
        ("", "pods/exec", "create"),
        ("rbac.authorization.k8s.io", "clusterroles", "escalate"),
        ("rbac.authorization.k8s.io", "clusterroles", "bind"),
        ("", "users", "impersonate"),
        ("*", "*", "*"),
    }
    assert wanted <= {(f.group, f.resource, f.verb) for f in SENSITIVE}


# -- reading the documented list ---------------------------------------------------------------


def test_rules_are_flattened_into_single_grants() -> None:
    rules = [
        {"apiGroups": ["", "apps"], "resources": ["a", "b"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["c"], "resourceNames": ["x"], "verbs": ["patch"]},
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
    ]
    assert expand(rules, "cluster") == {
        Grant("cluster", "", "a", "get"),
        Grant("cluster", "", "b", "get"),
        Grant("cluster", "apps", "a", "get"),
        Grant("cluster", "apps", "b", "get"),
        Grant("cluster", "", "c[x]", "patch"),
        Grant("cluster", "nonResourceURLs", "/metrics", "get"),
    }


def test_a_documented_table_is_read_per_service_account() -> None:
    text = """
### ServiceAccount `a`

| scope | group | resources | verbs | why |
|---|---|---|---|---|
| cluster | core, apps | nodes | get, patch | because |

### ServiceAccount `b`

Nothing.

## Other

| cluster | core | secrets | get | not a ServiceAccount's table |
"""
    assert parse_documented(text) == {
        "a": {
            Grant("cluster", "", "nodes", "get"),
            Grant("cluster", "", "nodes", "patch"),
            Grant("cluster", "apps", "nodes", "get"),
            Grant("cluster", "apps", "nodes", "patch"),
        },
        "b": set(),
    }


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("| everywhere | core | nodes | get | x |", "x.md:3: scope 'everywhere'"),
        ("| cluster | core | nodes | get |  |", "x.md:3: row for 'a' says not why"),
        ("| cluster | core | nodes |", "x.md:3: row for 'a' has 3 cells"),
    ],
)
def test_a_bad_row_names_file_line_and_value(row: str, message: str) -> None:
    with pytest.raises(AccessDocError, match=re.escape(message)):
        parse_documented(f"### ServiceAccount `a`\n\n{row}\n", "x.md")


def test_a_service_account_documented_twice_is_refused() -> None:
    text = "### ServiceAccount `a`\n\n### ServiceAccount `a`\n"
    with pytest.raises(AccessDocError, match=re.escape("x.md:3: ServiceAccount 'a' twice")):
        parse_documented(text, "x.md")


def test_a_cluster_wide_grant_covers_a_namespaced_sensitive_thing_but_not_the_reverse() -> None:
    f_ns = Forbidden("namespace", "", "secrets", "get", "")
    f_cluster = Forbidden("cluster", "", "secrets", "get", "")
    cluster = Grant("cluster", "", "secrets", "get")
    namespaced = Grant("namespace", "", "secrets", "get")
    assert f_ns.covered_by([cluster]) == cluster
    assert f_ns.covered_by([namespaced]) == namespaced
    assert f_cluster.covered_by([namespaced]) is None
