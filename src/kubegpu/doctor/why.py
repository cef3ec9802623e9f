"""Why a GPU pod is Pending: one sentence and the evidence, judged from a doctor snapshot.

`kubegpu why POD` (and `kubegpu doctor --pod NS/NAME`) answer the question administrators
ask most of a GPU cluster: the scheduler's own message ("0/12 nodes are available: 12
Insufficient nvidia.com/mig-1g.10gb") names a symptom, not the cause. Each judgement here is
a pure function over the snapshot; `explain` tries them in the order a cause hides the next
(a failed admission before scheduling, a resource nobody advertises before capacity) and
the first that applies is the verdict. docs/doctor.md lists the kinds.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.doctor.facts import (
    MIG_PARTED_KEY,
    mig_parted_config,
    mig_parted_configmap,
    plugin_config_of,
    wanted_mig_config,
)
from kubegpu.doctor.snapshot import NodeInfo, PodInfo, ResourceClaimInfo, Snapshot

# the kinds of verdict, in the words `--json` prints
NOT_PENDING = "not-pending"
NO_GPU_REQUEST = "no-gpu-request"
ADMISSION_FAILED = "admission-failed"
CLAIM_MISSING = "claim-missing"
DRA_NO_DEVICE = "dra-selector-no-match"
MIG_PENDING = "mig-manager-pending"
MIG_FAILED = "mig-manager-failed"
STRATEGY_NAMING = "mig-strategy-naming"
UNKNOWN_RESOURCE = "resource-not-advertised"
NODE_SELECTOR = "node-selector"
TAINT = "taint"
CORDONED = "cordoned"
FRAGMENTED = "fragmented"
INSUFFICIENT = "insufficient"
SCHEDULER = "scheduler-says"

KINDS = (NOT_PENDING, NO_GPU_REQUEST, ADMISSION_FAILED, CLAIM_MISSING, DRA_NO_DEVICE,
         MIG_PENDING, MIG_FAILED, STRATEGY_NAMING, UNKNOWN_RESOURCE, NODE_SELECTOR, TAINT,
         CORDONED, FRAGMENTED, INSUFFICIENT, SCHEDULER)  # fmt: skip

_BLOCKING = ("NoSchedule", "NoExecute")
_MIG_PROFILE = re.compile(r"^nvidia\.com/mig-(.+)$")
_MIG_PRODUCT = re.compile(r"-MIG-(\d+g\.\d+gb(?:\+\w+)?)$")
_DONE = ("Succeeded", "Failed")


class WhyError(ValueError):
    """The pod is not in the snapshot (or the reference does not name one)."""


@dataclass(frozen=True)
class Verdict:
    pod: str  # namespace/name
    kind: str
    reason: str  # one sentence
    evidence: tuple[str, ...] = ()
    fix: str = ""
    # what the what-if twin was asked and showed (`doctor.replay`); None: no replay
    replay: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "kind": self.kind,
            "reason": self.reason,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "replay": self.replay,
        }


@dataclass(frozen=True)
class _Ask:
    """What the pod asks for: extended resources with their counts, and its claims."""

    pod: PodInfo
    resources: dict[str, int] = field(default_factory=dict)


def find_pod(snapshot: Snapshot, ref: str) -> PodInfo:
    """`NS/NAME` (or `NAME` in `default`) in the snapshot's pods (those asking for GPUs and
    the operator's)."""
    namespace, _, name = ref.rpartition("/")
    namespace = namespace or "default"
    if not name or "/" in namespace:
        raise WhyError(f"pod {ref!r}: expected NAMESPACE/NAME")
    pod = next((p for p in snapshot.pods if p.namespace == namespace and p.name == name), None)
    if pod is None:
        raise WhyError(
            f"pod {namespace}/{name} is not in the snapshot: it does not exist, or it asks for "
            f"no {nvidia.PREFIX} resource and holds no resource claim"
        )
    return pod


def explain(snapshot: Snapshot, pod: PodInfo) -> Verdict:
    """The first judgement that applies, tried in the order one cause hides the next."""
    ask = _Ask(pod, _counts(pod))
    for judge in JUDGEMENTS:
        verdict = next(judge(snapshot, ask), None)
        if verdict is not None:
            return verdict
    return _scheduler_says(ask)


def why(snapshot: Snapshot, ref: str) -> Verdict:
    return explain(snapshot, find_pod(snapshot, ref))


# --- helpers --------------------------------------------------------------------------------


