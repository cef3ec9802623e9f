"""A list-then-watch cache of one kind of object, with a health signal.

`Informer.run()` lists (server-side label/field selectors), then watches from the list's
resourceVersion. The watch is renewed every `renew_s` from the last version seen, so a
stream that silently stops delivering is replaced within that time and `last_contact`
tells a liveness probe that the API server still answers. A 410 Gone or any error leads
to a fresh list whose difference with the cache is reported as changes, so no deletion is
missed. Objects are cached as plain dicts keyed by (namespace, name).

`optional=True` is for kinds whose CRD may be absent (ServiceMonitor, GPUCluster): a 404
on list marks the informer `available=False` and it looks again every `renew_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
OnChange = Callable[[str, Obj | None, Obj | None], None]

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta["name"])


class Informer:
    def __init__(
        self,
        client: AsyncClient,
        resource: Any,
        *,
        namespace: str | None = None,
        labels: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
        on_change: OnChange | None = None,
        renew_s: float = 60.0,
        optional: bool = False,
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.kind: str = resource._api_info.resource.kind
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.on_change = on_change
        self.renew_s = renew_s
        self.optional = optional
        self.count = count or (lambda verb: None)
        self.cache: dict[Key, Obj] = {}
        self.synced = asyncio.Event()
        self.available = True
        self.last_contact = 0.0

    # -- cache access ----------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> Obj | None:
        return self.cache.get((namespace, name))

    def items(self) -> list[Obj]:
        return list(self.cache.values())

    def store(self, obj: Obj) -> None:
        """Write-through after our own write, so the next pass sees it before the event."""
        key = key_of(obj)
        old = self.cache.get(key)
        if old is not None and _newer(old, obj):
            return
        self.cache[key] = obj

    def forget(self, namespace: str, name: str) -> None:
        self.cache.pop((namespace, name), None)

    def healthy(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self.synced.is_set() and now - self.last_contact < 3 * self.renew_s

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        backoff = BACKOFF_START_S
        while True:
            try:
                version = await self._relist()
                if version is None:  # optional kind not served
                    await asyncio.sleep(self.renew_s)
                    continue
                backoff = BACKOFF_START_S
                while True:
                    version = await self._watch(version)
            except ApiError as exc:
                if exc.status.code == 410:
                    log.info("%s: watch expired (410), listing again", self.kind)
                    continue
                log.warning("%s: %s; retrying in %.1fs", self.kind, exc.status.message, backoff)
            except (httpx.HTTPError, OSError) as exc:
                log.warning("%s: %s; retrying in %.1fs", self.kind, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _relist(self) -> str | None:
        self.count("list")
        listing = self.client.list(
            self.resource, namespace=self.namespace, labels=self.labels, fields=self.fields
        )
        fresh: dict[Key, Obj] = {}
        try:
            async for item in listing:
                obj = item.to_dict()
                fresh[key_of(obj)] = obj
        except (ApiError, httpx.HTTPStatusError) as exc:
            if self.optional and _status_code(exc) == 404:  # the kind is not served
                self.available = False
                self._replace({})
                self.last_contact = time.monotonic()
                self.synced.set()
                return None
            raise
        self.available = True
        self._replace(fresh)
        self.last_contact = time.monotonic()
        self.synced.set()
        version: str | None = None
        with contextlib.suppress(Exception):  # not set when the server sent no list metadata
            version = listing.resourceVersion
        return version or ""

    def _replace(self, fresh: dict[Key, Obj]) -> None:
        old = self.cache
        self.cache = fresh
        for key in old.keys() - fresh.keys():
            self._notify("DELETED", old[key], None)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None or _version(before) != _version(obj):
                self._notify("ADDED" if before is None else "MODIFIED", before, obj)

    async def _watch(self, version: str) -> str:
        """One watch window: events until `renew_s` passes; returns the last version seen."""
        self.count("watch")
        stream = self.client.watch(
            self.resource,
            namespace=self.namespace,
            labels=self.labels,
            fields=self.fields,
            resource_version=version or None,
            server_timeout=int(self.renew_s) + 30,
        )
        try:
            async with asyncio.timeout(self.renew_s):
                async for op, item in stream:
                    obj = item.to_dict()
                    self.last_contact = time.monotonic()
                    version = _version(obj) or version
                    key = key_of(obj)
                    before = self.cache.get(key)
                    if op == "DELETED":
                        self.cache.pop(key, None)
                        self._notify(op, before, None)
                    else:
                        self.cache[key] = obj
                        self._notify(op, before, obj)
        except TimeoutError:
            pass
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        self.last_contact = time.monotonic()
        return version

    def _notify(self, op: str, old: Obj | None, new: Obj | None) -> None:
        if self.on_change is not None:
            try:
                self.on_change(op, old, new)
            except Exception:  # a bad handler must not stop the watch
                log.exception("%s: change handler failed", self.kind)


def _status_code(exc: Exception) -> int | None:
    if isinstance(exc, ApiError):
        return int(exc.status.code or 0)
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code
    return None


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _newer(a: Obj, b: Obj) -> bool:
    """Whether `a` is strictly newer than `b` (resourceVersions compare as integers in etcd)."""
    try:
        return int(_version(a)) > int(_version(b))
    except ValueError:
        return False
