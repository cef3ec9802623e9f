"""The node's pool of ResourceSlices in the API server.

Each publication is a new pool generation: the new slices are created first and the older
ones deleted after, so a reader (the scheduler uses only the highest generation) never sees
the pool empty. Slices are owned by the Node, so they go with it.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from kubegpu.catalog import nvidia
from kubegpu.dra.partitions import Pool, partitioned_slices
from kubegpu.dra.slices import node_owner, resource_slices
from kubegpu.kube.reads import get_json

Json = dict[str, Any]

log = logging.getLogger(__name__)


class Publisher(Protocol):
    async def publish(self, pool: Pool, force: bool = False) -> None:
        """Make the node's pool hold `pool`; `force`: even if it was last published so."""


def pool_slices(
    node: str, pool: Pool, generation: int, owner: Json | None, driver: str
) -> list[Json]:
    """The slices of `pool`: one slice (or a few) of devices, or with dynamic MIG the
    counter sets and one slice per GPU."""
    if pool.counter_sets:
        return partitioned_slices(node, pool, generation, owner, driver)
    return resource_slices(node, pool.devices, generation, owner, driver)


class SlicePublisher:
    def __init__(self, client: AsyncClient, node: str, driver: str = nvidia.DRA_DRIVER) -> None:
        self.client = client
        self.node = node
        self.driver = driver
        self.generation = 0
        self._last: list[Json] | None = None
        self._owner: Json | None = None

    async def _node_owner(self) -> Json | None:
        if self._owner is None:
            try:
                node = await self.client.get(Node, self.node)
            except ApiError as exc:
                log.warning("node %s: %s; publishing slices without an owner", self.node, exc)
                return None
            if node.metadata is not None and node.metadata.uid:
                self._owner = node_owner(self.node, node.metadata.uid)
        return self._owner

    async def existing(self) -> list[ResourceSlice]:
        """This node's slices of this driver (any generation)."""
        out = []
        async for s in self.client.list(
            ResourceSlice, fields={"spec.nodeName": self.node, "spec.driver": self.driver}
        ):
            if s.spec.pool.name == self.node:
                out.append(s)
        return out

    async def publish(self, pool: Pool, force: bool = False) -> None:
        desired = [s["spec"] for s in pool_slices(self.node, pool, 0, None, self.driver)]
        if not force and desired == self._last:
            return
        old = await self.existing()
        generation = max([self.generation, *(s.spec.pool.generation for s in old)]) + 1
        for obj in pool_slices(self.node, pool, generation, await self._node_owner(), self.driver):
            await self.client.create(codecs.from_dict(obj))
        for s in old:
            name = s.metadata.name if s.metadata else None
            if not name:
                continue
            try:
                await self.client.delete(ResourceSlice, name)
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
        self.generation = generation
        self._last = desired
        log.info(
            "published %d devices in pool %s, generation %d",
            len(pool.devices),
            self.node,
            generation,
        )

    async def withdraw(self) -> None:
        """Delete this node's slices (nothing of this node can be prepared any more)."""
        for s in await self.existing():
            if s.metadata and s.metadata.name:
                try:
                    await self.client.delete(ResourceSlice, s.metadata.name)
                except ApiError as exc:
                    if exc.status.code != 404:
                        raise
        self._last = None


async def read_claim(client: AsyncClient, namespace: str, name: str) -> Json | None:
    """A ResourceClaim as JSON, None when it does not exist."""
    from lightkube.resources.resource_v1 import ResourceClaim

    return await get_json(client, ResourceClaim, name, namespace)