def _counts(pod: PodInfo) -> dict[str, int]:
    out = {}
    for key, value in pod.gpu_resources.items():
        n = _int(value)
        if n > 0:
            out[key] = n
    return out


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _advertised(node: NodeInfo, resource: str) -> int:
    return _int(node.allocatable.get(resource, "0"))


def _in_use(snapshot: Snapshot, node: str, resource: str, but: PodInfo) -> int:
    return sum(
        _int(p.gpu_resources.get(resource, "0"))
        for p in snapshot.pods_on(node)
        if p.phase not in _DONE and p.key != but.key
    )


def _free(snapshot: Snapshot, node: NodeInfo, resource: str, but: PodInfo) -> int:
    return max(0, _advertised(node, resource) - _in_use(snapshot, node.name, resource, but))


def _v(pod: PodInfo, kind: str, reason: str, evidence: list[str], fix: str) -> Verdict:
    return Verdict(pod.key, kind, reason, tuple(e for e in evidence if e), fix)


def _scheduler_line(pod: PodInfo) -> str:
    if not pod.unscheduled_message:
        return ""
    return f"the scheduler: {pod.unscheduled_reason or 'Unschedulable'}: {pod.unscheduled_message}"


def _asks(ask: _Ask) -> str:
    parts = [f"{k}: {v}" for k, v in sorted(ask.resources.items())]
    parts += [f"claim {c}" for c in ask.pod.claims]
    return "asks " + (", ".join(parts) or "nothing")


Judgement = Callable[[Snapshot, _Ask], Iterator[Verdict]]


# --- the judgements -------------------------------------------------------------------------


def _not_pending(snapshot: Snapshot, ask: _Ask) -> Iterator[Verdict]:
    pod = ask.pod
    if pod.phase in ("Running", "Succeeded") or (pod.node and pod.phase != "Failed"):
        where = f" on {pod.node}" if pod.node else ""
        yield _v(
            pod,
            NOT_PENDING,
            f"the pod is not Pending: it is {pod.phase or 'bound'}{where}",
            [f"phase {pod.phase or '?'}, node {pod.node or '(none)'}"],
            "nothing to do",
        )


def _admission_failed(snapshot: Snapshot, ask: _Ask) -> Iterator[Verdict]:
    pod = ask.pod
    if pod.phase != "Failed":
        return
    node = snapshot.node(pod.node) if pod.node else None
    config_line = ""
    if node is not None:
        choice = plugin_config_of(snapshot, node)
        config = choice.config
        if config is not None and config.fail_requests_greater_than_one:
            config_line = (
                f"node {node.name} runs {choice.shown}, which sets failRequestsGreaterThanOne: "
                "a container may ask for one shared replica only"
            )
    yield _v(
        pod,
        ADMISSION_FAILED,
        f"the kubelet on {pod.node or '?'} refused the pod after the scheduler placed it "
        f"({pod.reason or 'Failed'}), and a Failed pod is never retried",
        [f"phase Failed, reason {pod.reason or '?'}: {pod.message or 'no message'}", _asks(ask),
         config_line],
        "ask for one replica per container where failRequestsGreaterThanOne is set (or fix "
        "what the device plugin's log says), then recreate the pod",
    )  # fmt: skip


def _no_gpu(snapshot: Snapshot, ask: _Ask) -> Iterator[Verdict]:
    if not ask.resources and not ask.pod.claims:
        yield _v(
            ask.pod,
            NO_GPU_REQUEST,
            "the pod asks for no GPU: its reason is not a GPU one",
            [_scheduler_line(ask.pod)],
            "read `kubectl describe pod`",
        )


# CEL terms of the shape device.attributes['domain'].name OP literal, and device.driver
_TERM = re.compile(
    r"device\.attributes\[['\"]([^'\"]+)['\"]\]\.([A-Za-z_][\w]*)\s*(==|!=)\s*"
    r"(?:['\"]([^'\"]*)['\"]|(-?\d+)|(true|false))"
)
_DRIVER_TERM = re.compile(r"device\.driver\s*==\s*['\"]([^'\"]+)['\"]")


def _device_attrs(snapshot: Snapshot) -> list[tuple[str, str, dict[str, str]]]:
    """(driver, device, attributes by short name) of every published device."""
    out = []
    for s in snapshot.resource_slices:
        for d in s.devices:
            attrs = {k.rpartition("/")[2]: v for k, v in d.attributes.items()}
            out.append((s.driver, f"{s.node or s.pool}/{d.name}", attrs))
    return out


