"""The operator as a program (`kubegpu operator`): the API client, the probe endpoint and
the loop, started and stopped together; `kubegpu.node.runtime.run()` drives it, as it
drives every other component (signals, logging, exit status)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from lightkube import AsyncClient, KubeConfig

from kubegpu.node.runtime import ComponentError
from kubegpu.operator.api import FIELD_MANAGER
from kubegpu.operator.controller import Operator
from kubegpu.operator.health import HealthServer
from kubegpu.operator.reconciler import OperatorConfig
from kubegpu.operator.render import DEFAULT_IMAGE, DEFAULT_NAMESPACE

log = logging.getLogger("kubegpu.cli.operator")

# a replaced operator pod may still hold the probe port for its grace period
PORT_ATTEMPTS = 30
PORT_RETRY_S = 1.0


@dataclass(frozen=True)
class OperatorFlags:
    namespace: str = DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    image_env: Mapping[str, str] = field(default_factory=dict)
    health_address: str = "0.0.0.0"
    health_port: int = 8081
    renew_s: float = 60.0


class OperatorProgram:
    """`run()` serves the probes and runs the loop until `stop()`."""

    def __init__(self, flags: OperatorFlags, kubeconfig: KubeConfig) -> None:
        self.flags = flags
        self.client = AsyncClient(kubeconfig, field_manager=FIELD_MANAGER)
        self.operator = Operator(
            self.client,
            OperatorConfig(
                namespace=flags.namespace,
                kubegpu_image=flags.image,
                image_env=dict(flags.image_env),
                renew_s=flags.renew_s,
            ),
        )
        op = self.operator
        self.health = HealthServer(
            op.live, op.ready, op.metrics, flags.health_address, flags.health_port
        )
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        try:
            if not await self._serve_probes():
                return  # stopped while waiting for the port
            log.info(
                "kubegpu operator: namespace %s, image %s, probes on :%d",
                self.flags.namespace,
                self.flags.image,
                self.health.port,
            )
            loop = asyncio.create_task(self.operator.run(), name="operator")
            stopped = asyncio.create_task(self._stop.wait(), name="operator-stop")
            try:
                await asyncio.wait({loop, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (loop, stopped):
                    task.cancel()
                for task in (loop, stopped):
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        finally:
            await self.health.stop()
            await self.client.close()

    async def _serve_probes(self) -> bool:
        """Start the probe endpoint, waiting out a port still held; False if stopped."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                await self.health.start()
                return True
            except OSError as exc:
                if attempt == PORT_ATTEMPTS - 1:
                    raise ComponentError(
                        f"--health-port {self.flags.health_port}: {exc} "
                        f"(still taken after {PORT_ATTEMPTS} tries)"
                    ) from None
                log.warning("probe port %d: %s; retrying", self.flags.health_port, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), PORT_RETRY_S)
                if self._stop.is_set():
                    return False
        return False
