"""The simulated kubelet's status manager rules: what of a pod's status it owns, when a
status it wrote was overwritten, and sending a write until the API server takes it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2 as httpx
from lightkube.core.exceptions import ApiError

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
