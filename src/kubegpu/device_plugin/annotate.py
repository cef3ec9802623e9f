"""The isolation annotation on each GPU pod: what it got, said after allocation.

The kubelet's Allocate names devices, never the pod. So, as upstream components that need
the pod do, the plugin asks the kubelet's pod-resources API afterwards which pod holds the
allocated device IDs (the kubelet records them as Allocate returns), and patches that pod's
`kubegpu.io/isolation` annotation with what each of its containers got from this plugin
(`kubegpu.sharing.isolation`: device, method, guaranteed memory, fault isolation). A pod
that is gone by then, or a kubelet that does not answer, costs only the annotation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from kubegpu.catalog import nvidia
from kubegpu.kube.podresources import HeldDevice, PodResourcesClient, PodResourcesError
from kubegpu.sharing.isolation import Isolation, annotation

log = logging.getLogger(__name__)

ANNOTATION = nvidia.ISOLATION_ANNOTATION
LOOKUP_ATTEMPTS = 20
LOOKUP_INTERVAL_S = 0.5
Describe = Callable[[Sequence[str]], list[Isolation]]  # device IDs -> what they give


def pods_holding(
    held: Iterable[HeldDevice], device_ids: Iterable[str]
) -> dict[tuple[str, str], dict[str, list[str]]]:
    """(namespace, pod) -> container -> every device ID it holds, for the pods holding any
    of `device_ids`."""
    wanted = set(device_ids)
    rows = list(held)
    pods = {(h.namespace, h.pod) for h in rows if h.device_id in wanted}
    out: dict[tuple[str, str], dict[str, list[str]]] = {}
    for h in rows:
        if (h.namespace, h.pod) in pods:
            out.setdefault((h.namespace, h.pod), {}).setdefault(h.container, []).append(h.device_id)
    return out


class PodAnnotator:
    """Queue allocations (`allocated()`, from the gRPC handler); `run()` annotates pods."""

    def __init__(
        self,
        client: AsyncClient,
        pod_resources: Path,
        describe: Describe,
        *,
        attempts: int = LOOKUP_ATTEMPTS,
        interval_s: float = LOOKUP_INTERVAL_S,
    ) -> None:
        self.client = client
        self.lister = PodResourcesClient(pod_resources, missing_ok=True)
        self.describe = describe
        self.attempts = attempts
        self.interval_s = interval_s
        self.annotated = 0  # pods patched so far
        self._queue: asyncio.Queue[list[str]] = asyncio.Queue()
        self._missing_said = False

    def allocated(self, device_ids: Sequence[str]) -> None:
        self._queue.put_nowait(list(device_ids))

    async def run(self) -> None:
        try:
            while True:
                ids = await self._queue.get()
                try:
                    await self._annotate(ids)
                except Exception:  # one pod's annotation must never stop the plugin
                    log.exception("annotating the pod holding %s", ids)
        finally:
            self.lister.close()

    async def _annotate(self, ids: list[str]) -> None:
        if not self.lister.available():
            if not self._missing_said:
                log.warning(
                    "no pod-resources socket at %s: GPU pods get no %s annotation",
                    self.lister.socket,
                    ANNOTATION,
                )
                self._missing_said = True
            return
        for _ in range(self.attempts):
            try:
                held = await asyncio.to_thread(self.lister.list)
            except PodResourcesError as exc:
                log.debug("pod-resources: %s", exc)
                held = []
            pods = pods_holding(held, ids)
            if pods:
                for (namespace, name), containers in sorted(pods.items()):
                    await self._patch(namespace, name, containers)
                return
            await asyncio.sleep(self.interval_s)
        log.info("no pod found holding %s; not annotated", ", ".join(ids))

    async def _patch(self, namespace: str, name: str, containers: dict[str, list[str]]) -> None:
        described = {c: self.describe(ids) for c, ids in containers.items()}
        described = {c: isos for c, isos in described.items() if isos}
        if not described:
            return
        body = {"metadata": {"annotations": {ANNOTATION: annotation(described)}}}
        try:
            await self.client.patch(
                Pod, name, body, namespace=namespace, patch_type=PatchType.MERGE
            )
        except ApiError as exc:
            log.warning("cannot annotate pod %s/%s: %s", namespace, name, exc.status.message)
            return
        self.annotated += 1
        log.info("pod %s/%s: %s", namespace, name, annotation(described))
