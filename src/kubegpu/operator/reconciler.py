"""One reconcile pass: read the cluster facts, render, validate the whole set, apply, write
status. `Reconciler.reconcile_once()` is the whole pass, readable top to bottom.

The reconciler knows nothing of watches, triggers or retries (`kubegpu.operator.controller`
holds those): it reads its inputs from `Caches`, four kinds of `Store` (the controller's
informers, or `Snapshot`s built in-process by a test), and writes through `Api`.

A pass lands whole or not at all. Every object whose hash differs from the live one is
first sent to the API server as a server-side dry-run (`dryRun=All`); only when the server
accepts every one of them are the nodes labelled and the objects written. A refusal leaves
the cluster as it was, and the status names the object and the field the server refused.
A policy that sets a key the operator relies on (`kubegpu.operator.reserved`) is refused
before anything is rendered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from lightkube.core.exceptions import ApiError
from pydantic import ValidationError

from kubegpu.kube.informer import key_of
from kubegpu.kube.policy import (
    GPU_CLUSTER_VERSION,
    GROUP,
    parse_gpu_cluster_spec,
    parse_policy_spec,
)
from kubegpu.operator import gpucluster, node_facts
from kubegpu.operator import labels as node_labels
from kubegpu.operator import status as st
from kubegpu.operator.api import OPTIONAL_KINDS, Api
from kubegpu.operator.ignored_fields import ignored_cluster_fields, ignored_policy_fields
from kubegpu.operator.render import (
    DEFAULT_IMAGE,
    DEFAULT_NAMESPACE,
    HASH_ANNOTATION,
    STATE_LABEL,
    ClusterFacts,
    Owner,
    Rendered,
    render,
)

log = logging.getLogger("kubegpu.operator.controller")  # the name operators grep for

Obj = dict[str, Any]

# prune in this order: workloads first, their permissions last
PRUNE_ORDER = (
    "DaemonSet",
    "DeviceClass",
    "ServiceMonitor",
    "Service",
    "ConfigMap",
    "RoleBinding",
    "Role",
    "ClusterRoleBinding",
    "ClusterRole",
    "ServiceAccount",
    "RuntimeClass",
)
PSA_LABELS = {
    f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")
}


@dataclass
class OperatorConfig:
    namespace: str = DEFAULT_NAMESPACE
    kubegpu_image: str = DEFAULT_IMAGE
    image_env: Mapping[str, str] = field(default_factory=dict)
    renew_s: float = 60.0  # watch renewal; liveness fails after 3x without contact
    debounce_s: float = 0.05
    retry_max_s: float = 3.0
    label_concurrency: int = 32  # node label patches in flight at once


class Store(Protocol):
    """What a pass reads and writes through for one kind (an `Informer` is one)."""

    available: bool

    def get(self, namespace: str, name: str) -> Obj | None: ...

    def items(self) -> list[Obj]: ...

    def store(self, obj: Obj) -> None: ...

    def forget(self, namespace: str, name: str) -> None: ...


class Snapshot:
    """A `Store` of objects held in memory: a pass's inputs built in-process."""

    def __init__(self, objects: Sequence[Obj] = (), *, available: bool = True) -> None:
        self.available = available
        self.cache: dict[tuple[str, str], Obj] = {key_of(o): o for o in objects}

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.cache.get((namespace, name))

    def items(self) -> list[Obj]:
        return list(self.cache.values())

    def store(self, obj: Obj) -> None:
        self.cache[key_of(obj)] = obj

    def forget(self, namespace: str, name: str) -> None:
        self.cache.pop((namespace, name), None)


@dataclass
class Caches:
    """A pass's inputs: the policies, GPUClusters, Nodes and every kind the operator owns."""

    policies: Store
    gpu_clusters: Store
    nodes: Store
    owned: Mapping[str, Store]


