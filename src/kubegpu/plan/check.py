"""Check a plan against the rule book and check that every file it emits is accepted.

`check_plan` is what the scenario corpus and the property tests hold every plan to: each
rule holds, each node has the room its workloads take, every MIG layout is placeable, the
mig-parted config passes `kubegpu mig validate`'s checks for each node, each device-plugin
config passes the config loader, and the device plugin would advertise (`advertise()`)
the resources the workloads request, in the numbers they need. The operator's Helm values
are read back too: the ConfigMaps and defaults they name must exist, and their
`mig.strategy` (which the operator hands every plugin as MIG_STRATEGY, over the config
file) must leave each MIG node the strategy the plan gives it.

With `api="dra"` the device-plugin files give way to the DRA files (`plan.check_dra`): the
DeviceClasses, claims and pod groups against the plan; the mig-parted config is checked
for both.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

import yaml

from kubegpu.catalog import get_model
from kubegpu.mig.config import ConfigError
from kubegpu.mig.config import parse_config as parse_mig_config
from kubegpu.mig.geometry import LayoutError, PlacedInstance, validate_layout
from kubegpu.mig.targets import NodeGpu, plan_node
from kubegpu.plan import rules
from kubegpu.plan.check_dra import check_dra
from kubegpu.plan.emit import render
from kubegpu.plan.inputs import PlanInput, Workload
from kubegpu.plan.result import (
    SHARED_RESOURCE,
    NodePlan,
    Plan,
    WorkloadPlan,
    model_resource,
    shared_resource,
)
from kubegpu.sharing.config import SHARED_SUFFIX, SharingConfigError
from kubegpu.sharing.config import parse_config as parse_plugin_config
from kubegpu.sharing.devices import (
    GPU_RESOURCE,
    Advertised,
    GpuFacts,
    MigFacts,
    StrategyError,
    advertise,
)

VALUES_FILE = "clusterpolicy-values.yaml"


def check_plan(
    inp: PlanInput, plan: Plan, api: Literal["device-plugin", "dra"] = "device-plugin"
) -> list[str]:
    """Every problem of `plan` and of the files `kubegpu plan --api <api>` writes for it."""
    problems: list[str] = []
    workloads = {w.name: w for w in inp.workloads}
    nodes = {n.name: n for n in plan.nodes}
    for wp in plan.workloads:
        w = workloads[wp.name]
        if wp.placed + wp.left != w.replicas:
            problems.append(f"{w.name}: placed {wp.placed} + left {wp.left} != {w.replicas}")
        if not wp.nodes:
            continue
        if wp.method is None:
            problems.append(f"{w.name}: placed without a method")
            continue
        why = rules.method_rejection(w, wp.method)  # type: ignore[arg-type]
        if why is not None:
            problems.append(f"{w.name}: {wp.method} breaks rule {why[0]}: {why[1]}")
        for name in wp.nodes:
            n = nodes[name]
            problems += _check_on_node(w, wp.method, wp.profile, n)
        problems += _one_name(wp, nodes)
    drivers = _drivers(inp)
    for n in plan.nodes:
        driver = drivers.get(n.bought or n.name)
        problems += _check_node(n, {name: workloads[name] for name in n.workloads}, plan, driver)
    if api == "dra":
        problems += _check_files(plan, workloads, device_plugin=False)
        problems += check_dra(plan, workloads)
    else:
        problems += _check_files(plan, workloads)
    return problems


def _check_on_node(w, method: str, profile: str | None, n: NodePlan) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    where = f"{w.name} on {n.name}"
    if method == "whole":
        ok = [
            g
            for g in n.gpus
            if g.role == "whole" and rules.whole_rejection(w, get_model(g.model)) is None
        ]
        if not ok:
            out.append(f"{where}: no whole GPU that fits it")
        if w.gpus > 1 and w.nvlink and n.bought is None:
            pass  # NVLink is checked by the provider's uses; the plan has no topology
    elif method == "mig":
        if not any(profile in g.mig for g in n.gpus):
            out.append(f"{where}: no {profile} instance on the node")
    elif method in ("mps", "time-slicing"):
        want = "mps" if method == "mps" else "time-slicing"
        if n.sharing != want:
            out.append(f"{where}: the node shares by {n.sharing}, not {want}")
        for g in n.gpus:
            if g.role == "shared":
                fit = rules.replicas_for(w, get_model(g.model))
                if n.replicas > fit:
                    out.append(
                        f"{where}: {n.replicas} replicas per {g.model} leave it less than it needs (at most {fit})"
                    )
    return out


def _one_name(wp: WorkloadPlan, nodes: dict[str, NodePlan]) -> list[str]:
    """A workload's pods request one resource name: where a node names each model's GPUs
    apart, the replicas must sit on the one model that name stands for."""
    if not any(nodes[n].renamed for n in wp.nodes) or not wp.models:
        return []
    named = [m for m in wp.models for res in wp.resources if res in _model_names(m)]
    if len(wp.models) > 1 or not named:
        return [
            f"{wp.name}: its replicas sit on {', '.join(wp.models)} GPUs, which a node with "
            f"several models names apart, and its pods request {', '.join(wp.resources)}"
        ]
    return []


def _model_names(model: str) -> tuple[str, str]:
    return model_resource(model), shared_resource(model)


def _drivers(inp: PlanInput) -> dict[str, str | None]:
    """Each node's driver (by node name; bought servers by server type)."""
    out: dict[str, str | None] = {st.name: st.driver for st in inp.buy}
    for spec in inp.fleet:
        names = (
            [spec.name]
            if spec.count == 1
            else [f"{spec.name}-{i}" for i in range(1, spec.count + 1)]
        )
        out.update(dict.fromkeys(names, spec.driver))
    return out


