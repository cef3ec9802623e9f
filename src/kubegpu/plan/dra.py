"""A plan in DRA terms (`kubegpu plan --api dra`), pure: what each workload's pods claim
instead of counted `nvidia.com/gpu` requests.

- whole GPUs: one ResourceClaimTemplate per workload (per model where it spans several),
  `count` devices of class `gpu.nvidia.com` with a CEL selector on the planned model's
  `productName`; a multi-GPU claim also has `matchAttribute: gpu.nvidia.com/productName`.
  A claim's devices always come from one node; the plugin publishes no NVLink attribute
  (neither does upstream's), so NVLink is the node's property the plan chose it for;
- MIG: one template per workload (and model), class `mig.nvidia.com`, selector on the
  planned `profile` and the parent's `productName`; the layout itself must exist first
  (static MIG from the plan's mig-parted config: no MIG manager runs under a GPUCluster).
  With `mig_fallback`, the request is a prioritized list (`firstAvailable`, Kubernetes
  1.36 GA): the planned profile first, then the next larger profile the plan's layouts on
  the workload's nodes also have and that fits the workload, so a pod still starts when its
  planned instances are taken;
- time-slicing and MPS: DRA shares a device between pods that reference one ResourceClaim,
  so each shared GPU of the plan becomes one ResourceClaim carrying a `GpuConfig` with the
  strategy (`TimeSlicing`, interval `Default`: the plan has no interval; `MPS` with each
  replica's equal share, as the device plugin's MPS daemon sets it, see `sharing.mps`),
  referenced by the pods the plan puts on that GPU.

Pods land where the plan put them through a `kubernetes.io/hostname` node selector per pod
group; a shared claim is allocated on the node of the first pod that uses it, so every group
of one claim names the same node. What DRA cannot express is refused (`DraPlanError`) with the
workload and the reason, never dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubegpu.catalog import get_model, nvidia
from kubegpu.catalog.dra import device_classes
from kubegpu.plan import rules
from kubegpu.plan.inputs import Workload
from kubegpu.plan.result import NodePlan, Plan, WorkloadPlan, model_resource
from kubegpu.sharing.dra_config import MPS, TIME_SLICING

Json = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The pod-level claim name every emitted pod uses (containers list it in resources.claims).
POD_CLAIM = "gpu"
#: A ResourceClaim can be reserved for at most this many pods (resource.k8s.io/v1).
MAX_RESERVED_FOR = 256
#: An allocation holds at most this many devices (resource.k8s.io/v1).
MAX_RESULTS = 32
#: The time-slice interval every shared claim gets: the plan does not choose one.
INTERVAL = "Default"
#: Together on one claim: devices of the same product.
MATCH_ATTRIBUTE = f"{nvidia.DRA_DRIVER}/productName"


class DraPlanError(ValueError):
    """Part of the plan cannot be expressed through DRA; the message names what and why."""


@dataclass(frozen=True)
class Claim:
    """One ResourceClaimTemplate (per-pod claims) or ResourceClaim (shared by its pods)."""

    name: str
    shared: bool  # True: a ResourceClaim the pods share; False: a template
    device_class: str  # gpu.nvidia.com | mig.nvidia.com
    count: int  # devices per claim
    model: str  # the catalog model whose productName the selector pins
    profile: str | None = None  # MIG profile
    strategy: str | None = None  # shared claims: TimeSlicing | MPS
    replicas: int = 0  # shared claims: the pods the GPU is split for
    node: str | None = None  # shared claims: the node the plan put the GPU on
    fallback_profile: str | None = None  # MIG: the profile to take when none planned is free

    def fallback_selectors(self) -> list[str]:
        """The fallback subrequest's CEL selectors (the parent model stays the same)."""
        assert self.fallback_profile is not None
        return [
            f"{attribute_equals('profile', self.fallback_profile)} && "
            f"{attribute_equals('productName', get_model(self.model).product_name)}"
        ]

    def selectors(self) -> list[str]:
        """The claim's own CEL selectors (the class adds its `type` selector)."""
        terms = []
        if self.profile is not None:
            terms.append(attribute_equals("profile", self.profile))
        terms.append(attribute_equals("productName", get_model(self.model).product_name))
        return [" && ".join(terms)]

    def parameters(self) -> Json | None:
        """The opaque `GpuConfig` of a shared claim (None for a template)."""
        if self.strategy is None:
            return None
        sharing: Json = {"strategy": self.strategy}
        if self.strategy == TIME_SLICING:
            sharing["timeSlicingConfig"] = {"interval": INTERVAL}
        else:
            threads, memory_mib = mps_share(self.model, self.replicas)
            sharing["mpsConfig"] = {
                "defaultActiveThreadPercentage": threads,
                "defaultPinnedDeviceMemoryLimit": f"{memory_mib}Mi",
            }
        return {
            "apiVersion": nvidia.DRA_CONFIG_API_VERSION,
            "kind": "GpuConfig",
            "sharing": sharing,
        }


