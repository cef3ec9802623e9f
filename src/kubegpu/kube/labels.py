"""A node agent's writes to its own Node: label patches, owned label sets, best-effort Events.

- `patch_node_metadata` is a JSON merge patch of labels and annotations (None deletes).
- `apply_node_labels` owns a set of labels through server-side apply under one field
  manager: labels it applied before and leaves out now are removed; labels of other
  managers are never touched. The Node's UID is a precondition, so an agent never
  re-creates a Node that was deleted.
- `node_event` records an Event on the Node (`kubegpu.kube.nodes.record_node_event`) and
  only logs when that fails: an Event is never a reason to stop.

Watching the Node is `kubegpu.kube.nodes.watch_node`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import httpx2
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from kubegpu.kube.nodes import NORMAL, WARNING, record_node_event

log = logging.getLogger(__name__)

#: What a call to the API server can raise: an error answer, or no answer at all.
API_ERRORS: tuple[type[Exception], ...] = (ApiError, httpx2.HTTPError)


def labels_of(node: Node) -> dict[str, str]:
    return dict((node.metadata.labels if node.metadata else None) or {})


def annotations_of(node: Node) -> dict[str, str]:
    return dict((node.metadata.annotations if node.metadata else None) or {})


async def patch_node_metadata(
    client: AsyncClient,
    name: str,
    *,
    labels: Mapping[str, str | None] | None = None,
    annotations: Mapping[str, str | None] | None = None,
) -> Node:
    """One JSON merge patch of the Node's labels and annotations; a None value deletes."""
    meta: dict[str, object] = {}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return await client.patch(Node, name, {"metadata": meta}, patch_type=PatchType.MERGE)


async def apply_node_labels(
    client: AsyncClient,
    name: str,
    labels: Mapping[str, str],
    *,
    field_manager: str,
    uid: str | None = None,
) -> Node:
    """Make `labels` exactly the set of labels `field_manager` owns on the Node."""
    node = Node(metadata=ObjectMeta(name=name, uid=uid, labels=dict(labels)))
    return await client.apply(node, field_manager=field_manager, force=True)


async def node_event(
    client: AsyncClient,
    node: Node | str,
    *,
    reason: str,
    message: str,
    component: str,
    warning: bool = False,
) -> None:
    """Record an Event on the Node (best effort: a failure is logged, never raised)."""
    name = node if isinstance(node, str) else str(node.metadata.name if node.metadata else "")
    uid = None if isinstance(node, str) else (node.metadata.uid if node.metadata else None)
    try:
        await record_node_event(
            client,
            name,
            reason=reason,
            message=message,
            type_=WARNING if warning else NORMAL,
            component=component,
            node_uid=uid,
        )
    except API_ERRORS as exc:
        log.warning("cannot record event %s on node %s: %s", reason, name, exc)
