"""The simulated kubelet's device manager when a device plugin dies mid-Allocate.

Found by the chaos suite (device plugin killed while pods were admitted): the plugin's
stream ended, its channel was closed under an allocation in flight, and the call raised
gRPC's UsageError instead of an RPC error; the pod then stayed Pending forever. A kubelet
fails such a pod's admission (UnexpectedAdmissionError) and hands out nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from integration.fake_plugin import FakePlugin
from kubegpu.sim.kubelet.devicemanager import AdmissionError, DeviceManager

RESOURCE = "example.com/gpu"


async def _nothing() -> None:
    return None


async def test_an_allocation_on_a_plugin_that_went_away_fails_admission(tmp_path: Path) -> None:
    manager = DeviceManager(tmp_path / "device-plugins", _nothing)
    await manager.start()
    plugin = FakePlugin(manager.plugin_dir, RESOURCE, ["gpu-0", "gpu-1"])
    try:
        await plugin.start()
        for _ in range(100):
            if manager.resources().get(RESOURCE) == (2, 2):
                break
            await asyncio.sleep(0.05)
        assert manager.resources()[RESOURCE] == (2, 2)
        # the plugin is killed: its endpoint's channel is closed while pods are admitted
        await manager._endpoints[RESOURCE].channel.close()
        with pytest.raises(
            AdmissionError, match=r"^Allocate failed due to .*, which is unexpected"
        ):
            await manager.allocate("pod-uid", "cuda", {RESOURCE: 1})
        assert manager.allocations == {}
        assert plugin.allocate_calls == []
    finally:
        await plugin.stop()
        await manager.stop()