@dataclass(frozen=True)
class PodGroup:
    """Pods of one workload on one node that use one claim (or one template)."""

    workload: str
    node: str
    claim: str
    shared: bool
    pods: tuple[str, ...]

    def pod_spec(self) -> Json:
        """The fields to put in these pods' spec."""
        ref = "resourceClaimName" if self.shared else "resourceClaimTemplateName"
        return {
            "nodeSelector": {HOSTNAME_LABEL: self.node},
            "resourceClaims": [{"name": POD_CLAIM, ref: self.claim}],
        }


@dataclass
class DraPlan:
    claims: list[Claim] = field(default_factory=list)
    groups: list[PodGroup] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def classes(self) -> list[Json]:
        """The DeviceClasses the claims use, exactly as `kubegpu.catalog.dra` defines them."""
        used = {c.device_class for c in self.claims}
        return [c for c in device_classes() if c["metadata"]["name"] in used]

    def claim(self, name: str) -> Claim:
        return next(c for c in self.claims if c.name == name)


def attribute_equals(name: str, value: str) -> str:
    """`device.attributes['gpu.nvidia.com'].<name> == '<value>'`."""
    if "'" in value or "\\" in value:
        raise DraPlanError(f"attribute {name}: value {value!r} cannot be quoted in CEL")
    return f"device.attributes['{nvidia.DRA_DRIVER}'].{name} == '{value}'"


def mps_share(model: str, replicas: int) -> tuple[int, int]:
    """Each MPS client's equal share of a GPU split `replicas` ways: (active thread
    percentage, pinned memory MiB), rounded down as `sharing.mps` does for the device plugin."""
    return 100 // replicas, get_model(model).memory_mib // replicas


# --- building ------------------------------------------------------------------------------


def _renamed_model(wp: WorkloadPlan) -> str | None:
    """The model a workload's request names where the device plugin renamed it."""
    prefix = model_resource("")
    for res in wp.resources:
        base = res.removesuffix(nvidia.SHARED_SUFFIX)
        if base.startswith(prefix):
            return base.removeprefix(prefix)
    return None


def _whole_model(w: Workload, wp: WorkloadPlan, n: NodePlan) -> str:
    fit = sorted(
        {
            g.model
            for g in n.gpus
            if g.role == "whole" and rules.whole_rejection(w, get_model(g.model)) is None
        }
    )
    named = _renamed_model(wp)
    if named is not None and named in fit:
        return named
    if len(fit) == 1:
        return fit[0]
    why = "none of its whole GPUs fits it" if not fit else f"it could be any of {', '.join(fit)}"
    raise DraPlanError(
        f"{w.name} on {n.name}: a claim selects one GPU model, and the plan does not say which "
        f"model its GPUs are ({why}); split it into one workload per model"
    )


