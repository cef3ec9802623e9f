"""The MIG manager as a program (`kubegpu mig-manager`): NVML, the API client and clean
shutdown; `kubegpu.node.runtime.run()` drives it."""

from __future__ import annotations

from kubegpu.mig_manager.manager import MigManager
from kubegpu.mig_manager.settings import FIELD_MANAGER, MigManagerSettings
from kubegpu.node.api import api_client
from kubegpu.node.gpus import GpuBackend


class MigManagerProgram:
    def __init__(
        self, settings: MigManagerSettings, gpus: GpuBackend, kubeconfig: str | None = None
    ) -> None:
        self.settings = settings
        self.gpus = gpus
        self.kubeconfig = kubeconfig
        self.manager: MigManager | None = None
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True
        if self.manager is not None:
            self.manager.stop()

    async def run(self) -> None:
        nvml = self.gpus.open_or_fail()
        try:
            client = api_client(FIELD_MANAGER, self.kubeconfig)
            try:
                self.manager = MigManager(self.settings, client, nvml)
                if not self._stopped:
                    await self.manager.run()
            finally:
                await client.close()
        finally:
            nvml.close()