def _term_holds(term: re.Match[str], driver: str, attrs: dict[str, str]) -> bool:
    domain, name, op, text, number, boolean = term.groups()
    if domain != driver:
        return False
    value = text if text is not None else (number if number is not None else boolean)
    have = attrs.get(name)
    return (have == value) if op == "==" else (have is not None and have != value)


def _dra_no_device(snapshot: Snapshot, ask: _Ask) -> Iterator[Verdict]:
    pod = ask.pod
    if not pod.claims:
        return
    if not pod.claim_objects:
        yield _v(
            pod,
            CLAIM_MISSING,
            "the pod's resource claims have no ResourceClaim yet (its template was not "
            "instantiated, or the claim it names does not exist)",
            [f"claims {', '.join(pod.claims)}", _scheduler_line(pod)],
            "create the ResourceClaim (or the ResourceClaimTemplate) the pod names",
        )
        return
    devices = _device_attrs(snapshot)
    for name in pod.claim_objects:
        claim: ResourceClaimInfo | None = snapshot.claim(pod.namespace, name)
        if claim is None:
            yield _v(
                pod,
                CLAIM_MISSING,
                f"the pod's ResourceClaim {pod.namespace}/{name} does not exist",
                [f"claims {', '.join(pod.claims)}", _scheduler_line(pod)],
                "create the claim, or correct the pod's resourceClaims",
            )
            return
        for req in claim.requests:
            terms = [m for sel in req.selectors for m in _TERM.finditer(sel)]
            drivers = [m.group(1) for sel in req.selectors for m in _DRIVER_TERM.finditer(sel)]
            if not terms:
                continue
            matching = [
                d
                for drv, d, attrs in devices
                if all(_term_holds(t, drv, attrs) for t in terms)
                and all(drv == want for want in drivers)
            ]
            if matching:
                continue
            # the first term no device satisfies names the attribute to show
            bad = next(
                (t for t in terms if not any(_term_holds(t, drv, a) for drv, _, a in devices)),
                terms[0],
            )
            domain, attr = bad.group(1), bad.group(2)
            values = sorted({a[attr] for drv, _, a in devices if drv == domain and attr in a})
            yield _v(
                pod,
                DRA_NO_DEVICE,
                f"request {req.name!r} of claim {name} selects no published device: no "
                f"{domain} device has {bad.group(0)!r}",
                [
                    f"selectors: {' && '.join(req.selectors)}",
                    f"attribute {domain}/{attr}: "
                    + (
                        f"the values published are {', '.join(values)}"
                        if values
                        else "no device publishes it"
                    ),
                    f"{len(devices)} device(s) in {len(snapshot.resource_slices)} ResourceSlice(s)",
                    _scheduler_line(pod),
                ],
                f"select a value that exists ({', '.join(values[:5]) or 'none'}), or publish "
                "devices that have it",
            )
            return


def _profile(resource: str) -> str | None:
    m = _MIG_PROFILE.match(resource)
    return m.group(1) if m else None


def _layout_offers(snapshot: Snapshot, node: NodeInfo, config: str, profile: str) -> bool:
    cm_name = mig_parted_configmap(snapshot, node)
    cm = snapshot.config_map(cm_name)
    if cm is None or MIG_PARTED_KEY not in cm.data:
        return False
    parsed, _ = mig_parted_config(cm.data[MIG_PARTED_KEY], f"configmap {cm_name}")
    if parsed is None or config not in parsed.mig_configs:
        return False
    return any(profile in e.wanted() for e in parsed.mig_configs[config] if e.mig_enabled)


