"""A node agent's view of its own Node: watch it, and record Events about it.

A node agent watches only its own Node, with the server-side field selector
`metadata.name=<node>`, never every Node (design.md §3). Events go where kubelet puts its
node events (namespace `default`, involvedObject the Node), so `kubectl describe node`
shows them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node

log = logging.getLogger(__name__)

EVENT_NAMESPACE = "default"
NORMAL = "Normal"
WARNING = "Warning"


def client_from_env(field_manager: str, kubeconfig: str | None = None) -> AsyncClient:
    """An API client: the pod's service account in a cluster, else `kubeconfig`/$KUBECONFIG."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    return AsyncClient(config, field_manager=field_manager)


async def watch_node(
    client: AsyncClient, name: str, *, retry_s: float = 1.0
) -> AsyncIterator[Node | None]:
    """Yield the Node named `name` now and after every change (None while it does not exist).

    Runs until cancelled; a broken watch is re-established (after `retry_s`), starting with
    the Node's current state so no change is missed.
    """
    while True:
        try:
            try:
                yield await client.get(Node, name)
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
                yield None
            async for op, node in client.watch(Node, fields={"metadata.name": name}):
                yield None if op == "DELETED" else node
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("watch of node %s broke (%s); watching again in %.1fs", name, exc, retry_s)
        await asyncio.sleep(retry_s)


def node_label(node: Node | None, key: str) -> str | None:
    if node is None or node.metadata is None or not node.metadata.labels:
        return None
    return node.metadata.labels.get(key)


async def record_node_event(
    client: AsyncClient,
    node: str,
    *,
    reason: str,
    message: str,
    type_: str = NORMAL,
    component: str,
    node_uid: str | None = None,
) -> Event:
    """Create a core/v1 Event about Node `node` (reported by `component` on this host)."""
    now = datetime.now(UTC)
    event = Event(
        metadata=ObjectMeta(name=f"{node}.{uuid.uuid4().hex[:16]}", namespace=EVENT_NAMESPACE),
        involvedObject=ObjectReference(
            apiVersion="v1", kind="Node", name=node, uid=node_uid or node
        ),
        reason=reason,
        message=message[:1024],
        type=type_,
        count=1,
        firstTimestamp=now,
        lastTimestamp=now,
        source=EventSource(component=component, host=node),
        reportingComponent=component,
        reportingInstance=f"{component}-{socket.gethostname()}"[:128],
    )
    created: Event = await client.create(event)
    return created
