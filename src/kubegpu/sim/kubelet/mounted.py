"""The ConfigMaps and Secrets simulated pods mount, watched instead of polled.

kubelet keeps a pod's ConfigMap and Secret volumes current by watching the objects (its
default change-detection strategy) and rewrites a volume when one changes. The simulated
kubelet did it by re-reading every such volume every two seconds: at a hundred nodes that
was a third of all API requests. Here one list-then-watch per kind and namespace
(`kube.informer`) serves every simulated node of the process, so a thousand nodes cost the
API server a few watches, and a change reaches each pod that mounts the object at once.

A miss in the cache is asked of the API server directly: an object created a moment
before the pod that mounts it may not have reached the watch yet, and kubelet would find it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import ConfigMap, Secret

from kubegpu.base.tasks import cancel_all
from kubegpu.kube.informer import Informer, Obj
from kubegpu.kube.reads import get_json

ObjectKey = tuple[str, str, str]  # kind, namespace, name
Listener = Callable[[ObjectKey], None]  # told which object changed
KINDS: dict[str, Any] = {"ConfigMap": ConfigMap, "Secret": Secret}
SYNC_WAIT_S = 10.0


class MountedObjects:
    """One process's cache of mountable objects, shared by its simulated nodes."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._informers: dict[tuple[str, str], Informer] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._listeners: dict[ObjectKey, set[Listener]] = defaultdict(set)

    async def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object as last seen, or None when it does not exist."""
        informer = self._informer(kind, namespace)
        if not informer.synced.is_set():  # its first list; an API server that does not
            with contextlib.suppress(TimeoutError):  # answer is for the GET below to report
                await asyncio.wait_for(informer.synced.wait(), SYNC_WAIT_S)
        cached = informer.get(namespace, name)
        if cached is not None:
            return cached
        return await get_json(self.client, KINDS[kind], name, namespace)  # not seen yet: ask

    def listen(self, keys: set[ObjectKey], listener: Listener) -> Callable[[], None]:
        """Call `listener` whenever one of `keys` changes; returns the way to stop."""
        for kind, namespace, _ in keys:
            self._informer(kind, namespace)
        for key in keys:
            self._listeners[key].add(listener)

        def stop() -> None:
            for key in keys:
                self._listeners[key].discard(listener)
                if not self._listeners[key]:
                    del self._listeners[key]

        return stop

    def _informer(self, kind: str, namespace: str) -> Informer:
        informer = self._informers.get((kind, namespace))
        if informer is None:
            informer = Informer(
                self.client,
                KINDS[kind],
                namespace=namespace,
                on_change=lambda op, old, new: self._changed(kind, old, new),
            )
            self._informers[(kind, namespace)] = informer
            self._tasks.append(
                asyncio.create_task(informer.run(), name=f"mounted:{kind}/{namespace}")
            )
        return informer

    def _changed(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        meta = (new or old or {}).get("metadata") or {}
        key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        for listener in list(self._listeners.get(key, ())):
            listener(key)

    async def close(self) -> None:
        await cancel_all(self._tasks)
        await self.client.close()


_shared: dict[tuple[str, int], tuple[MountedObjects, int]] = {}


def acquire(kubeconfig: Path) -> MountedObjects:
    """The cache of this event loop's nodes for one cluster (created by the first)."""
    key = (str(kubeconfig.resolve()), id(asyncio.get_running_loop()))
    entry = _shared.get(key)
    if entry is None:
        client = AsyncClient(KubeConfig.from_file(kubeconfig), field_manager="kubegpu-sim-kubelet")
        entry = (MountedObjects(client), 0)
    _shared[key] = (entry[0], entry[1] + 1)
    return entry[0]


async def release(kubeconfig: Path, cache: MountedObjects) -> None:
    """A node is done with the cache; the last one closes it."""
    key = (str(kubeconfig.resolve()), id(asyncio.get_running_loop()))
    entry = _shared.get(key)
    if entry is None or entry[0] is not cache:
        return
    if entry[1] > 1:
        _shared[key] = (cache, entry[1] - 1)
        return
    del _shared[key]
    await cache.close()