def _mig_model(wp: WorkloadPlan, n: NodePlan) -> str:
    models = sorted({g.model for g in n.gpus if g.mig_enabled and g.mig.get(wp.profile or "")})
    if len(models) != 1:
        raise DraPlanError(
            f"{wp.name} on {n.name}: its {wp.profile} instances are on "
            f"{', '.join(models) or 'no GPU'}; a claim selects one parent model"
        )
    return models[0]


def _template_name(workload: str, model: str, models: set[str]) -> str:
    return workload if len(models) == 1 else f"{workload}-{model}"


def _pods(workload: str, start: int, k: int) -> tuple[str, ...]:
    return tuple(f"{workload}-{i}" for i in range(start, start + k))


def fallback_profile(w: Workload, profile: str, model: str, nodes: list[NodePlan]) -> str | None:
    """The smallest profile larger than `profile` that the plan's layouts of `model` on
    `nodes` have and that fits `w`; None when there is none."""
    m = get_model(model)
    if m.mig is None:
        return None
    cap = m.mig
    want = cap.profile(profile)
    have = {p for n in nodes for g in n.gpus if g.model == model and g.mig_enabled for p in g.mig}
    bigger = [
        cap.profile(p)
        for p in sorted(have - {profile})
        if rules.profile_rejection(w, m, cap.profile(p)) is None
        and cap.profile(p).memory_mib > want.memory_mib
    ]
    return min(bigger, key=lambda p: (p.memory_mib, p.name)).name if bigger else None


def _templates(
    w: Workload,
    wp: WorkloadPlan,
    nodes: Mapping[str, NodePlan],
    out: DraPlan,
    mig_fallback: bool = False,
) -> None:
    """Whole-GPU and MIG workloads: a template per model, a pod group per node."""
    mig = wp.method == "mig"
    on = sorted(wp.nodes.items())
    model_of = {
        name: (_mig_model(wp, nodes[name]) if mig else _whole_model(w, wp, nodes[name]))
        for name, _k in on
    }
    models = set(model_of.values())
    count = 1 if mig else w.gpus
    if count > MAX_RESULTS:
        raise DraPlanError(
            f"{w.name}: {count} devices per replica; a claim holds at most {MAX_RESULTS}"
        )
    for model in sorted(models):
        fallback = None
        if mig and mig_fallback and wp.profile:
            placed = [nodes[name] for name, _k in on if model_of[name] == model]
            fallback = fallback_profile(w, wp.profile, model, placed)
        out.claims.append(
            Claim(
                name=_template_name(w.name, model, models),
                shared=False,
                device_class=nvidia.DRA_MIG_CLASS if mig else nvidia.DRA_DRIVER,
                count=count,
                model=model,
                profile=wp.profile if mig else None,
                fallback_profile=fallback,
            )
        )
    start = 0
    for name, k in on:
        template = _template_name(w.name, model_of[name], models)
        out.groups.append(PodGroup(w.name, name, template, False, _pods(w.name, start, k)))
        start += k


def _shared(
    n: NodePlan,
    workloads: Mapping[str, Workload],
    wps: Mapping[str, WorkloadPlan],
    next_pod: dict[str, int],
    out: DraPlan,
) -> None:
    """One ResourceClaim per shared GPU of the node, filled with the node's shared replicas."""
    strategy = MPS if n.sharing == "mps" else TIME_SLICING
    slots: list[tuple[Claim, int]] = []  # (claim, free slots)
    for i, g in enumerate(gpu for gpu in n.gpus if gpu.role == "shared"):
        if g.replicas > MAX_RESERVED_FOR:
            raise DraPlanError(
                f"{n.name}: GPU {g.index} is shared {g.replicas} ways; a ResourceClaim serves "
                f"at most {MAX_RESERVED_FOR} pods"
            )
        name = f"{n.name}-shared-{i}"
        claim = Claim(name, True, nvidia.DRA_DRIVER, 1, g.model, None, strategy, g.replicas, n.name)
        slots.append((claim, g.replicas))
    used: set[str] = set()
    for wname, k in sorted(n.workloads.items()):
        wp = wps[wname]
        if wp.method not in ("mps", "time-slicing"):
            continue
        w = workloads[wname]
        named = _renamed_model(wp)
        left = k
        for i, (claim, free) in enumerate(slots):
            if not left or not free:
                continue
            if named is not None and claim.model != named:
                continue
            if rules.replicas_for(w, get_model(claim.model)) < claim.replicas:
                continue
            take = min(free, left)
            slots[i] = (claim, free - take)
            start = next_pod.get(wname, 0)
            pods = _pods(wname, start, take)
            next_pod[wname] = start + take
            out.groups.append(PodGroup(wname, n.name, claim.name, True, pods))
            used.add(claim.name)
            left -= take
        if left:
            raise DraPlanError(
                f"{wname} on {n.name}: {left} of its {k} shared replicas fit no shared GPU of "
                "the node (each DRA claim is one GPU split for replicas alike)"
            )
    out.claims += [c for c, _free in slots if c.name in used]


