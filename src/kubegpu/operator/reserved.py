"""Keys the operator relies on, which no user value may set: `reserved_key_problems(spec)`.

The operator finds its objects by their labels, selects its pods by them, detects changes
by an annotation and tells each pod which node it runs on through the downward API. A
policy value that set one of these keys would silently break that (a DaemonSet labelled
`app.kubernetes.io/managed-by: other` drops out of the operator's watches; an operand env
`NODE_NAME` makes one node's feature discovery label another node), so such a policy is
refused whole, naming the field and the key, and nothing is applied (docs/operator.md,
"Reserved keys").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from kubegpu.kube.policy import EnvVar
from kubegpu.operator.operands.context import HASH_ANNOTATION, MANAGED_BY_LABEL, STATE_LABEL

# label key -> what the operator uses it for
RESERVED_LABELS: dict[str, str] = {
    "app": "the DaemonSet's selector and its pods' label",
    "app.kubernetes.io/part-of": "marks the pods as kubegpu's",
    MANAGED_BY_LABEL: "the operator's watches select its objects by it",
    STATE_LABEL: "the state that owns an object (pruning)",
}
# annotation key -> what the operator uses it for
RESERVED_ANNOTATIONS: dict[str, str] = {
    HASH_ANNOTATION: "the operator's change detection (hash of the applied object)",
}
# env name -> the downward-API field the operator sets it from
RESERVED_ENV: dict[str, str] = {
    "NODE_NAME": "spec.nodeName",
    "OPERATOR_NAMESPACE": "metadata.namespace",
    "NAMESPACE": "metadata.namespace",
    "DEFAULT_GPU_CLIENTS_NAMESPACE": "metadata.namespace",
    "POD_NAME": "metadata.name",
}
# where user labels and annotations land on objects the operator owns, and which keys of
# the reserved tables each one may not set
LABEL_FIELDS: dict[str, tuple[str, ...]] = {
    "daemonsets.labels": tuple(RESERVED_LABELS),
    "dcgmExporter.serviceMonitor.additionalLabels": (MANAGED_BY_LABEL, STATE_LABEL),
}
ANNOTATION_FIELDS = ("daemonsets.annotations", "dcgmExporter.annotations")


def reserved_key_problems(spec: BaseModel) -> list[str]:
    """`field X: key K is reserved: why` for every reserved key a policy (ClusterPolicy or
    GPUCluster spec) sets, in field order."""
    problems: list[str] = []
    for path, keys in LABEL_FIELDS.items():
        for key in _mapping_at(spec, path):
            if key in keys:
                problems.append(
                    f"field {path}, key {key!r}: reserved, the operator sets it "
                    f"({RESERVED_LABELS[key]})"
                )
    for path in ANNOTATION_FIELDS:
        for key in _mapping_at(spec, path):
            if key in RESERVED_ANNOTATIONS:
                problems.append(
                    f"field {path}, key {key!r}: reserved, the operator sets it "
                    f"({RESERVED_ANNOTATIONS[key]})"
                )
    for path, env in _env_lists(spec, ""):
        for i, var in enumerate(env):
            if var.name in RESERVED_ENV:
                problems.append(
                    f"field {path}[{i}].name, value {var.name!r}: reserved, the operator "
                    f"sets it from the downward API ({RESERVED_ENV[var.name]})"
                )
    return problems


def _mapping_at(spec: BaseModel, path: str) -> Mapping[str, Any]:
    value: Any = spec
    for part in path.split("."):
        value = getattr(value, part, None)
        if value is None:
            return {}
    return value if isinstance(value, Mapping) else {}


def _env_lists(model: BaseModel, at: str) -> Iterator[tuple[str, list[EnvVar]]]:
    """Every `env` list of EnvVars anywhere in the spec, with its path."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        path = f"{at}.{name}" if at else name
        if isinstance(value, BaseModel):
            yield from _env_lists(value, path)
        elif isinstance(value, list) and value and all(isinstance(v, EnvVar) for v in value):
            yield path, value
