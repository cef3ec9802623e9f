"""Check `kubegpu plan --api dra`'s files against the plan (pure).

The files are read back as a cluster would get them, not trusted from the emitter's own
objects: the DeviceClasses must be `kubegpu.catalog.dra`'s; every claim's selectors (its
class's and its own) must match devices the plan gives its pods on their node, in the
numbers they take; every opaque config must pass the plugin's strict decoder
(`sharing.dra_config`) and carry the plan's sharing; every placed replica must be one pod of
one group, on its planned node, referencing an emitted claim.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from kubegpu.base.loader import InputError
from kubegpu.catalog import get_model, nvidia
from kubegpu.catalog.dra import CLASS_DEVICE_TYPE, device_classes
from kubegpu.plan import rules
from kubegpu.plan.dra import HOSTNAME_LABEL, INTERVAL, MATCH_ATTRIBUTE, POD_CLAIM, DraPlanError
from kubegpu.plan.emit import render_dra
from kubegpu.plan.inputs import Workload
from kubegpu.plan.result import NodePlan, Plan
from kubegpu.sharing.dra_config import MPS, TIME_SLICING, parse_parameters, quantity_mib

Json = dict[str, Any]

_DRIVER = re.compile(r"^device\.driver == '([^']*)'$")
_ATTRIBUTE = re.compile(r"^device\.attributes\['([^']*)'\]\.([A-Za-z_][A-Za-z0-9_]*) == '([^']*)'$")


class SelectorError(ValueError):
    pass


def selector_matches(expression: str, device: Mapping[str, str]) -> bool:
    """Evaluate the CEL the planner writes (`==` terms joined by `&&` on the driver and on
    string attributes of the driver's domain) against a device's attributes. Any other CEL
    is a SelectorError: the check does not guess."""
    for term in (t.strip() for t in expression.split("&&")):
        if m := _DRIVER.match(term):
            if m.group(1) != nvidia.DRA_DRIVER:
                return False
        elif m := _ATTRIBUTE.match(term):
            domain, name, value = m.groups()
            if domain != nvidia.DRA_DRIVER or device.get(name) != value:
                return False
        else:
            raise SelectorError(f"selector term {term!r} is not one the check can evaluate")
    return True


@dataclass(frozen=True)
class Device:
    """A device the DRA plugin will publish on a node once the plan is applied."""

    gpu: int
    kind: str  # gpu | mig
    model: str
    role: str  # the plan's role of its GPU: whole | shared | idle | busy | mig
    profile: str = ""
    placement: str = ""  # a MIG device's "1g.18gb@0:1": two of one profile are two devices

    def attributes(self) -> dict[str, str]:
        out = {"type": self.kind, "productName": get_model(self.model).product_name}
        if self.profile:
            out["profile"] = self.profile
        return out


def planned_devices(n: NodePlan) -> list[Device]:
    out = []
    for g in n.gpus:
        if g.mig_enabled:
            for text in g.layout:
                profile = text.partition("@")[0]
                out.append(Device(g.index, "mig", g.model, "mig", profile, text))
        else:
            out.append(Device(g.index, "gpu", g.model, g.role))
    return out


def _docs(text: str, where: str) -> list[Json]:
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if not all(isinstance(d, dict) for d in docs):
        raise SelectorError(f"{where}: a document is not a mapping")
    return docs


def _request(obj: Json) -> tuple[Json, Json]:
    """(the claim spec's devices, its one request's `exactly`, or the first of its
    `firstAvailable` list: the plan's own choice, the rest being fallbacks)."""
    spec = obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]
    devices = spec["devices"]
    requests = devices["requests"]
    if len(requests) != 1 or requests[0]["name"] != POD_CLAIM:
        raise SelectorError(f"expected one request named {POD_CLAIM!r}")
    if "firstAvailable" in requests[0]:
        first: Json = requests[0]["firstAvailable"][0]
        return devices, first
    exactly: Json = requests[0]["exactly"]
    return devices, exactly


def check_dra(
    plan: Plan, workloads: Mapping[str, Workload], mig_fallback: bool = False
) -> list[str]:
    """Problems with the DRA files of `plan` (empty: the cluster gets what the plan says).
    With `mig_fallback`, a MIG claim's first choice is checked as the plan's."""
    try:
        files = render_dra(plan, workloads, mig_fallback)
    except DraPlanError as exc:
        return [f"DRA: {exc}"]
    out: list[str] = []
    classes = {c["metadata"]["name"]: c for c in device_classes()}
    emitted = _docs(files["dra/deviceclasses.yaml"], "dra/deviceclasses.yaml")
    for c in emitted:
        name = c.get("metadata", {}).get("name")
        if classes.get(name) != c:
            out.append(f"dra/deviceclasses.yaml: DeviceClass {name!r} is not kubegpu's")
    class_by_name = {c["metadata"]["name"]: c for c in emitted}
    claims = {
        (c["kind"], c["metadata"]["name"]): c for c in _docs(files["dra/claims.yaml"], "claims")
    }
    groups: dict[str, list[Json]] = yaml.safe_load(files["dra/pod-groups.yaml"])["workloads"]
    nodes = {n.name: n for n in plan.nodes}
    devices = {n.name: [d for d in planned_devices(n) if d.role != "busy"] for n in plan.nodes}
    # per node: claim -> (selectors, devices per use, uses)
    demand: dict[str, dict[str, tuple[list[str], int, int]]] = {}
    referenced: Counter[str] = Counter()
    pods_of: dict[str, list[str]] = {}
    claim_node: dict[str, str] = {}
    seen_pods: set[str] = set()
    for wp in plan.workloads:
        w = workloads[wp.name]
        placed: Counter[str] = Counter()
        for grp in groups.get(wp.name, []):
            node, pods = grp["node"], list(grp["pods"])
            where = f"{wp.name} on {node}"
            placed[node] += len(pods)
            for p in pods:
                if p in seen_pods:
                    out.append(f"{where}: pod {p} is in two groups")
                seen_pods.add(p)
            shared = "sharedClaim" in grp
            name = str(grp.get("sharedClaim") or grp.get("claimTemplate"))
            spec = grp["spec"]
            ref = "resourceClaimName" if shared else "resourceClaimTemplateName"
            if spec.get("nodeSelector") != {HOSTNAME_LABEL: node}:
                out.append(f"{where}: its pods are not pinned to {node}")
            if spec.get("resourceClaims") != [{"name": POD_CLAIM, ref: name}]:
                out.append(f"{where}: its pods do not reference {name}")
            kind = "ResourceClaim" if shared else "ResourceClaimTemplate"
            obj = claims.get((kind, name))
            if obj is None:
                out.append(f"{where}: {kind} {name} is not emitted")
                continue
            n = nodes.get(node)
            if n is None:
                out.append(f"{where}: no such node in the plan")
                continue
            try:
                out += _check_claim(
                    w, wp.method or "", wp.profile, n, obj, class_by_name, len(pods)
                )
                _devices, exactly = _request(obj)
                sels = [class_by_name[exactly["deviceClassName"]]["spec"]["selectors"][0]]
                sels += exactly.get("selectors") or []
                exprs = [s["cel"]["expression"] for s in sels]
                count = int(exactly.get("count", 1))
            except (KeyError, TypeError, SelectorError) as exc:
                out.append(f"{where}: claim {name} cannot be read: {exc}")
                continue
            uses = 1 if shared else len(pods)
            prev = demand.setdefault(node, {}).get(name)
            demand[node][name] = (exprs, count, uses + (prev[2] if prev and not shared else 0))
            if shared:
                referenced[name] += len(pods)
                pods_of.setdefault(name, []).extend(pods)
                if claim_node.setdefault(name, node) != node:
                    out.append(f"{where}: shared claim {name} is used on two nodes")
        for node, k in wp.nodes.items():
            if placed[node] != k:
                out.append(f"{wp.name}: {placed[node]} pods on {node}, the plan puts {k}")
        for node in set(placed) - set(wp.nodes):
            out.append(f"{wp.name}: pods on {node}, where the plan puts none")
    for node, claims_here in demand.items():
        out += _check_room(node, claims_here, devices[node])
    for (kind, name), obj in claims.items():
        if kind == "ResourceClaim":
            listed = obj["metadata"].get("annotations", {}).get("kubegpu.dev/planned-pods", "")
            if listed.split(",") != pods_of.get(name, []):
                out.append(f"claim {name}: its planned-pods annotation differs from the groups")
        elif name not in {g.get("claimTemplate") for gs in groups.values() for g in gs}:
            out.append(f"template {name}: used by no pod group")
    mig = any(n.mig_config not in (None, "all-disabled") for n in plan.nodes)
    if mig and ("mig-parted-config.yaml" not in files or "apply-mig.sh" not in files):
        out.append("the plan has MIG layouts but no mig-parted config to make them")
    return out


def _check_claim(
    w: Workload,
    method: str,
    profile: str | None,
    n: NodePlan,
    obj: Json,
    classes: Mapping[str, Json],
    pods: int,
) -> list[str]:
    """One claim used by `pods` replicas of `w` on `n`: its class, selectors, count and
    config against the devices the plan gives them there."""
    out: list[str] = []
    name = obj["metadata"]["name"]
    where = f"{w.name} on {n.name}: claim {name}"
    devs, exactly = _request(obj)
    cls = exactly["deviceClassName"]
    if cls not in classes:
        return [f"{where}: DeviceClass {cls} is not emitted"]
    want_type = "mig" if method == "mig" else "gpu"
    if CLASS_DEVICE_TYPE.get(cls) != want_type:
        out.append(f"{where}: class {cls} does not select {want_type} devices")
    count = int(exactly.get("count", 1))
    want_count = w.gpus if method == "whole" else 1
    if count != want_count:
        out.append(f"{where}: {count} devices per claim, the workload needs {want_count}")
    if count > 1 and devs.get("constraints") != [
        {"requests": [POD_CLAIM], "matchAttribute": MATCH_ATTRIBUTE}
    ]:
        out.append(f"{where}: {count} devices without the matchAttribute constraint")
    exprs = [classes[cls]["spec"]["selectors"][0]["cel"]["expression"]]
    exprs += [s["cel"]["expression"] for s in exactly.get("selectors") or []]
    planned = []
    for d in planned_devices(n):
        if method == "whole":
            ok = d.role == "whole" and rules.whole_rejection(w, get_model(d.model)) is None
        elif method == "mig":
            ok = d.kind == "mig" and d.profile == profile
        else:
            ok = d.role == "shared"
        if ok:
            planned.append(d)
    matched = [d for d in planned if all(selector_matches(e, d.attributes()) for e in exprs)]
    if not matched:
        out.append(f"{where}: its selectors match none of the devices the plan gives it there")
    # idle GPUs are spare room; busy ones are held by running work, never allocated again
    others = [d for d in planned_devices(n) if d not in planned and d.role not in ("idle", "busy")]
    if any(all(selector_matches(e, d.attributes()) for e in exprs) for d in others):
        out.append(f"{where}: its selectors also match devices the plan gives others")
    configs = devs.get("config") or []
    shared = obj["kind"] == "ResourceClaim"
    if shared != (method in ("mps", "time-slicing")):
        out.append(f"{where}: a {obj['kind']} for a {method} workload")
    if not shared:
        if configs:
            out.append(f"{where}: a per-pod claim carries a sharing config")
        return out
    if len(configs) != 1:
        return [*out, f"{where}: expected one opaque config, found {len(configs)}"]
    opaque = configs[0].get("opaque") or {}
    if opaque.get("driver") != nvidia.DRA_DRIVER or configs[0].get("requests") != [POD_CLAIM]:
        out.append(f"{where}: its config is not for driver {nvidia.DRA_DRIVER}, request gpu")
    try:
        cfg = parse_parameters(opaque.get("parameters"), f"claim {name}")
    except InputError as exc:
        return [*out, f"{where}: the DRA plugin would refuse its config: {exc}"]
    sharing = cfg.sharing
    gpus = [g for g in n.gpus if g.role == "shared"]
    if sharing is None or not gpus:
        return [*out, f"{where}: no sharing config, or no shared GPU on {n.name}"]
    strategy = MPS if n.sharing == "mps" else TIME_SLICING
    if sharing.strategy != strategy:
        out.append(f"{where}: strategy {sharing.strategy}, the plan shares by {n.sharing}")
    replicas = {g.replicas for g in gpus if g.model in {d.model for d in matched}}
    if len(replicas) != 1:
        return [*out, f"{where}: its GPUs are split {sorted(replicas)} ways, not one way"]
    r = replicas.pop()
    if sharing.strategy == TIME_SLICING:
        ts = getattr(sharing, "timeSlicingConfig", None)
        if ts is None or ts.interval != INTERVAL:
            out.append(f"{where}: time-slice interval is not {INTERVAL}")
    elif sharing.strategy == MPS:
        mps = sharing.mpsConfig
        model = get_model(matched[0].model) if matched else None
        if mps is None or model is None:
            out.append(f"{where}: MPS without limits")
        else:
            if mps.defaultActiveThreadPercentage != 100 // r:
                out.append(
                    f"{where}: {mps.defaultActiveThreadPercentage}% threads per client, "
                    f"the plan's {r} replicas get {100 // r}%"
                )
            limit = mps.defaultPinnedDeviceMemoryLimit
            if limit is None or quantity_mib(limit) != model.memory_mib // r:
                out.append(
                    f"{where}: pinned memory {limit}, the plan's {r} replicas get "
                    f"{model.memory_mib // r}Mi each"
                )
            if limit is not None and quantity_mib(limit) < w.memory_mib:
                out.append(f"{where}: pinned memory {limit} is less than {w.name} needs")
    return out


def _check_room(
    node: str, claims: Mapping[str, tuple[list[str], int, int]], devices: list[Device]
) -> list[str]:
    """The claims used on a node can all be allocated there at once: each alone, and all
    together, take no more devices than their selectors match."""
    out = []
    union: set[Device] = set()
    total = 0
    for name, (exprs, count, uses) in sorted(claims.items()):
        matched = {d for d in devices if all(selector_matches(e, d.attributes()) for e in exprs)}
        if count * uses > len(matched):
            out.append(
                f"{node}: claim {name} takes {count * uses} devices, its selectors match "
                f"{len(matched)} there"
            )
        union |= matched
        total += count * uses
    if total > len(union):
        out.append(f"{node}: the claims take {total} devices, their selectors match {len(union)}")
    return out
