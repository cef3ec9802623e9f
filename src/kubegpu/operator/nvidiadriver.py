"""NVIDIADriver resources: accepted (the CRD has every upstream field, so NVIDIA's samples
apply), but kubegpu installs no driver from them. Rather than ignore them silently, the
operator writes each one's status: `state: ignored` with `Ready=False` / `Error=True`,
reason `NotSupported`, and a message saying what to use instead.

`unsupported_status` decides (pure); `DriverStatusReporter` watches NVIDIADrivers and writes
the status of any that does not say so yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from kubegpu.base.tasks import cancel_all, start_kept
from kubegpu.kube.informer import Informer
from kubegpu.kube.policy import NVIDIADriverResource

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NOT_SUPPORTED = "NotSupported"
MESSAGE = (
    "NVIDIADriver is not supported by kubegpu: no driver is installed from it. Use the "
    "ClusterPolicy's spec.driver (with driver.useNvidiaDriverCRD=false), or a driver "
    "installed on the host (driver.enabled=false)."
)


def unsupported_status(obj: Obj, now: str) -> Obj | None:
    """The status that says `obj` is not supported, or None when it already says so."""
    status = obj.get("status") or {}
    generation = int((obj.get("metadata") or {}).get("generation") or 0)
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready, error = conditions.get("Ready"), conditions.get("Error")
    if (
        status.get("state") == "ignored"
        and ready is not None
        and ready.get("reason") == NOT_SUPPORTED
        and ready.get("observedGeneration") == generation
        and error is not None
        and error.get("status") == "True"
    ):
        return None

    def condition(kind: str, value: str) -> Obj:
        prev = conditions.get(kind)
        since = prev["lastTransitionTime"] if prev and prev.get("status") == value else now
        return {
            "type": kind,
            "status": value,
            "reason": NOT_SUPPORTED,
            "message": MESSAGE,
            "lastTransitionTime": since,
            "observedGeneration": generation,
        }

    return {
        "state": "ignored",
        "conditions": [condition("Ready", "False"), condition("Error", "True")],
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class DriverStatusReporter:
    """Watches NVIDIADrivers (optional: the CRD may be absent) and marks each not supported."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        renew_s: float = 60.0,
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.count = count or (lambda verb: None)
        self.informer = Informer(
            client,
            NVIDIADriverResource,
            on_change=self._changed,
            renew_s=renew_s,
            optional=True,
            count=self.count,
        )
        self._pending: asyncio.Queue[str] = asyncio.Queue()

    def _changed(self, op: str, old: Obj | None, new: Obj | None) -> None:
        if new is not None and unsupported_status(new, _now()) is not None:
            self._pending.put_nowait(new["metadata"]["name"])

    async def run(self) -> None:
        """The watch and the status writer, until cancelled."""
        watch: list[asyncio.Task[None]] = []
        start_kept(watch, self.informer.run(), name="informer:NVIDIADriver")
        try:
            while True:
                name = await self._pending.get()
                obj = self.informer.get("", name)
                status = unsupported_status(obj, _now()) if obj is not None else None
                if status is None:
                    continue
                self.count("status")
                try:
                    await self.client.patch(
                        NVIDIADriverResource.Status,
                        name,
                        {"status": status},
                        patch_type=PatchType.MERGE,
                    )
                    log.info("NVIDIADriver %s: marked not supported", name)
                except ApiError as exc:
                    if exc.status.code != 404:
                        log.warning("NVIDIADriver %s: status: %s", name, exc.status.message)
        finally:
            await cancel_all(watch)