def dra_plan(plan: Plan, workloads: Mapping[str, Workload], mig_fallback: bool = False) -> DraPlan:
    """The plan's claims and pod groups; DraPlanError where DRA cannot express a decision.
    `mig_fallback`: MIG claims fall back to a larger profile (`firstAvailable`)."""
    out = DraPlan()
    nodes = {n.name: n for n in plan.nodes}
    wps = {wp.name: wp for wp in plan.workloads}
    next_pod: dict[str, int] = {}
    for wp in plan.workloads:
        if not wp.nodes:
            continue
        if wp.method in ("whole", "mig"):
            _templates(workloads[wp.name], wp, nodes, out, mig_fallback)
            next_pod[wp.name] = wp.placed
        elif wp.method not in ("mps", "time-slicing"):
            raise DraPlanError(f"{wp.name}: method {wp.method!r} has no DRA form")
    for n in sorted(plan.nodes, key=lambda n: n.name):
        _shared(n, workloads, wps, next_pod, out)
    for kind in (True, False):
        names = Counter(c.name for c in out.claims if c.shared is kind)
        twice = sorted(name for name, k in names.items() if k > 1)
        if twice:
            raise DraPlanError(
                f"{', '.join(twice)}: two claims of one name (a workload named like another "
                "workload's per-model template or a node's shared claim); rename the workload"
            )
    strategies = sorted({c.strategy for c in out.claims if c.strategy})
    gates = {TIME_SLICING: "TimeSlicingSettings=true", MPS: "MPSSupport=true"}
    if strategies:
        out.notes.append(
            "shared claims need the DRA plugin's feature gates "
            f"{','.join(gates[s] for s in strategies)} (GPUCluster draDriver.featureGates)"
        )
    if any(c.strategy == TIME_SLICING for c in out.claims):
        out.notes.append(
            f"time-slicing: interval {INTERVAL} (the plan does not choose one; kubegpu's plugin "
            "hands it to the containers, it does not set it on the GPU: docs/dra.md)"
        )
    if any(c.device_class == nvidia.DRA_MIG_CLASS for c in out.claims):
        out.notes.append(
            "MIG: static layouts, made before the pods: a GPUCluster runs no MIG manager, so "
            "run apply-mig.sh on each node (it applies the node's mig-parted config); dynamic "
            "MIG is not planned"
        )
    fallbacks = [
        f"{c.name} ({c.profile} else {c.fallback_profile})"
        for c in out.claims
        if c.fallback_profile
    ]
    if fallbacks:
        out.notes.append(
            "MIG fallback (firstAvailable, Kubernetes 1.36+): a pod whose planned profile is "
            f"taken gets the larger one: {', '.join(fallbacks)}"
        )
    if any(c.count > 1 for c in out.claims):
        out.notes.append(
            "multi-GPU claims: one claim's devices are on one node and of one product "
            f"(matchAttribute {MATCH_ATTRIBUTE}); NVLink is the node's, as the plan chose it"
        )
    if any(c.strategy == MPS for c in out.claims):
        out.notes.append(
            "MPS: the DRA plugin starts one MPS control daemon per shared claim at prepare "
            "(the device plugin's mps.capable label and mpsRoot do not apply)"
        )
    left = [f"{wp.name} ({wp.left})" for wp in plan.workloads if wp.left]
    if left:
        out.notes.append(f"replicas left over get no claim: {', '.join(left)}")
    return out