def _check_node(n: NodePlan, workloads: dict, plan: Plan, driver: str | None) -> list[str]:  # type: ignore[type-arg]
    out = []
    mig_gpus = [g for g in n.gpus if g.mig_enabled]
    if n.sharing == "mps" and mig_gpus:
        out.append(f"{n.name}: MPS on a node with MIG-enabled GPUs (rule mps-no-mig)")
    if n.sharing == "mps" and n.mig_strategy == "mixed":
        out.append(f"{n.name}: MPS with the mixed strategy (rule mps-no-mig)")
    if n.sharing != "none" and any(g.role == "whole" for g in n.gpus):
        out.append(f"{n.name}: exclusive whole GPUs on a sharing node (rule sharing-node-wide)")
    if n.mig_strategy == "single":
        profiles = {p for g in mig_gpus for p in g.mig}
        if len(mig_gpus) != len(n.gpus) or len(profiles) != 1:
            out.append(
                f"{n.name}: single strategy without one profile on every GPU (rule mig-single)"
            )
    if mig_gpus and n.mig_strategy == "none":
        out.append(f"{n.name}: MIG GPUs under the none strategy")
    for g in mig_gpus:
        model = get_model(g.model)
        if model.mig is None:
            out.append(f"{n.name}: GPU {g.index}: MIG on {g.model} (rule mig-capable)")
            continue
        layout = []
        for text in g.layout:
            name, _, at = text.partition("@")
            start = int(at.split(":")[0])
            layout.append(PlacedInstance(start, model.mig.profile(name)))
        try:
            validate_layout(model, layout, driver)
        except LayoutError as exc:
            out.append(f"{n.name}: GPU {g.index}: {exc} (rule mig-placeable)")
        if Counter(pi.profile.name for pi in layout) != Counter(g.mig):
            out.append(f"{n.name}: GPU {g.index}: layout and mix disagree")
    # room: what the workloads here take against what the node offers
    wp_by = {w.name: w for w in plan.workloads}
    whole = sum(1 for g in n.gpus if g.role == "whole")
    shared = sum(g.replicas for g in n.gpus if g.role == "shared")
    instances: Counter[str] = Counter()
    for g in mig_gpus:
        instances.update(g.mig)
    take_whole = take_shared = 0
    take_mig: Counter[str] = Counter()
    for name, k in n.workloads.items():
        wp = wp_by[name]
        if wp.method == "whole":
            take_whole += k * workloads[name].gpus
        elif wp.method == "mig" and wp.profile:
            take_mig[wp.profile] += k
        elif wp.method in ("mps", "time-slicing"):
            take_shared += k
    if take_whole > whole:
        out.append(f"{n.name}: {take_whole} whole GPUs taken, {whole} planned")
    if take_shared > shared:
        out.append(f"{n.name}: {take_shared} shared replicas taken, {shared} planned")
    for p, k in take_mig.items():
        if k > instances[p]:
            out.append(f"{n.name}: {k} {p} instances taken, {instances[p]} planned")
    return out


