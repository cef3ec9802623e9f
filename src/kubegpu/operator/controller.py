"""The operator's runtime: watch caches, one reconcile loop, server-side apply.

A thin asyncio controller on lightkube (not kopf; docs/operator.md says why). Informers
keep caches of the ClusterPolicies, GPUClusters, Nodes and every object the operator owns
(selected server-side by the `app.kubernetes.io/managed-by` label). Any relevant change
marks the world dirty; the loop debounces and runs `reconcile_once()`, which:

1. picks the active resource: the oldest of the ClusterPolicies and the GPUCluster
   `gpu-cluster` (`gpucluster.choose`); the others get `ignored` with a condition saying
   which one is active, and the active one reports the conflict while they exist;
2. labels the GPU nodes (`labels.label_changes`, or `gpucluster.dra_label_changes` under
   a GPUCluster), patching only nodes that need it, up to `label_concurrency` patches in
   flight at once (1,000 new nodes cost 1,000 patches, but not 1,000 round trips in a row);
3. renders the desired objects and applies, under one field manager, only those whose
   hash differs from the live object's `nvidia.com/last-applied-hash`;
4. deletes owned objects that are no longer desired (disabled components);
5. writes status and conditions, only when they changed.

Everything it decides comes from the caches, so a spec change costs a constant number of
API requests however many nodes there are, and a restarted operator converges on what is
already there (server-side apply of fixed names never duplicates an object).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Service, ServiceAccount
from lightkube.resources.node_v1 import RuntimeClass
from lightkube.resources.rbac_authorization_v1 import (
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
)
from lightkube.resources.resource_v1 import DeviceClass
from lightkube.types import PatchType

from kubegpu.base.tasks import cancel_all
from kubegpu.kube.informer import Informer, key_of
from kubegpu.kube.policy import (
    GPU_CLUSTER_VERSION,
    GROUP,
    ClusterPolicyResource,
    GPUClusterResource,
    parse_gpu_cluster_spec,
    parse_policy_spec,
)
from kubegpu.operator import gpucluster, node_facts
from kubegpu.operator import labels as node_labels
from kubegpu.operator import status as st
from kubegpu.operator.ignored_fields import ignored_cluster_fields, ignored_policy_fields
from kubegpu.operator.nvidiadriver import DriverStatusReporter
from kubegpu.operator.render import (
    DEFAULT_IMAGE,
    DEFAULT_NAMESPACE,
    HASH_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    STATE_LABEL,
    ClusterFacts,
    Owner,
    Rendered,
    render,
)

log = logging.getLogger(__name__)

FIELD_MANAGER = "kubegpu-operator"
Obj = dict[str, Any]

ServiceMonitorResource = create_namespaced_resource(
    "monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"
)

# kinds the operator renders: resource class, namespaced
OWNED: dict[str, tuple[Any, bool]] = {
    "RuntimeClass": (RuntimeClass, False),
    "ServiceAccount": (ServiceAccount, True),
    "ClusterRole": (ClusterRole, False),
    "ClusterRoleBinding": (ClusterRoleBinding, False),
    "Role": (Role, True),
    "RoleBinding": (RoleBinding, True),
    "ConfigMap": (ConfigMap, True),
    "DaemonSet": (DaemonSet, True),
    "Service": (Service, True),
    "ServiceMonitor": (ServiceMonitorResource, True),
    "DeviceClass": (DeviceClass, False),
}
# kinds whose API may be missing (a CRD not installed, resource.k8s.io not served)
OPTIONAL_KINDS = ("ServiceMonitor", "DeviceClass")
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


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class OperatorConfig:
    namespace: str = DEFAULT_NAMESPACE
    kubegpu_image: str = DEFAULT_IMAGE
    image_env: Mapping[str, str] = field(default_factory=dict)
    renew_s: float = 60.0  # watch renewal; liveness fails after 3x without contact
    debounce_s: float = 0.05
    retry_max_s: float = 3.0
    label_concurrency: int = 32  # node label patches in flight at once


class Api:
    """The operator's writes, counted by verb (the benchmark reads the counters)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.counts: Counter[str] = Counter()
        self.label_patches_in_flight = 0
        self.peak_label_patches_in_flight = 0  # >1: labelling ran in parallel

    def count(self, verb: str) -> None:
        self.counts[verb] += 1

    async def apply(self, obj: Obj) -> Obj:
        resource, namespaced = OWNED[obj["kind"]]
        meta = obj["metadata"]
        self.count("apply")
        result = await self.client.patch(
            resource,
            meta["name"],
            obj,
            namespace=meta.get("namespace") if namespaced else None,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
        out: Obj = result.to_dict()
        return out

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        resource, namespaced = OWNED[kind]
        self.count("delete")
        try:
            await self.client.delete(resource, name, namespace=namespace if namespaced else None)
        except ApiError as exc:
            if exc.status.code != 404:
                raise

    async def label_node(self, name: str, patch: Mapping[str, str | None]) -> Obj:
        self.count("patch")
        self.label_patches_in_flight += 1
        self.peak_label_patches_in_flight = max(
            self.peak_label_patches_in_flight, self.label_patches_in_flight
        )
        try:
            result = await self.client.patch(
                Node, name, {"metadata": {"labels": dict(patch)}}, patch_type=PatchType.MERGE
            )
        finally:
            self.label_patches_in_flight -= 1
        out: Obj = result.to_dict()
        return out

    async def policy_status(self, name: str, status: Obj) -> Obj:
        self.count("status")
        result = await self.client.patch(
            ClusterPolicyResource.Status, name, {"status": status}, patch_type=PatchType.MERGE
        )
        out: Obj = dict(result)
        return out

    async def gpu_cluster_status(self, name: str, status: Obj) -> Obj:
        self.count("status")
        result = await self.client.patch(
            GPUClusterResource.Status, name, {"status": status}, patch_type=PatchType.MERGE
        )
        out: Obj = dict(result)
        return out

    async def label_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self.count("patch")
        await self.client.patch(
            Namespace, name, {"metadata": {"labels": dict(labels)}}, patch_type=PatchType.MERGE
        )


class Operator:
    def __init__(self, client: AsyncClient, config: OperatorConfig | None = None) -> None:
        self.config = config or OperatorConfig()
        self.api = Api(client)
        ns = self.config.namespace
        owned = {MANAGED_BY_LABEL: MANAGED_BY}
        renew = self.config.renew_s

        def informer(resource: Any, **kw: Any) -> Informer:
            return Informer(client, resource, renew_s=renew, count=self.api.count, **kw)

        self.policies = informer(ClusterPolicyResource, on_change=self._policy_changed)
        self.gpu_clusters = informer(
            GPUClusterResource, on_change=self._policy_changed, optional=True
        )
        # NVIDIADrivers are accepted, not reconciled: their status says so
        self.drivers = DriverStatusReporter(client, renew_s=renew, count=self.api.count)
        self.nodes = informer(Node, on_change=self._node_changed)
        self.owned: dict[str, Informer] = {
            kind: informer(
                resource,
                namespace=ns if namespaced else None,
                labels=owned,
                on_change=self._owned_changed,
                optional=kind in OPTIONAL_KINDS,
            )
            for kind, (resource, namespaced) in OWNED.items()
        }
        self._dirty = asyncio.Event()
        self._dirty_since: float | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._psa_done: tuple[str, int] | None = None
        self._ignored_said: tuple[str, ...] = ()
        self.reconciles = 0
        self.last_outcome: st.Outcome | None = None

    # -- change filters (informer callbacks) -------------------------------------------------------
    def trigger(self) -> None:
        if not self._dirty.is_set():
            self._dirty_since = time.monotonic()
        self._dirty.set()

    def _any_change(self, op: str, old: Obj | None, new: Obj | None) -> None:
        self.trigger()

    def _policy_changed(self, op: str, old: Obj | None, new: Obj | None) -> None:
        # our own status writes come back as events: only spec (generation) changes count
        if old is None or new is None or _generation(old) != _generation(new):
            self.trigger()

    def _node_changed(self, op: str, old: Obj | None, new: Obj | None) -> None:
        if old is None or new is None:
            self.trigger()
            return
        if node_labels.relevant_labels(_labels(old)) != node_labels.relevant_labels(_labels(new)):
            self.trigger()

    def _owned_changed(self, op: str, old: Obj | None, new: Obj | None) -> None:
        # any DaemonSet change (status drives readiness); for the rest, creation, deletion
        # or someone else's edit of what we applied
        changed = (
            old is None or new is None or new.get("kind") == "DaemonSet" or _hash(new) != _hash(old)
        )
        if changed:
            self.trigger()

    # -- lifecycle --------------------------------------------------------------------------------------
    @property
    def informers(self) -> list[Informer]:
        return [self.policies, self.gpu_clusters, self.nodes, *self.owned.values()]

    async def start(self) -> None:
        for inf in self.informers:
            self._tasks.append(asyncio.create_task(inf.run(), name=f"informer:{inf.kind}"))
        self._tasks.append(asyncio.create_task(self._loop(), name="reconcile"))
        self._tasks.append(asyncio.create_task(self.drivers.run(), name="nvidiadriver-status"))

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    async def run(self) -> None:
        await self.start()
        try:
            await asyncio.gather(*self._tasks)
        finally:
            await self.stop()

    async def wait_synced(self) -> None:
        await asyncio.gather(*(inf.synced.wait() for inf in self.informers))

    def live(self) -> tuple[bool, str]:
        """Liveness: every watch had contact recently, and a pending reconcile is not stuck."""
        now = time.monotonic()
        stale = [i.kind for i in self.informers if i.synced.is_set() and not i.healthy(now)]
        if stale:
            return False, f"watches without contact: {', '.join(stale)}\n"
        dead = [t.get_name() for t in self._tasks if t.done()]
        if dead:
            return False, f"stopped: {', '.join(dead)}\n"
        if self._dirty_since is not None and now - self._dirty_since > max(
            60.0, 3 * self.config.renew_s
        ):
            return False, "reconcile loop stuck\n"
        return True, "ok\n"

    def ready(self) -> tuple[bool, str]:
        pending = [i.kind for i in self.informers if not i.synced.is_set()]
        return (not pending, "ok\n" if not pending else f"syncing: {', '.join(pending)}\n")

    def metrics(self) -> str:
        lines = [
            "# HELP kubegpu_operator_api_requests_total API requests by verb.",
            "# TYPE kubegpu_operator_api_requests_total counter",
        ]
        for verb, n in sorted(self.api.counts.items()):
            lines.append(f'kubegpu_operator_api_requests_total{{verb="{verb}"}} {n}')
        lines.append(f"kubegpu_operator_reconciles_total {self.reconciles}")
        return "\n".join(lines) + "\n"

    # -- the loop -----------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        await self.wait_synced()
        self.trigger()
        delay = 0.1
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.config.debounce_s)
            self._dirty.clear()
            try:
                await self.reconcile_once()
                delay = 0.1
            except (ApiError, httpx.HTTPError, OSError) as exc:
                log.warning("reconcile failed: %s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.config.retry_max_s)
                self.trigger()
            else:
                if not self._dirty.is_set():
                    self._dirty_since = None

    async def reconcile_once(self) -> None:
        self.reconciles += 1
        ns = self.config.namespace
        choice = gpucluster.choose(self.policies.items(), self.gpu_clusters.items())
        now = _now()
        for ignored in choice.ignored_policies:
            status = st.ignored_status(
                ignored.reason, ignored.message, ignored.obj.get("status"), ns, now
            )
            await self._write_status(ignored.obj, status)
        for ignored in choice.ignored_clusters:
            status = st.ignored_status(
                ignored.reason, ignored.message, ignored.obj.get("status"), ns, now
            )
            await self._write_cluster_status(ignored.obj, status)
        active = choice.active
        if active is None:
            return
        generation = _generation(active)
        kind = choice.kind or "ClusterPolicy"
        # label first, then read the facts: a reconcile that counted GPU nodes before it set
        # their gpu.present label would render no DaemonSet and call the policy ready
        # ("no GPU node in the cluster") on a cluster of GPU nodes
        if kind == "GPUCluster":
            gc = parse_gpu_cluster_spec(active.get("spec"))
            await self._label_nodes(lambda labels: gpucluster.dra_label_changes(labels, gc))
            facts = self._facts(active, kind)
            rendered = gpucluster.render_gpu_cluster(gc, facts)
            self._say_ignored(kind, active, ignored_cluster_fields(gc))
        else:
            spec = parse_policy_spec(active.get("spec"))
            await self._label_nodes(lambda labels: gpucluster.policy_label_changes(labels, spec))
            if spec.psa.enabled and self._psa_done != (active["metadata"]["uid"], generation):
                await self.api.label_namespace(ns, PSA_LABELS)
                self._psa_done = (active["metadata"]["uid"], generation)
            facts = self._facts(active, kind)
            rendered = render(spec, facts)
            self._say_ignored(kind, active, ignored_policy_fields(spec))
        apply_errors: list[str] = []
        if not rendered.problems:
            apply_errors = await self._apply(rendered)
        daemonsets = {o["metadata"]["name"]: o for o in self.owned["DaemonSet"].items()}
        outcome = st.evaluate(
            rendered,
            daemonsets,
            gpu_nodes=facts.gpu_nodes,
            nfd_labels=any(node_labels.has_nfd_labels(_labels(n)) for n in self.nodes.items()),
            apply_errors=apply_errors,
            kind=kind,
        )
        if outcome.ok and choice.conflicting:
            names = [c.split(" ", 1)[1] for c in choice.conflicting]
            outcome = (
                st.conflict_outcome(names)
                if kind == "ClusterPolicy"
                else st.policy_conflict_outcome(names)
            )
        self.last_outcome = outcome
        status = st.policy_status(outcome, active.get("status"), ns, now, generation)
        if kind == "GPUCluster":
            await self._write_cluster_status(active, status)
        else:
            await self._write_status(active, status)

    def _say_ignored(self, kind: str, active: Obj, fields: tuple[str, ...]) -> None:
        """Warn once per change about the spec's values no operand carries."""
        if fields == self._ignored_said:
            return
        self._ignored_said = fields
        name = active["metadata"]["name"]
        for what in fields:
            log.warning("%s %s: %s (accepted and ignored)", kind, name, what)

    # -- steps ---------------------------------------------------------------------------------------------
    def _facts(self, policy: Obj, kind: str = "ClusterPolicy") -> ClusterFacts:
        gpu_nodes = sorted(
            (n for n in self.nodes.items() if _labels(n).get(node_labels.GPU_PRESENT) == "true"),
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
            service_monitor_crd=self.owned["ServiceMonitor"].available,
            image_env=self.config.image_env,
        )

    async def _label_nodes(
        self, changes: Callable[[dict[str, str]], Mapping[str, str | None]]
    ) -> None:
        patches = node_labels.node_patches(
            {n["metadata"]["name"]: _labels(n) for n in self.nodes.items()}, changes
        )
        if not patches:
            return
        gate = asyncio.Semaphore(max(1, self.config.label_concurrency))

        async def label(name: str, patch: Mapping[str, str | None]) -> None:
            async with gate:
                log.info("node %s: labels %s", name, dict(patch))
                try:
                    self.nodes.store(await self.api.label_node(name, patch))
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

    async def _apply(self, rendered: Rendered) -> list[str]:
        errors: list[str] = []
        desired: set[tuple[str, str, str]] = set()
        for obj in rendered.objects():
            kind, meta = obj["kind"], obj["metadata"]
            namespace = str(meta.get("namespace") or "")
            desired.add((kind, namespace, meta["name"]))
            informer = self.owned[kind]
            if kind in OPTIONAL_KINDS and not informer.available:
                continue
            live = informer.get(namespace, meta["name"])
            if live is not None and _hash(live) == meta["annotations"][HASH_ANNOTATION]:
                continue
            try:
                informer.store(await self.api.apply(obj))
            except ApiError as exc:
                errors.append(f"{kind} {meta['name']}: {exc.status.message}")
        if errors:
            return errors  # do not prune while the desired set could not be applied
        failed_states = {s.name for s in rendered.states if s.error}
        for kind in PRUNE_ORDER:
            for obj in self.owned[kind].items():
                namespace, name = key_of(obj)
                if (kind, namespace, name) in desired:
                    continue
                if _labels(obj).get(STATE_LABEL) in failed_states:
                    continue  # a state that failed to render keeps what it had
                log.info("removing %s %s (no longer desired)", kind, name)
                await self.api.delete(kind, namespace, name)
                self.owned[kind].forget(namespace, name)
        return errors

    async def _write_cluster_status(self, cluster: Obj, status: Obj) -> None:
        if (cluster.get("status") or {}) == status:
            return
        try:
            self.gpu_clusters.store(
                await self.api.gpu_cluster_status(cluster["metadata"]["name"], status)
            )
        except ApiError as exc:
            if exc.status.code != 404:
                raise

    async def _write_status(self, policy: Obj, status: Obj) -> None:
        current = policy.get("status") or {}
        if current == status:
            return
        name = policy["metadata"]["name"]
        try:
            self.policies.store(await self.api.policy_status(name, status))
        except ApiError as exc:
            if exc.status.code != 404:
                raise


def _labels(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _hash(obj: Obj) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(HASH_ANNOTATION)
    return str(value) if value is not None else None


def _generation(obj: Obj) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)