def _mig_manager(snapshot: Snapshot, ask: _Ask) -> Iterator[Verdict]:
    """A MIG reconfiguration stuck on the only nodes that would serve the pod: they do not
    advertise the profile yet (pending) or will not (failed)."""
    for resource in sorted(ask.resources):
        stuck = []
        for node in snapshot.nodes:
            state = node.labels.get(nvidia.MIG_CONFIG_STATE)
            wanted = wanted_mig_config(node)
            if state not in (nvidia.MIG_STATE_PENDING, nvidia.MIG_STATE_FAILED) or not wanted:
                continue
            profile = _profile(resource)
            single = resource == nvidia.GPU_RESOURCE and (
                node.labels.get(nvidia.MIG_STRATEGY) == "single"
            )
            if (profile and _layout_offers(snapshot, node, wanted, profile)) or single:
                stuck.append((node, state, wanted))
        if not stuck:
            continue
        if any(_free(snapshot, n, resource, ask.pod) >= ask.resources[resource]
               for n in snapshot.nodes if n.name not in {s[0].name for s in stuck}):  # fmt: skip
            continue  # another node serves it: the reconfiguration is not the reason
        failed = any(state == nvidia.MIG_STATE_FAILED for _, state, _ in stuck)
        events = []
        for node, state, wanted in stuck:
            last = [
                e
                for e in snapshot.events_about("Node", node.name)
                if e.component.endswith("mig-manager")
            ]
            said = (
                f"; last MIG manager event: {last[-1].reason}: {last[-1].message}" if last else ""
            )
            events.append(
                f"node {node.name}: {nvidia.MIG_CONFIG}={wanted}, "
                f"{nvidia.MIG_CONFIG_STATE}={state}{said}"
            )
        names = ", ".join(n.name for n, _, _ in stuck)
        yield _v(
            ask.pod,
            MIG_FAILED if failed else MIG_PENDING,
            f"{resource} would come from the MIG layout asked for on {names}, but the MIG "
            f"manager's reconfiguration there is {'failed' if failed else 'still pending'}",
            [_asks(ask), *events, _scheduler_line(ask.pod)],
            "read the MIG manager's event and logs on the node, fix the cause (a busy GPU, the "
            "layout, the driver) and relabel nvidia.com/mig.config"
            if failed
            else "wait for nvidia.com/mig.config.state=success; if it stays pending, check that "
            "the MIG manager runs on the node and its logs",
        )
        return


def _advertised_names(snapshot: Snapshot) -> list[str]:
    names = {
        k
        for n in snapshot.nodes
        for k, v in n.allocatable.items()
        if k.startswith(nvidia.PREFIX) and _int(v) > 0
    }
    return sorted(names)


def _naming(snapshot: Snapshot, ask: _Ask) -> Iterator[Verdict]:
    """A resource no node advertises: the strategy's naming, else the nearest name."""
    names = _advertised_names(snapshot)
    for resource in sorted(ask.resources):
        if resource in names:
            continue
        profile = _profile(resource)
        single_nodes = [
            n
            for n in snapshot.nodes
            if n.labels.get(nvidia.MIG_STRATEGY) == "single"
            and _MIG_PRODUCT.search(n.labels.get(nvidia.GPU_PRODUCT, ""))
            and _advertised(n, nvidia.GPU_RESOURCE) > 0
        ]
        if profile is not None and single_nodes:
            products = sorted({n.labels[nvidia.GPU_PRODUCT] for n in single_nodes})
            yield _v(
                ask.pod,
                STRATEGY_NAMING,
                f"under the 'single' MIG strategy MIG devices are advertised as "
                f"{nvidia.GPU_RESOURCE}, not {resource}",
                [
                    _asks(ask),
                    f"nodes {', '.join(n.name for n in single_nodes)}: {nvidia.MIG_STRATEGY}="
                    f"single, {nvidia.GPU_PRODUCT} {', '.join(products)}",
                    f"advertised: {', '.join(names) or 'nothing'}",
                ],
                f"ask for {nvidia.GPU_RESOURCE} (with a nodeSelector on {nvidia.GPU_PRODUCT}), "
                "or set the ClusterPolicy's spec.mig.strategy to 'mixed'",
            )
            return
        mixed = [n for n in names if _profile(n)]
        if resource == nvidia.GPU_RESOURCE and mixed:
            yield _v(
                ask.pod,
                STRATEGY_NAMING,
                f"under the 'mixed' MIG strategy no node advertises {nvidia.GPU_RESOURCE} for "
                "its MIG GPUs: each profile is its own resource",
                [_asks(ask), f"advertised: {', '.join(names)}"],
                f"ask for one of {', '.join(mixed)}",
            )
            return
        near = difflib.get_close_matches(resource, names, n=1, cutoff=0.6)
        if profile is not None:
            same = [n for n in names if (_profile(n) or "").split(".")[0] == profile.split(".")[0]]
            near = (same or near)[:1]
        yield _v(
            ask.pod,
            UNKNOWN_RESOURCE,
            f"no node advertises {resource}"
            + (f"; the nearest resource that exists is {near[0]}" if near else ""),
            [_asks(ask), f"advertised: {', '.join(names) or 'no ' + nvidia.PREFIX + ' resource'}"],
            f"ask for {near[0]}"
            if near
            else "install the device plugin on the GPU nodes, or "
            "ask for a resource that is advertised",
        )
        return