def _facts(n: NodePlan) -> list[GpuFacts]:
    out = []
    for g in n.gpus:
        model = get_model(g.model)
        major, _, minor = model.compute_capability.partition(".")
        migs = []
        if g.mig_enabled and model.mig is not None:
            for i, text in enumerate(g.layout):
                p = model.mig.profile(text.partition("@")[0])
                migs.append(
                    MigFacts(i, f"MIG-{n.name}-{g.index}-{i}", p.name, i + 1, 0, True, p.memory_mib,
                             p.sms, p.slices, p.compute_slices)
                )  # fmt: skip
        out.append(
            GpuFacts(
                g.index, f"GPU-{n.name}-{g.index}", model.product_name, model.memory_mib,
                (int(major), int(minor or 0)), model.mig is not None, g.mig_enabled, tuple(migs),
            )
        )  # fmt: skip
    return out


def check_values(
    values: Any, dp_cm: dict[str, Any], mig_cm: dict[str, Any], mig_names: set[str]
) -> tuple[list[str], str]:
    """The operator's Helm values against the ConfigMaps they name; returns the problems and
    the `mig.strategy` the operator passes to every node's plugin as MIG_STRATEGY ("": none)."""
    where = VALUES_FILE
    if not isinstance(values, dict):
        return [f"{where}: expected a mapping"], ""
    out: list[str] = []
    strategy = (values.get("mig") or {}).get("strategy", "")
    if strategy not in ("", "none", "single", "mixed"):
        out.append(f"{where}: mig.strategy {strategy!r} is not none, single or mixed")
        strategy = ""
    for field, cm, names in (
        ("devicePlugin", dp_cm, set(dp_cm["data"])),
        ("migManager", mig_cm, mig_names),
    ):
        cfg = ((values.get(field) or {}).get("config")) or {}
        if cfg.get("name") != cm["metadata"]["name"]:
            out.append(
                f"{where}: {field}.config.name {cfg.get('name')!r} is not the ConfigMap "
                f"{cm['metadata']['name']!r}"
            )
        if cfg.get("default") not in names:
            out.append(f"{where}: {field}.config.default {cfg.get('default')!r} is not a config")
    return out, strategy


def _enforceable(
    n: NodePlan, adv: Advertised, workloads: dict[str, Workload], wp_by: dict[str, WorkloadPlan]
) -> list[str]:
    """The scheduler may give a pod any device advertised under the name it requests: each
    such device must hold the workload (a node with several models must keep them apart)."""
    out = []
    models = {g.index: get_model(g.model) for g in n.gpus}
    for name, w in workloads.items():
        for res in wp_by[name].resources:
            replicas = adv.replicas.get(res, 1)
            for model in sorted({models[d.gpu].id for d in adv.resources.get(res, ())}):
                m = get_model(model)
                if any(d.mig is not None for d in adv.resources[res]):
                    continue  # MIG devices: the profile, checked by the layout rules
                why = rules.whole_rejection(w, m)
                if why is None and replicas > 1 and rules.replicas_for(w, m) < replicas:
                    why = f"{replicas} replicas per {model} leave it less than it needs"
                if why:
                    out.append(
                        f"{n.name}: {name} requests {res}, which the device plugin also "
                        f"advertises on {model} GPUs: {why}"
                    )
    return out


