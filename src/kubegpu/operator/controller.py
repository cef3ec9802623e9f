"""The operator's loop: watch caches, triggers, debounce and retries around the reconciler.

A thin asyncio controller on lightkube (not kopf; docs/operator.md says why). Informers
keep caches of the ClusterPolicies, GPUClusters, Nodes and every object the operator owns
(selected server-side by the `app.kubernetes.io/managed-by` label). Any relevant change
marks the world dirty; the loop debounces and runs one pass of the `Reconciler`
(`kubegpu.operator.reconciler`, which reads the caches, renders, validates, applies and
writes status), and retries with backoff when the API server fails it.

Everything a pass decides comes from the caches, so a spec change costs a constant number
of API requests however many nodes there are, and a restarted operator converges on what
is already there (server-side apply of fixed names never duplicates an object).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node

from kubegpu.base.tasks import cancel_all
from kubegpu.kube.informer import Informer
from kubegpu.kube.policy import ClusterPolicyResource, GPUClusterResource
from kubegpu.operator import labels as node_labels
from kubegpu.operator import status as st
from kubegpu.operator.api import FIELD_MANAGER, OPTIONAL_KINDS, OWNED, Api
from kubegpu.operator.nvidiadriver import DriverStatusReporter
from kubegpu.operator.reconciler import (
    Caches,
    OperatorConfig,
    Reconciler,
    applied_hash,
    generation_of,
    object_labels,
)
from kubegpu.operator.render import MANAGED_BY, MANAGED_BY_LABEL

__all__ = ["FIELD_MANAGER", "Api", "Operator", "OperatorConfig"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class Operator:
    """The informers and the loop; `reconciler` does the passes."""

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
        self.reconciler = Reconciler(
            self.api, Caches(self.policies, self.gpu_clusters, self.nodes, self.owned), self.config
        )
        self._dirty = asyncio.Event()
        self._dirty_since: float | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def reconciles(self) -> int:
        return self.reconciler.reconciles

    @property
    def last_outcome(self) -> st.Outcome | None:
        return self.reconciler.last_outcome

    # -- change filters (informer callbacks) -------------------------------------------------------
    def trigger(self) -> None:
        if not self._dirty.is_set():
            self._dirty_since = time.monotonic()
        self._dirty.set()

    def _policy_changed(self, op: str, old: Obj | None, new: Obj | None) -> None:
        # our own status writes come back as events: only spec (generation) changes count
        if old is None or new is None or generation_of(old) != generation_of(new):
            self.trigger()

    def _node_changed(self, op: str, old: Obj | None, new: Obj | None) -> None:
        if old is None or new is None:
            self.trigger()
            return
        if node_labels.relevant_labels(object_labels(old)) != node_labels.relevant_labels(
            object_labels(new)
        ):
            self.trigger()

    def _owned_changed(self, op: str, old: Obj | None, new: Obj | None) -> None:
        # any DaemonSet change (status drives readiness); for the rest, creation, deletion
        # or someone else's edit of what we applied
        changed = (
            old is None
            or new is None
            or new.get("kind") == "DaemonSet"
            or applied_hash(new) != applied_hash(old)
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
    async def reconcile_once(self) -> st.Outcome | None:
        return await self.reconciler.reconcile_once()

    async def _loop(self) -> None:
        await self.wait_synced()
        self.trigger()
        delay = 0.1
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.config.debounce_s)
            self._dirty.clear()
            try:
                await self.reconciler.reconcile_once()
                delay = 0.1
            except (ApiError, httpx.HTTPError, OSError) as exc:
                log.warning("reconcile failed: %s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.config.retry_max_s)
                self.trigger()
            else:
                if not self._dirty.is_set():
                    self._dirty_since = None
