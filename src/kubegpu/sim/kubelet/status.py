"""The simulated kubelet's status manager: what of a pod's status it owns, when a status
it wrote was overwritten, and sending a write until the API server takes it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2 as httpx
from lightkube.core.exceptions import ApiError

from kubegpu.base.tasks import start_kept

log = logging.getLogger(__name__)

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
RETRIED_CODES = frozenset({409, 429, 500, 502, 503, 504})  # worth sending a status again
Json = dict[str, Any]


async def send_until_taken(
    send: Callable[[], Awaitable[object]], what: str, stopped: Callable[[], bool] = lambda: False
) -> None:
    """Call `send` until the API server takes it, as kubelet keeps at its writes: a write
    lost to a timeout under load would leave the API showing an old state for good. Sent
    again after a transport error or an answer worth another try (RETRIED_CODES), with
    backoff, unless `stopped()`; any other refusal is raised (ApiError)."""
    delay = BACKOFF_START_S
    while True:
        try:
            await send()
            return
        except ApiError as exc:
            if exc.status.code not in RETRIED_CODES:
                raise
            why = str(exc.status.message)
        except httpx.HTTPError as exc:
            why = str(exc) or type(exc).__name__
        if stopped():
            return
        log.warning("%s: %s; sending again in %.0fs", what, why, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, BACKOFF_MAX_S)


StatusView = tuple[str | None, frozenset[tuple[str, str]]]
OWN_CONDITIONS = frozenset({"PodScheduled", "Initialized", "ContainersReady", "Ready"})


def status_view(status: Json) -> StatusView:
    """The part of a pod status the kubelet owns and keeps true: the phase and its own
    conditions (others, such as DisruptionTarget, belong to whoever set them)."""
    conditions = status.get("conditions") or []
    return status.get("phase"), frozenset(
        (str(c.get("type")), str(c.get("status")))
        for c in conditions
        if c.get("type") in OWN_CONDITIONS
    )


def newer_version(version: str, than: str) -> bool:
    """Whether resourceVersion `version` is later than `than`. Versions are opaque to
    clients, but the API server's come from etcd's revision, an integer that grows; a
    version that is not one counts as newer unless equal."""
    if version.isdigit() and than.isdigit():
        return int(version) > int(than)
    return version != than


class PodStatusManager:
    """One pod's status, as kubelet's status manager keeps it.

    `push` writes the status `compute` gives, afresh for each try, until the API server
    takes it (a write lost to a timeout under load would leave the pod showing an old
    state for good). `observe` hears each newer version of the pod from the watch and
    writes again when someone else changed what this kubelet wrote: the node controller
    marks the pods of a node whose lease lagged not Ready, and only the kubelet sets them
    Ready again once the node is back.
    """

    def __init__(
        self,
        what: str,
        compute: Callable[[], Json],
        patch: Callable[[Json], Awaitable[str | None]],
        stopping: Callable[[], bool],
        tasks: list[asyncio.Task[None]],
    ) -> None:
        self.what = what  # "status of pod ns/name", for the log
        self._compute = compute
        self._patch = patch  # sends a status, returns the resourceVersion written
        self._stopping = stopping
        self._tasks = tasks  # where a rewrite runs (the pod's tasks, stopped with it)
        self._lock = asyncio.Lock()
        # what the API server last took from us: (resourceVersion, the fields we own)
        self._written: tuple[str, StatusView] | None = None
        self._observed: tuple[str, StatusView] | None = None  # the watch's latest version

    def observe(self, pod: Json) -> None:
        version = pod["metadata"].get("resourceVersion") or ""
        self._observed = (version, status_view(pod.get("status") or {}))
        self._resync()

    async def push(self) -> None:
        await self._write()
        self._resync()  # someone else may have written meanwhile

    def _resync(self) -> None:
        if self._written is None or self._observed is None or self._stopping():
            return  # nothing to compare yet
        if self._lock.locked():
            return  # a write is under way; it compares again when done
        (written, view), (seen, seen_view) = self._written, self._observed
        # skipped: our own write, and older versions the watch delivers late
        if newer_version(seen, written) and seen_view != view:
            self._observed = None
            start_kept(self._tasks, self.push())

    async def _write(self) -> None:
        async def send() -> Json:
            status = self._compute()  # afresh for each try
            version = await self._patch(status)
            self._written = (version or "", status_view(status))
            return status

        async with self._lock:
            try:
                await send_until_taken(send, self.what, self._stopping)
            except ApiError as exc:
                if exc.status.code != 404:  # 404: the pod is gone
                    log.warning("%s: %s", self.what, exc.status.message)
