"""Feature discovery as a program (`kubegpu feature-discovery`): the API client when it
labels a Node, and clean shutdown; `kubegpu.node.runtime.run()` drives it."""

from __future__ import annotations

from kubegpu.feature_discovery.discovery import FIELD_MANAGER, FeatureDiscovery, GfdOptions
from kubegpu.node.api import api_client
from kubegpu.node.gpus import GpuBackend


class FeatureDiscoveryProgram:
    """SIGHUP labels again with the config read again."""

    def __init__(
        self, options: GfdOptions, gpus: GpuBackend, kubeconfig: str | None = None
    ) -> None:
        self.client = api_client(FIELD_MANAGER, kubeconfig) if options.node_name else None
        self.discovery = FeatureDiscovery(options, gpus.open, self.client)

    def stop(self) -> None:
        self.discovery.stop()

    def reload(self) -> None:
        self.discovery.reload()

    async def run(self) -> None:
        try:
            await self.discovery.run()
        finally:
            if self.client is not None:
                await self.client.close()