def _check_files(
    plan: Plan, workloads: dict[str, Workload], device_plugin: bool = True
) -> list[str]:
    """The mig-parted config gives each node its layout; with `device_plugin`, the Helm
    values and the device-plugin configs give each node's workloads what they request."""
    out: list[str] = []
    files = render(plan)
    try:
        mig_cfg = parse_mig_config(files["mig-parted-config.yaml"], "mig-parted-config.yaml")
    except ConfigError as exc:
        return [f"mig-parted config rejected: {exc}"]
    cm = yaml.safe_load(files["mig-parted-configmap.yaml"])
    if cm["data"]["config.yaml"] != files["mig-parted-config.yaml"]:
        out.append("mig-parted ConfigMap differs from the config file")
    dp_doc = yaml.safe_load(files["device-plugin-configmap.yaml"])
    dp_cm = dp_doc["data"]
    mig_names = set(yaml.safe_load(files["mig-parted-config.yaml"])["mig-configs"])
    problems, forced = check_values(yaml.safe_load(files[VALUES_FILE]), dp_doc, cm, mig_names)
    if device_plugin:
        out += problems
    # the operator sets MIG_STRATEGY on every plugin from mig.strategy; it beats the file
    overrides = {"MIG_STRATEGY": forced} if forced else None
    wp_by = {w.name: w for w in plan.workloads}
    for n in plan.nodes:
        if n.mig_config is not None:
            gpus = [
                NodeGpu(g.index, get_model(g.model).pci_device_id, get_model(g.model))
                for g in n.gpus
            ]
            try:
                _, entries = mig_cfg.select(n.mig_config)
                targets = plan_node(n.mig_config, entries, gpus)
            except ConfigError as exc:
                out.append(f"{n.name}: mig-parted config {n.mig_config} rejected: {exc}")
                continue
            by_index = {t.index: t for t in targets}
            for g in n.gpus:
                t = by_index.get(g.index)
                if get_model(g.model).mig is None:
                    continue
                if (
                    t is None
                    or t.mig_enabled != g.mig_enabled
                    or dict(t.wanted()) != dict(Counter(g.mig))
                ):
                    out.append(
                        f"{n.name}: GPU {g.index}: mig-parted config {n.mig_config} does not give its layout"
                    )
        if not device_plugin:
            continue
        text = dp_cm.get(n.device_plugin_config)
        if text is None:
            out.append(f"{n.name}: device-plugin config {n.device_plugin_config} missing")
            continue
        try:
            cfg = parse_plugin_config(text, n.device_plugin_config, overrides)
        except SharingConfigError as exc:
            out.append(f"{n.name}: device-plugin config {n.device_plugin_config} rejected: {exc}")
            continue
        effective = cfg.flags.mig_strategy
        if any(g.mig_enabled for g in n.gpus) and effective != n.mig_strategy:
            out.append(
                f"{n.name}: the plugin runs the {effective} MIG strategy "
                f"({VALUES_FILE} mig.strategy {forced!r}), the plan needs {n.mig_strategy}"
            )
        if effective == "mixed" and n.sharing == "mps":
            out.append(f"{n.name}: MPS under the mixed strategy (rule mps-no-mig)")
        try:
            adv = advertise(_facts(n), cfg)
        except StrategyError as exc:
            out.append(f"{n.name}: device-plugin config {n.device_plugin_config} rejected: {exc}")
            continue
        counts = adv.counts()
        need: Counter[str] = Counter()
        for name, k in n.workloads.items():
            wp = wp_by[name]
            for res, per in wp.resources.items():
                need[res] += per * k
        for res, k in need.items():
            if counts.get(res, 0) < k:
                out.append(
                    f"{n.name}: needs {k} {res}, the device plugin advertises {counts.get(res, 0)}"
                )
        if (
            n.sharing != "none"
            and not any(res.endswith(SHARED_SUFFIX) for res in counts)
            and any(g.role == "shared" for g in n.gpus)
        ):
            out.append(f"{n.name}: shares but advertises no {SHARED_RESOURCE}")
        out += _enforceable(n, adv, {k: workloads[k] for k in n.workloads}, wp_by)
        if n.mig_strategy == "single" and counts.get(GPU_RESOURCE, 0) == 0 and n.workloads:
            out.append(f"{n.name}: single strategy advertises no {GPU_RESOURCE}")
    return out
