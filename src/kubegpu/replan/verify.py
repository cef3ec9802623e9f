"""The runbook of `plan --from-snapshot` as the change `kubegpu what-if` tries (pure).

A from-snapshot output directory is not a planner directory what-if can read as is: its
plan files describe the whole fleet from scratch (every node relabelled, the ConfigMaps
replaced by the planner's), while the runbook adds configs to the ConfigMaps the cluster
already has and relabels only the nodes whose layout changes. So the change is built here
from the snapshot and the runbook's own `Change`, in the runbook's order: the ClusterPolicy
strategy when the runbook asks for `mixed`, the ConfigMaps with the configs added, then the
node labels. The same merge is what an administrator does by hand (`merged_mig_parted`,
`merged_plugin_data`), so a test applying the runbook uses these functions too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from kubegpu.catalog import nvidia
from kubegpu.doctor.snapshot import Snapshot
from kubegpu.replan.from_snapshot import (
    CREATED_MIG_CONFIGMAP,
    Change,
    SnapshotPlanError,
    Start,
    created_mig_configmap,
)


@dataclass(frozen=True)
class RunbookSteps:
    """What the runbook changes, in its order; plain data, since the layer contract keeps
    replan and whatif apart (`whatif.change.from_steps` makes it a what-if change)."""

    config_maps: dict[str, dict[str, str]]  # name -> the whole data after the merge
    policy_patch: dict[str, Any] | None
    labels: dict[str, dict[str, str | None]]
    notes: tuple[str, ...] = field(default=())


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        out[key] = _merge_patch(out.get(key), value)
    return out


def merged_mig_parted(text: str, configs: dict[str, list[dict[str, Any]]], source: str) -> str:
    """A mig-parted `config.yaml` with `configs` added under `mig-configs` (an existing
    config of the same name is never overwritten: the runbook names fresh ones)."""
    doc = yaml.safe_load(text) if text.strip() else {"version": "v1", "mig-configs": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("mig-configs", {}), dict):
        raise SnapshotPlanError(f"{source}: key config.yaml is not a mig-parted config")
    existing = doc.setdefault("mig-configs", {})
    clash = sorted(set(existing) & set(configs))
    if clash:
        raise SnapshotPlanError(f"{source}: already has mig-configs {', '.join(clash)}")
    existing.update(configs)
    return yaml.safe_dump(doc, sort_keys=False)


def merged_plugin_data(data: dict[str, str], configs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """A device-plugin ConfigMap's data with one key per config to add."""
    out = dict(data)
    out.update({name: yaml.safe_dump(c, sort_keys=False) for name, c in configs.items()})
    return out


def runbook_steps(snapshot: Snapshot, start: Start, change: Change) -> RunbookSteps:
    """The runbook's steps, as a what-if change on the snapshot's twin would make them."""
    maps: dict[str, dict[str, str]] = {}
    by_cm: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for c in change.nodes:
        if c.mig_config:
            by_cm.setdefault(c.mig_configmap, {})[c.mig_config] = change.mig_configs[c.mig_config]
    patch: dict[str, Any] | None = None
    created = created_mig_configmap(start, change)
    if created is not None:
        by_cm.pop(CREATED_MIG_CONFIGMAP, None)
        maps[CREATED_MIG_CONFIGMAP] = dict(created["data"])
        patch = {"migManager": {"config": {"name": CREATED_MIG_CONFIGMAP}}}
    for name, configs in sorted(by_cm.items()):
        cm = snapshot.config_map(name)
        data = dict(cm.data) if cm is not None else {}
        source = f"configmap {snapshot.operator_namespace}/{name}"
        data["config.yaml"] = merged_mig_parted(data.get("config.yaml", ""), configs, source)
        maps[name] = data
    if change.plugin_configs:
        if start.plugin_configmap:
            cm = snapshot.config_map(start.plugin_configmap)
            data = merged_plugin_data(dict(cm.data) if cm else {}, change.plugin_configs)
            name = start.plugin_configmap
        else:  # the runbook: create one and point the ClusterPolicy at it
            name = "plan-device-plugin-configs"
            data = merged_plugin_data({}, change.plugin_configs)
            patch = _merge_patch(patch or {}, {"devicePlugin": {"config": {"name": name}}})
        maps[name] = data
    if start.cluster_strategy != "mixed" and any(c.waits_for for c in change.nodes):
        patch = _merge_patch(patch or {}, {"mig": {"strategy": "mixed"}})
    labels: dict[str, dict[str, str | None]] = {}
    for c in change.nodes:
        if c.plugin_config:
            labels.setdefault(c.node, {})[nvidia.DEVICE_PLUGIN_CONFIG] = c.plugin_config
        if c.mig_config:
            labels.setdefault(c.node, {})[nvidia.MIG_CONFIG] = c.mig_config
    notes = tuple(
        f"runbook: node {n}: running pods {', '.join(p)} are deleted first (not tried on the "
        "twin: their controllers are not recreated there)"
        for n, p in sorted(start.evicted.items())
    )
    return RunbookSteps(maps, patch, labels, notes)