@dataclass(frozen=True)
class Plan:
    """What a pass decided for the active resource: what it would write, before any write."""

    kind: str
    rendered: Rendered
    facts: ClusterFacts
    label_patches: Mapping[str, Mapping[str, str | None]]
    writes: tuple[Obj, ...]  # rendered objects whose hash differs from the live one
    desired: frozenset[tuple[str, str, str]]  # (kind, namespace, name) of everything rendered
    psa: tuple[str, int] | None  # label the namespace for Pod Security Admission (uid, gen)


class Reconciler:
    def __init__(self, api: Api, caches: Caches, config: OperatorConfig | None = None) -> None:
        self.api = api
        self.caches = caches
        self.config = config or OperatorConfig()
        self._psa_done: tuple[str, int] | None = None
        self._ignored_said: tuple[str, ...] = ()
        self.reconciles = 0
        self.last_outcome: st.Outcome | None = None
        self.last_applied: tuple[Obj, ...] = ()  # the objects the last pass wrote

    async def reconcile_once(self) -> st.Outcome | None:
        """One pass; the active resource's outcome (None when there is none)."""
        self.reconciles += 1
        ns, now = self.config.namespace, _now()
        choice = gpucluster.choose(self.caches.policies.items(), self.caches.gpu_clusters.items())
        for ignored in choice.ignored_policies:
            status = st.ignored_status(
                ignored.reason, ignored.message, ignored.obj.get("status"), ns, now
            )
            await self._write_status("ClusterPolicy", ignored.obj, status)
        for ignored in choice.ignored_clusters:
            status = st.ignored_status(
                ignored.reason, ignored.message, ignored.obj.get("status"), ns, now
            )
            await self._write_status("GPUCluster", ignored.obj, status)
        active = choice.active
        if active is None:
            return None
        kind = choice.kind or "ClusterPolicy"
        plan_or_refusal = self.plan(active, kind)
        if isinstance(plan_or_refusal, st.Outcome):
            outcome = plan_or_refusal
        else:
            outcome = await self.carry_out(plan_or_refusal)
        if outcome.ok and choice.conflicting:
            names = [c.split(" ", 1)[1] for c in choice.conflicting]
            outcome = (
                st.conflict_outcome(names)
                if kind == "ClusterPolicy"
                else st.policy_conflict_outcome(names)
            )
        self.last_outcome = outcome
        status = st.policy_status(outcome, active.get("status"), ns, now, generation_of(active))
        await self._write_status(kind, active, status)
        return outcome

    # -- read and decide (no writes) ---------------------------------------------------------------
    def plan(self, active: Obj, kind: str) -> Plan | st.Outcome:
        """Read the facts and render. The facts are those the nodes will have once this
        pass's label patches land (a pass that counted GPU nodes before it set their
        gpu.present label would render no DaemonSet on a cluster of GPU nodes)."""
        changes: Callable[[dict[str, str]], Mapping[str, str | None]]
        try:
            if kind == "GPUCluster":
                gc = parse_gpu_cluster_spec(active.get("spec"))
                changes = lambda labels: gpucluster.dra_label_changes(labels, gc)  # noqa: E731
            else:
                spec = parse_policy_spec(active.get("spec"))
                changes = lambda labels: gpucluster.policy_label_changes(labels, spec)  # noqa: E731
        except ValidationError as exc:
            return refused(f"{kind} {active['metadata']['name']}: {_first_error(exc)}")
        nodes = self.caches.nodes.items()
        patches = node_labels.node_patches(
            {n["metadata"]["name"]: object_labels(n) for n in nodes}, changes
        )
        projected = [_with_labels(n, patches.get(n["metadata"]["name"])) for n in nodes]
        facts = self._facts(active, kind, projected)
        if kind == "GPUCluster":
            rendered = gpucluster.render_gpu_cluster(gc, facts)
            self._say_ignored(kind, active, ignored_cluster_fields(gc))
            psa = None
        else:
            rendered = render(spec, facts)
            self._say_ignored(kind, active, ignored_policy_fields(spec))
            generation = (active["metadata"]["uid"], generation_of(active))
            psa = generation if spec.psa.enabled and self._psa_done != generation else None
        writes, desired = self._writes(rendered)
        return Plan(kind, rendered, facts, patches, tuple(writes), frozenset(desired), psa)

    def _writes(self, rendered: Rendered) -> tuple[list[Obj], set[tuple[str, str, str]]]:
        writes: list[Obj] = []
        desired: set[tuple[str, str, str]] = set()
        for obj in rendered.objects():
            kind, meta = obj["kind"], obj["metadata"]
            namespace = str(meta.get("namespace") or "")
            desired.add((kind, namespace, meta["name"]))
            store = self.caches.owned[kind]
            if kind in OPTIONAL_KINDS and not store.available:
                continue
            live = store.get(namespace, meta["name"])
            if live is not None and applied_hash(live) == meta["annotations"][HASH_ANNOTATION]:
                continue
            writes.append(obj)
        return writes, desired

    def _facts(self, policy: Obj, kind: str, nodes: Sequence[Obj]) -> ClusterFacts:
        gpu_nodes = sorted(
            (n for n in nodes if object_labels(n).get(node_labels.GPU_PRESENT) == "true"),
            key=lambda n: n["metadata"]["name"],
        )
        return ClusterFacts(
            namespace=self.config.namespace,
            kubegpu_image=self.config.kubegpu_image,
            owner=Owner(
                policy["metadata"]["name"],
                policy["metadata"]["uid"],
                kind,
                f"{GROUP}/{GPU_CLUSTER_VERSION}" if kind == "GPUCluster" else f"{GROUP}/v1",
            ),
            gpu_nodes=len(gpu_nodes),
            os_tag=node_facts.os_tag(gpu_nodes[0]) if gpu_nodes else None,
            runtime=node_facts.cluster_runtime(gpu_nodes),
            service_monitor_crd=self.caches.owned["ServiceMonitor"].available,
            image_env=self.config.image_env,
        )

    def _say_ignored(self, kind: str, active: Obj, fields: tuple[str, ...]) -> None:
        """Warn once per change about the spec's values no operand carries."""
        if fields == self._ignored_said:
            return
        self._ignored_said = fields
        name = active["metadata"]["name"]
        for what in fields:
            log.warning("%s %s: %s (accepted and ignored)", kind, name, what)

    # -- validate, then write ----------------------------------------------------------------------
    async def carry_out(self, plan: Plan) -> st.Outcome:
        """Validate the plan's writes, then (only if all pass) label, write and prune; the
        outcome. `last_applied` is what was written: all of `plan.writes`, or nothing."""
        rendered = plan.rendered
        errors: list[str] = []
        self.last_applied = ()
        if not rendered.problems:
            errors = await self._validate(plan.writes)
            if not errors:
                await self._label_nodes(plan.label_patches)
                if plan.psa is not None:
                    await self.api.label_namespace(self.config.namespace, PSA_LABELS)
                    self._psa_done = plan.psa
                errors = await self._apply(plan)
        daemonsets = {o["metadata"]["name"]: o for o in self.caches.owned["DaemonSet"].items()}
        nodes = self.caches.nodes.items()
        return st.evaluate(
            rendered,
            daemonsets,
            gpu_nodes=plan.facts.gpu_nodes,
            nfd_labels=any(node_labels.has_nfd_labels(object_labels(n)) for n in nodes),
            apply_errors=errors,
            kind=plan.kind,
        )

    async def _validate(self, writes: Sequence[Obj]) -> list[str]:
        """Server-side dry-run of every write; the refusals, each naming its object."""

        pending = {(o["kind"], o["metadata"]["name"]) for o in writes}

        async def check(obj: Obj) -> str | None:
            try:
                await self.api.apply(obj, dry_run=True)
            except ApiError as exc:
                if exc.status.code == 404 and _role_in(obj, pending):
                    # RBAC's escalation check reads the bound role, which this same pass
                    # creates (written before the binding, in render order)
                    return None
                return f"{obj['kind']} {obj['metadata']['name']}: {exc.status.message}"
            return None

        results = await asyncio.gather(*(check(o) for o in writes))
        refusals = [r for r in results if r is not None]
        if refusals:
            refusals[-1] += " (nothing was applied)"
        return refusals

    async def _label_nodes(self, patches: Mapping[str, Mapping[str, str | None]]) -> None:
        if not patches:
            return
        gate = asyncio.Semaphore(max(1, self.config.label_concurrency))

        async def label(name: str, patch: Mapping[str, str | None]) -> None:
            async with gate:
                log.info("node %s: labels %s", name, dict(patch))
                try:
                    self.caches.nodes.store(await self.api.label_node(name, patch))
                except ApiError as exc:
                    if exc.status.code != 404:  # a node deleted meanwhile is no error
                        raise

        # every patch runs to its end before a failure is raised: none is left half-sent
        results = await asyncio.gather(
            *(label(name, patch) for name, patch in patches.items()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _apply(self, plan: Plan) -> list[str]:
        errors: list[str] = []
        self.last_applied = plan.writes
        for obj in plan.writes:
            meta = obj["metadata"]
            try:
                self.caches.owned[obj["kind"]].store(await self.api.apply(obj))
            except ApiError as exc:  # accepted by the dry-run, refused now: a race
                errors.append(f"{obj['kind']} {meta['name']}: {exc.status.message}")
        if errors:
            return errors  # do not prune while the desired set could not be applied
        failed_states = {s.name for s in plan.rendered.states if s.error}
        for kind in PRUNE_ORDER:
            store = self.caches.owned[kind]
            for obj in store.items():
                namespace, name = key_of(obj)
                if (kind, namespace, name) in plan.desired:
                    continue
                if object_labels(obj).get(STATE_LABEL) in failed_states:
                    continue  # a state that failed to render keeps what it had
                log.info("removing %s %s (no longer desired)", kind, name)
                await self.api.delete(kind, namespace, name)
                store.forget(namespace, name)
        return errors

    async def _write_status(self, kind: str, obj: Obj, status: Obj) -> None:
        if (obj.get("status") or {}) == status:
            return
        name = obj["metadata"]["name"]
        try:
            if kind == "GPUCluster":
                self.caches.gpu_clusters.store(await self.api.gpu_cluster_status(name, status))
            else:
                self.caches.policies.store(await self.api.policy_status(name, status))
        except ApiError as exc:
            if exc.status.code != 404:
                raise


def refused(message: str) -> st.Outcome:
    """The outcome of a spec the pass will not act on: nothing is written but the status."""
    return st.Outcome(st.NOT_READY, st.RECONCILE_FAILED, message)


def _role_in(obj: Obj, pending: set[tuple[str, str]]) -> bool:
    """Whether `obj` is a (Cluster)RoleBinding whose role is among the pass's writes."""
    if obj["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
        return False
    ref = obj.get("roleRef") or {}
    return (str(ref.get("kind")), str(ref.get("name"))) in pending


def _first_error(exc: ValidationError) -> str:
    """`spec.a.b: why (value ...)` for the first problem pydantic found."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in ("spec", *err["loc"]))
    return f"field {where}, value {err.get('input')!r}: {err['msg']}"


def _with_labels(node: Obj, patch: Mapping[str, str | None] | None) -> Obj:
    """The node as it will be once its label `patch` (None: remove) is applied."""
    if not patch:
        return node
    labels = object_labels(node)
    for key, value in patch.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return {**node, "metadata": {**(node.get("metadata") or {}), "labels": labels}}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def object_labels(obj: Obj) -> dict[str, str]:
    """An object's labels (the controller's watch filters read them too)."""
    return dict((obj.get("metadata") or {}).get("labels") or {})


def applied_hash(obj: Obj) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(HASH_ANNOTATION)
    return str(value) if value is not None else None


def generation_of(obj: Obj) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)
