"""Simulated nodes for one test, and nothing of them left after it.

`sim_node` is the one way integration tests run a SimNode: in a fresh directory under
/tmp (short: unix socket paths are limited), started; on exit stopped, its Node object
deleted and its directory removed, and it fails the test if a pod process of the node is
left running. `SimNodes` (the `sim_nodes` fixture) holds several, ended last first.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node

from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig
from kubegpu.sim.kubelet.processes import pod_processes


@contextlib.asynccontextmanager
async def sim_node(
    kubeconfig: Path, akube: AsyncClient, name: str, **config: Any
) -> AsyncIterator[SimNode]:
    """A started SimNode `name` (`config`: the other SimNodeConfig fields), ended on exit."""
    root = Path(tempfile.mkdtemp(prefix="kg-", dir="/tmp"))
    node = SimNode(SimNodeConfig(name=name, root=root, **config), kubeconfig)
    try:
        await node.start()
        yield node
    finally:
        await node.stop()
        left = pod_processes(root)
        with contextlib.suppress(ApiError):
            await akube.delete(Node, name)
        shutil.rmtree(root, ignore_errors=True)
        assert left == [], f"{name} left pod processes behind: {left}"


class SimNodes:
    """The simulated nodes of one test: `start` one, `close` ends them all, last first."""

    def __init__(self, kubeconfig: Path, akube: AsyncClient) -> None:
        self.kubeconfig = kubeconfig
        self.akube = akube
        self._stack = contextlib.AsyncExitStack()

    async def start(self, name: str, **config: Any) -> SimNode:
        return await self._stack.enter_async_context(
            sim_node(self.kubeconfig, self.akube, name, **config)
        )

    async def close(self) -> None:
        await self._stack.aclose()
