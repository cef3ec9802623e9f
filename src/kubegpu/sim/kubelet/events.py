"""The kubelet's Warning events about a pod, written as its event recorder writes them."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

log = logging.getLogger(__name__)

Json = dict[str, Any]


async def pod_event(client: AsyncClient, node: str, pod: Json, reason: str, message: str) -> None:
    """A Warning event from the kubelet about `pod` (best effort, as kubelet's recorder)."""
    meta = pod["metadata"]
    namespace = meta.get("namespace", "default")
    t = datetime.now(UTC)
    event = Event(
        metadata=ObjectMeta(name=f"{meta['name']}.{uuid.uuid4().hex[:16]}", namespace=namespace),
        involvedObject=ObjectReference(
            apiVersion="v1", kind="Pod", name=meta["name"], namespace=namespace, uid=meta["uid"]
        ),
        reason=reason,
        message=message[:1024],
        type="Warning",
        count=1,
        firstTimestamp=t,
        lastTimestamp=t,
        source=EventSource(component="kubelet", host=node),
        reportingComponent="kubelet",
        reportingInstance=node,
    )
    try:
        await client.create(event)
    except (ApiError, httpx.HTTPError) as exc:
        log.warning("node %s: event %s: %s", node, reason, exc)
