"""The change `kubegpu what-if run` tries on the twin, read from the user's files.

A change is what an administrator would do with kubectl, in this order: create or replace
ConfigMaps (device-plugin configs, mig-parted layouts), merge-patch the ClusterPolicy's spec,
then label nodes (`nvidia.com/mig.config`, `nvidia.com/device-plugin.config`). A planner
output directory (`kubegpu plan --out DIR`) is the same three steps, read from its files.
Every file goes through kubegpu.base.loader: an error names the file, the field and the
value, and nothing is tried until every input has loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kubegpu.base import loader
from kubegpu.catalog import nvidia
from kubegpu.kube.label_syntax import value_problem
from kubegpu.kube.policy import PolicyFileError, policy_from_file, unknown_field_problem

PLAN_FILES = (
    "plan.json",
    "mig-parted-configmap.yaml",
    "device-plugin-configmap.yaml",
    "clusterpolicy-values.yaml",
)
# the Helm values of a plan that are ClusterPolicy spec sections under the same names
PLAN_POLICY_SECTIONS = ("mig", "devicePlugin", "migManager")
_NODE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ChangeError(loader.InputError):
    """A change that cannot be tried: names the file or option, the field and the value."""


@dataclass(frozen=True)
class ConfigMapChange:
    name: str
    data: dict[str, str]
    source: str  # the file it came from
    namespace: str | None = None  # as the manifest says; None: the operator's


@dataclass(frozen=True)
class Change:
    """ConfigMaps to create or replace, a merge patch of the ClusterPolicy's spec, and node
    labels to set (None removes one), applied in that order."""

    config_maps: tuple[ConfigMapChange, ...] = ()
    policy_patch: dict[str, Any] | None = None
    labels: dict[str, dict[str, str | None]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what of the input the twin cannot try, and why

    @property
    def empty(self) -> bool:
        return not (self.config_maps or self.policy_patch or self.labels)

    def describe(self) -> list[str]:
        """The change in words, one line per step."""
        out = [f"configmap {c.name} ({', '.join(sorted(c.data))})" for c in self.config_maps]
        if self.policy_patch:
            out.append(f"clusterpolicy spec merge patch: {sorted(self.policy_patch)}")
        for node, labels in sorted(self.labels.items()):
            out += [
                f"node {node}: {k}={'(removed)' if v is None else v}" for k, v in labels.items()
            ]
        return out

    def combine(self, other: Change) -> Change:
        """Both changes, `other`'s steps after this one's."""
        patch = merge_patch(self.policy_patch or {}, other.policy_patch or {}) or None
        labels = {n: dict(v) for n, v in self.labels.items()}
        for node, more in other.labels.items():
            labels.setdefault(node, {}).update(more)
        return Change(
            (*self.config_maps, *other.config_maps), patch, labels, (*self.notes, *other.notes)
        )


def from_steps(
    config_maps: dict[str, dict[str, str]],
    policy_patch: dict[str, Any] | None,
    labels: dict[str, dict[str, str | None]],
    notes: tuple[str, ...] = (),
    *,
    source: str,
) -> Change:
    """A change given as data rather than files (the runbook of `plan --from-snapshot`):
    each ConfigMap is named as coming from `source`."""
    maps = tuple(
        ConfigMapChange(name, dict(data), f"{source}: configmap {name}")
        for name, data in config_maps.items()
    )
    return Change(maps, policy_patch, {n: dict(v) for n, v in labels.items()}, notes)


def check_namespaces(change: Change, operator_namespace: str) -> None:
    """Every ConfigMap goes where the operator reads it: one written for another namespace
    would do nothing there, so the twin must not quietly move it into the operator's."""
    for cm in change.config_maps:
        if cm.namespace is not None and cm.namespace != operator_namespace:
            raise ChangeError(
                f"{cm.source}: field metadata.namespace, value {loader.excerpt(cm.namespace)}: "
                f"the operator reads its ConfigMaps in {operator_namespace!r} (the snapshot's "
                "operator namespace); leave the field out or name that one"
            )


def check_nodes(change: Change, nodes: list[str]) -> None:
    """Every node the change labels is in the cluster: a typo is an error, not a no-op."""
    unknown = sorted(set(change.labels) - set(nodes))
    if unknown:
        raise ChangeError(
            f"node {loader.excerpt(unknown[0])}: not in the snapshot (nodes: {', '.join(nodes)})"
        )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies `--type merge`."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# -- the files --------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Meta(_Strict):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class _ConfigMapFile(_Strict):
    apiVersion: Literal["v1"]
    kind: Literal["ConfigMap"]
    metadata: _Meta
    data: dict[str, str] = Field(default_factory=dict)


class _PolicyPatch(_Strict):
    """A merge patch of the ClusterPolicy object: only its spec is the user's to change."""

    spec: dict[str, Any]


