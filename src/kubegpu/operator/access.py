"""What each ServiceAccount may do, as a flat set of grants, and the documented list to check
it against.

RBAC rules are compact (several verbs, groups and resources in one rule); comparing two sets
of rules needs them flattened into single (scope, group, resource, verb) grants. The
documented list lives in docs/security.md as one Markdown table per ServiceAccount; the tests
compare it with the rules the chart and the operator actually install, so a role that grows
without the documentation growing with it fails. `SENSITIVE` names what no ServiceAccount of
kubegpu may do, whatever the table says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Scope = Literal["cluster", "namespace"]
SCOPES: tuple[Scope, ...] = ("cluster", "namespace")
CORE = "core"  # how the documentation writes the core API group ("")

_HEADING = re.compile(r"^#{2,4}\s+ServiceAccount\s+`([^`]+)`\s*$")
_ANY_HEADING = re.compile(r"^#{1,6}\s")


class AccessDocError(ValueError):
    """The documented access list cannot be read; the message names file, line and value."""


@dataclass(frozen=True, order=True)
class Grant:
    """One verb on one resource of one API group, cluster-wide or in the operator's
    namespace only."""

    scope: Scope
    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        return f"{self.scope}: {self.verb} {self.resource}.{self.group or CORE}"


def expand(rules: Iterable[Mapping[str, Any]], scope: Scope) -> set[Grant]:
    """Every grant a list of RBAC rules gives (non-resource URLs are not expanded; a rule with
    one is kept as a `nonResourceURLs` grant so that it cannot slip past a comparison)."""
    out: set[Grant] = set()
    for rule in rules:
        verbs = rule.get("verbs") or []
        for url in rule.get("nonResourceURLs") or []:
            out |= {Grant(scope, "nonResourceURLs", url, v) for v in verbs}
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                names = rule.get("resourceNames")
                shown = f"{resource}[{','.join(names)}]" if names else resource
                out |= {Grant(scope, group, shown, v) for v in verbs}
    return out


def _split(cell: str) -> list[str]:
    return [part.strip().strip("`") for part in cell.split(",") if part.strip()]


def parse_documented(text: str, source: str = "docs/security.md") -> dict[str, set[Grant]]:
    """The grants docs/security.md lists for each ServiceAccount: under each heading
    "ServiceAccount `name`", a table whose rows are `| scope | group | resources | verbs |
    why |`, scope `cluster` or `namespace`, group `core` for the core group. A ServiceAccount
    with no row is documented as holding nothing."""
    documented: dict[str, set[Grant]] = {}
    current: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        heading = _HEADING.match(line)
        if heading:
            current = heading.group(1)
            if current in documented:
                raise AccessDocError(f"{source}:{number}: ServiceAccount {current!r} twice")
            documented[current] = set()
            continue
        if _ANY_HEADING.match(line):
            current = None
            continue
        if current is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = cells[0].strip("`")
        if first == "scope" or set(first) <= set("-: "):
            continue  # the header and its separator
        if len(cells) < 5:
            raise AccessDocError(
                f"{source}:{number}: row for {current!r} has {len(cells)} cells, "
                "expected scope | group | resources | verbs | why"
            )
        if first not in SCOPES:
            raise AccessDocError(
                f"{source}:{number}: scope {first[:40]!r}: use cluster or namespace"
            )
        if not cells[4]:
            raise AccessDocError(f"{source}:{number}: row for {current!r} says not why")
        groups = ["" if g == CORE else g for g in _split(cells[1])]
        for group in groups:
            for resource in _split(cells[2]):
                for verb in _split(cells[3]):
                    documented[current].add(Grant(first, group, resource, verb))
    return documented


@dataclass(frozen=True)
class Forbidden:
    """Something no ServiceAccount may do: `scope` cluster means in any namespace (checked in
    kube-system) or on a cluster-scoped resource."""

    scope: Scope
    group: str
    resource: str
    verb: str
    why: str

    def covered_by(self, grants: Iterable[Grant]) -> Grant | None:
        """The grant that would allow this, if any (wildcards included)."""
        for g in grants:
            if self.scope == "cluster" and g.scope == "namespace":
                continue
            if (
                g.group in {self.group, "*"}
                and g.resource in {self.resource, "*"}
                and g.verb in {self.verb, "*"}
            ):
                return g
        return None


_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"

SENSITIVE: tuple[Forbidden, ...] = (
    *(
        Forbidden(scope, "", "secrets", verb, "Secrets hold credentials of every tenant")
        for scope in SCOPES
        for verb in ("get", "list", "watch")
    ),
    Forbidden("cluster", "", "nodes", "delete", "deleting a Node evicts everything on it"),
    Forbidden("cluster", "", "nodes", "create", "a fake Node can attract workloads"),
    Forbidden("cluster", "", "nodes", "update", "labels are patched, never replaced"),
    *(
        Forbidden(scope, "", sub, "create", "a shell in someone else's container")
        for scope in SCOPES
        for sub in ("pods/exec", "pods/attach", "pods/portforward")
    ),
    Forbidden("cluster", "", "pods", "create", "pods in other namespaces run as their SAs"),
    Forbidden("cluster", "apps", "daemonsets", "create", "a DaemonSet outside its namespace"),
    Forbidden("namespace", "", "serviceaccounts/token", "create", "minting tokens"),
    Forbidden("cluster", "", "serviceaccounts/token", "create", "minting tokens"),
    *(
        Forbidden("cluster", _RBAC, res, verb, "granting permissions it does not hold")
        for res in ("clusterroles", "roles")
        for verb in ("escalate", "bind")
    ),
    *(
        Forbidden("cluster", "", res, "impersonate", "acting as another identity")
        for res in ("users", "groups", "serviceaccounts")
    ),
    Forbidden("cluster", _RBAC, "rolebindings", "create", "binding roles in other namespaces"),
    Forbidden("cluster", _ADMISSION, "mutatingwebhookconfigurations", "create", "admission"),
    Forbidden("cluster", _ADMISSION, "validatingwebhookconfigurations", "create", "admission"),
    Forbidden("cluster", "apiextensions.k8s.io", "customresourcedefinitions", "create", "CRDs"),
    Forbidden("cluster", "certificates.k8s.io", "certificatesigningrequests", "create", "certs"),
    Forbidden("cluster", "*", "*", "*", "everything"),
    Forbidden("namespace", "*", "*", "*", "everything in its own namespace"),
)


def violations(grants: Iterable[Grant]) -> list[tuple[Forbidden, Grant]]:
    """The sensitive things a set of grants allows, each with the grant that allows it."""
    grants = list(grants)
    found = []
    for f in SENSITIVE:
        g = f.covered_by(grants)
        if g is not None:
            found.append((f, g))
    return found