def reason_excluded(node: NodeInfo, pod: PodInfo) -> tuple[str, str] | None:
    """(kind, why) when the pod cannot go to `node` whatever its capacity."""
    wrong = {k: v for k, v in pod.node_selector.items() if node.labels.get(k) != v}
    if wrong:
        shown = ", ".join(
            f"{k}={v} (node: {node.labels.get(k, 'unset')})" for k, v in wrong.items()
        )
        return NODE_SELECTOR, f"node {node.name}: nodeSelector {shown}"
    if node.unschedulable:
        return CORDONED, f"node {node.name}: cordoned (spec.unschedulable)"
    for t in node.taints:
        if t.effect in _BLOCKING and not any(tol.tolerates(t) for tol in pod.tolerations):
            return TAINT, f"node {node.name}: taint {t.key}={t.value}:{t.effect}, not tolerated"
    return None


def _placement(snapshot: Snapshot, ask: _Ask) -> Iterator[Verdict]:
    for resource in sorted(ask.resources):
        want = ask.resources[resource]
        serving = [n for n in snapshot.nodes if _advertised(n, resource) > 0]
        if not serving:
            continue
        excluded = [(n, reason_excluded(n, ask.pod)) for n in serving]
        eligible = [n for n, why in excluded if why is None]
        if not eligible:
            kinds = [why[0] for _, why in excluded if why is not None]
            kind = next(k for k in (NODE_SELECTOR, TAINT, CORDONED) if k in kinds)
            words = {
                NODE_SELECTOR: "the pod's nodeSelector matches none of them",
                TAINT: "they carry taints the pod does not tolerate",
                CORDONED: "they are cordoned",
            }
            fixes = {
                NODE_SELECTOR: "correct the nodeSelector (or label the GPU nodes)",
                TAINT: "add a toleration for the taint to the pod, or remove the taint",
                CORDONED: "uncordon a node",
            }
            yield _v(
                ask.pod,
                kind,
                f"the nodes that advertise {resource} ({', '.join(n.name for n in serving)}) "
                f"are out of the pod's reach: {words[kind]}",
                [_asks(ask), *(why[1] for _, why in excluded if why is not None),
                 _scheduler_line(ask.pod)],
                fixes[kind],
            )  # fmt: skip
            return
        free = {n.name: _free(snapshot, n, resource, ask.pod) for n in eligible}
        if max(free.values()) >= want:
            continue
        total = sum(free.values())
        holders = sorted(
            p.key
            for n in eligible
            for p in snapshot.pods_on(n.name)
            if p.phase not in _DONE and p.key != ask.pod.key and resource in p.gpu_resources
        )
        per_node = "; ".join(
            f"{n.name}: {free[n.name]} free of {_advertised(n, resource)}"
            for n in sorted(eligible, key=lambda n: n.name)
        )
        if total >= want:
            yield _v(
                ask.pod,
                FRAGMENTED,
                f"{total} {resource} are free, but spread over nodes: none has the {want} the "
                "pod asks for in one place",
                [_asks(ask), per_node, _scheduler_line(ask.pod)],
                "move (or finish) the pods holding the rest on one node, or split the pod's "
                "request across pods",
            )
        else:
            yield _v(
                ask.pod,
                INSUFFICIENT,
                f"every {resource} is in use: {total} free where the pod asks for {want}",
                [_asks(ask), per_node,
                 f"held by {', '.join(holders[:10])}" + (" ..." if len(holders) > 10 else "")
                 if holders else "", _scheduler_line(ask.pod)],
                "wait for pods to finish, add GPUs, or repartition nodes with idle GPUs "
                "(`kubegpu plan` with the fleet's current state, docs/planner.md)",
            )  # fmt: skip
        return


def _scheduler_says(ask: _Ask) -> Verdict:
    pod = ask.pod
    message = pod.unscheduled_message
    return _v(
        pod,
        SCHEDULER,
        "no GPU reason found in the snapshot: "
        + (f"the scheduler says {message}" if message else "the scheduler has not said why yet"),
        [_asks(ask), _scheduler_line(pod)],
        "read `kubectl describe pod` and the scheduler's events; other resources (CPU, memory) "
        "or affinities may be what is short",
    )


JUDGEMENTS: tuple[Judgement, ...] = (
    _not_pending,
    _admission_failed,
    _no_gpu,
    _dra_no_device,
    _mig_manager,
    _naming,
    _placement,
)
