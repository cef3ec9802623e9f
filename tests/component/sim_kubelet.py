"""A simulated node's context for PodRunner tests that talk to a stand-in API client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kubegpu.sim.kubelet.devicemanager import DeviceManager
from kubegpu.sim.kubelet.mounted import MountedObjects
from kubegpu.sim.kubelet.podworkers import NodeContext


def node_context(root: Path, client: Any) -> NodeContext:
    """Node "n" rooted at `root`, whose API calls (and watched objects) go to `client`."""
    return NodeContext(
        name="n",
        root=root,
        client=client,
        devices=DeviceManager(root / "device-plugins", lambda: asyncio.sleep(0)),
        api_host="127.0.0.1",
        api_port=6443,
        extra_env={},
        mounted=MountedObjects(client),
    )