def load_configmap(path: str | Path) -> ConfigMapChange:
    data, source = loader.load_yaml(path, ChangeError)
    loader.require_mapping(data, source, ChangeError, "a ConfigMap manifest")
    cm = loader.validate(_ConfigMapFile, data, source, ChangeError)
    return ConfigMapChange(cm.metadata.name, dict(cm.data), source, cm.metadata.namespace)


def load_policy_patch(path: str | Path) -> dict[str, Any]:
    """A JSON or YAML merge patch of the ClusterPolicy: `{spec: {...}}`."""
    data, source = loader.load_yaml(path, ChangeError)
    loader.require_mapping(data, source, ChangeError, "a merge patch like {spec: {...}}")
    spec = loader.validate(_PolicyPatch, data, source, ChangeError).spec
    # the API server prunes a field its schema does not define: a typo (`migg`) would make
    # the twin report that nothing changes, the worst answer for a change that does nothing
    if (problem := unknown_field_problem(spec)) is not None:
        raise ChangeError(f"{source}: {problem}")
    check_policy_patch(spec, source)
    return spec


def without_nulls(patch: Any) -> Any:
    """A merge patch less its deletions (`null`): what it sets, for the schema to judge."""
    if isinstance(patch, dict):
        return {k: without_nulls(v) for k, v in patch.items() if v is not None}
    return patch


def check_policy_patch(patch: dict[str, Any], source: str) -> None:
    """The values a patch sets, judged strictly as the API server judges them."""
    try:
        policy_from_file({"kind": "ClusterPolicy", "spec": without_nulls(patch)}, source)
    except PolicyFileError as exc:
        raise ChangeError(str(exc)) from None


def parse_assignment(text: str, option: str) -> tuple[str, str]:
    """`NODE=VALUE` from the command line."""
    node, eq, value = text.partition("=")
    if not eq or not _NODE.fullmatch(node):  # fullmatch: `$` would let "\n" end a name
        raise ChangeError(f"{option} {loader.excerpt(text)}: expected NODE=VALUE")
    if not value or value_problem(value) is not None:
        raise ChangeError(f"{option} {loader.excerpt(text)}: value {value!r} is not a label value")
    return node, value


def label_change(mig: list[str], device_plugin: list[str]) -> Change:
    """`--mig-config NODE=NAME` and `--device-plugin-config NODE=NAME` as node labels."""
    labels: dict[str, dict[str, str | None]] = {}
    for option, items, key in (
        ("--mig-config", mig, nvidia.MIG_CONFIG),
        ("--device-plugin-config", device_plugin, nvidia.DEVICE_PLUGIN_CONFIG),
    ):
        for item in items:
            node, value = parse_assignment(item, option)
            labels.setdefault(node, {})[key] = value
    return Change(labels=labels)


# -- a planner's output directory ------------------------------------------------------------


class _PlanNode(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    buy: str | None = None


class _PlanJson(BaseModel):
    model_config = ConfigDict(extra="ignore")

    nodes: list[_PlanNode]


def load_plan_dir(directory: str | Path) -> Change:
    """The change `kubegpu plan --out DIR` describes: its two ConfigMaps, its ClusterPolicy
    values as a spec patch, and its node labels (servers to buy are noted, not tried)."""
    root = Path(directory)
    missing = [f for f in PLAN_FILES if not (root / f).is_file()]
    if missing:
        raise ChangeError(
            f"{root}: not a `kubegpu plan --out` directory (missing {', '.join(missing)})"
        )
    data, source = loader.load_yaml(root / "plan.json", ChangeError, loader.Limits(16 * loader.MIB))
    loader.require_mapping(data, source, ChangeError, "the plan's JSON object")
    plan = loader.validate(_PlanJson, data, source, ChangeError, where=loader.named_items)
    values, vsource = loader.load_yaml(root / "clusterpolicy-values.yaml", ChangeError)
    loader.require_mapping(values, vsource, ChangeError, "Helm values")
    patch = plan_policy_patch(values)
    maps = tuple(load_configmap(root / f) for f in PLAN_FILES[1:3])
    labels: dict[str, dict[str, str | None]] = {}
    notes = []
    for n in plan.nodes:
        if n.buy:
            notes.append(f"node {n.name}: a {n.buy} server to buy, not in the cluster")
        elif n.labels:
            labels[n.name] = dict(n.labels)
    return Change(maps, patch, labels, tuple(notes))


def plan_policy_patch(values: dict[str, Any]) -> dict[str, Any]:
    """The plan's Helm values as a ClusterPolicy spec merge patch. An empty mig.strategy
    means "leave it to each node's config": the key is removed, not set to ''."""
    patch: dict[str, Any] = {}
    for section in PLAN_POLICY_SECTIONS:
        if isinstance(values.get(section), dict):
            patch[section] = dict(values[section])
    mig = patch.get("mig")
    if isinstance(mig, dict) and mig.get("strategy") == "":
        mig["strategy"] = None
    return patch
