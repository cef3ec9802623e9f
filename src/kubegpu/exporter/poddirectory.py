"""The pods on this node, by UID, with their isolation annotations (from the API server).

The pod-resources API names pods but not their UIDs, and a process's cgroup gives only the
UID; so per-process attribution needs the node's pods from the API server (a list with the
field selector `spec.nodeName=<node>`, the one read the exporter's role allows). The list
is refreshed before a scrape when older than the refresh interval, never more often.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from kubegpu.catalog import nvidia
from kubegpu.sharing.isolation import AnnotationError, Isolation, parse_annotation

log = logging.getLogger(__name__)

REFRESH_S = 5.0


@dataclass(frozen=True)
class PodMeta:
    uid: str
    namespace: str
    name: str
    isolation: dict[str, list[Isolation]] = field(default_factory=dict)  # container -> devices


class PodDirectory:
    """The node's pods as last listed (`refresh()` from the event loop; reads from anywhere:
    the maps are replaced whole)."""

    def __init__(self, client: AsyncClient, node_name: str, refresh_s: float = REFRESH_S) -> None:
        self.client = client
        self.node_name = node_name
        self.refresh_s = refresh_s
        self.by_uid: dict[str, PodMeta] = {}
        self._listed_at: float | None = None
        self._failing: str | None = None
        self._bad_annotations: set[str] = set()

    async def refresh(self) -> None:
        now = time.monotonic()
        if self._listed_at is not None and now - self._listed_at < self.refresh_s:
            return
        try:
            pods = [
                p
                async for p in self.client.list(
                    Pod, namespace="*", fields={"spec.nodeName": self.node_name}
                )
            ]
        except Exception as exc:  # keep the last list; say so once
            message = str(exc) or type(exc).__name__
            if message != self._failing:
                log.warning("cannot list the pods of node %s: %s", self.node_name, message)
            self._failing = message
            return
        if self._failing is not None:
            log.info("pods of node %s listed again", self.node_name)
            self._failing = None
        self._listed_at = now
        self.by_uid = {m.uid: m for m in (self._meta(p) for p in pods) if m is not None}

    def _meta(self, pod: Pod) -> PodMeta | None:
        meta = pod.metadata
        if meta is None or not meta.uid or not meta.name:
            return None
        text = (meta.annotations or {}).get(nvidia.ISOLATION_ANNOTATION)
        isolation: dict[str, list[Isolation]] = {}
        if text:
            try:
                isolation = parse_annotation(text)
            except AnnotationError as exc:
                if meta.uid not in self._bad_annotations:
                    log.warning(
                        "pod %s/%s: %s annotation ignored: %s",
                        meta.namespace,
                        meta.name,
                        nvidia.ISOLATION_ANNOTATION,
                        exc,
                    )
                    self._bad_annotations.add(meta.uid)
        return PodMeta(meta.uid, meta.namespace or "default", meta.name, isolation)