# --- objects -------------------------------------------------------------------------------


def claim_spec(c: Claim) -> Json:
    """The `ResourceClaimSpec` of a claim or template."""
    exactly: Json = {
        "deviceClassName": c.device_class,
        "selectors": [{"cel": {"expression": e}} for e in c.selectors()],
        "allocationMode": "ExactCount",
        "count": c.count,
    }
    request: Json = {"name": POD_CLAIM, "exactly": exactly}
    if c.fallback_profile is not None:
        assert c.profile is not None
        fallback = {
            **exactly,
            "selectors": [{"cel": {"expression": e}} for e in c.fallback_selectors()],
        }
        request = {
            "name": POD_CLAIM,
            "firstAvailable": [
                {"name": subrequest_name(c.profile), **exactly},
                {"name": subrequest_name(c.fallback_profile), **fallback},
            ],
        }
    devices: Json = {"requests": [request]}
    if c.count > 1:
        devices["constraints"] = [{"requests": [POD_CLAIM], "matchAttribute": MATCH_ATTRIBUTE}]
    params = c.parameters()
    if params is not None:
        devices["config"] = [
            {
                "requests": [POD_CLAIM],
                "opaque": {"driver": nvidia.DRA_DRIVER, "parameters": params},
            }
        ]
    return {"devices": devices}


def subrequest_name(profile: str) -> str:
    """`1g.18gb+me` -> `mig-1g18gbme`: a DNS label naming a profile's subrequest."""
    return "mig-" + "".join(ch for ch in profile.lower() if ch.isalnum())


def claim_object(c: Claim, pods: list[str]) -> Json:
    """The ResourceClaim (shared) or ResourceClaimTemplate of one claim; `pods` go in an
    annotation so that `kubectl get -o yaml` shows who shares it."""
    meta: Json = {"name": c.name, "labels": {"app.kubernetes.io/managed-by": "kubegpu-plan"}}
    if c.shared:
        meta["annotations"] = {"kubegpu.dev/planned-pods": ",".join(pods)}
        return {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": claim_spec(c),
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {"spec": claim_spec(c)},
    }


def claim_objects(dp: DraPlan) -> list[Json]:
    pods: dict[str, list[str]] = {}
    for g in dp.groups:
        pods.setdefault(g.claim, []).extend(g.pods)
    return [claim_object(c, pods.get(c.name, [])) for c in dp.claims]


def pod_groups(dp: DraPlan) -> Json:
    """Per workload, its pod groups: node, pods, the claim and the pod-spec fields."""
    out: dict[str, list[Json]] = {}
    for g in dp.groups:
        out.setdefault(g.workload, []).append(
            {
                "node": g.node,
                "replicas": len(g.pods),
                "pods": list(g.pods),
                ("sharedClaim" if g.shared else "claimTemplate"): g.claim,
                "spec": g.pod_spec(),
            }
        )
    return {"workloads": out}


def dra_json(dp: DraPlan) -> Json:
    """The DRA part of `kubegpu plan --api dra --json`."""
    pods: dict[str, list[str]] = {}
    for g in dp.groups:
        pods.setdefault(g.claim, []).extend(g.pods)
    return {
        "claims": [
            {
                "name": c.name,
                "kind": "ResourceClaim" if c.shared else "ResourceClaimTemplate",
                "deviceClassName": c.device_class,
                "count": c.count,
                "model": c.model,
                **({"profile": c.profile} if c.profile else {}),
                **({"sharing": c.parameters()} if c.shared else {}),
                **({"node": c.node, "pods": pods.get(c.name, [])} if c.shared else {}),
            }
            for c in dp.claims
        ],
        **pod_groups(dp),
        "notes": dp.notes,
    }
