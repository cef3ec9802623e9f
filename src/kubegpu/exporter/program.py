"""The exporter as a program (`kubegpu exporter`): its flags checked before any GPU is
touched, NVML opened, and clean shutdown; `kubegpu.node.runtime.run()` drives it."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from dataclasses import replace
from pathlib import Path

from kubegpu.exporter.counters import CountersError, load_counters
from kubegpu.exporter.poddirectory import PodDirectory
from kubegpu.exporter.server import (
    AddressError,
    Exporter,
    ExporterConfig,
    check_collect_interval,
    check_resource_names,
    parse_address,
)
from kubegpu.node.api import api_client
from kubegpu.node.gpus import GpuBackend
from kubegpu.node.runtime import ComponentError

log = logging.getLogger("kubegpu.exporter")
FIELD_MANAGER = "kubegpu-exporter"


def unused_without_kubernetes(config: ExporterConfig) -> list[str]:
    """The pod-attribution flags given that do nothing because --kubernetes is off."""
    if config.kubernetes:
        return []
    given = (
        ("--kubernetes-virtual-gpus / KUBERNETES_VIRTUAL_GPUS", config.virtual_gpus),
        ("--kubernetes-enable-dra / KUBERNETES_ENABLE_DRA", config.enable_dra),
        ("--nvidia-resource-names / NVIDIA_RESOURCE_NAMES", bool(config.nvidia_resource_names)),
    )
    return [flag for flag, on in given if on]


class ExporterProgram:
    def __init__(
        self,
        config: ExporterConfig,
        collectors: Path | None,
        gpus: GpuBackend,
        *,
        kubeconfig: str | None = None,
    ) -> None:
        """`collectors`: the counters file (None: the built-in set); refused here, whole,
        when it or the listen address is bad. `kubeconfig`: API credentials outside a pod,
        for --kubernetes-process-metrics."""
        try:
            parse_address(config.address)
            check_collect_interval(config.collect_interval_s)
            check_resource_names(config.nvidia_resource_names)
            self.config = replace(config, counters=load_counters(collectors))
        except (AddressError, CountersError) as exc:
            raise ComponentError(str(exc)) from None
        if config.process_metrics and not config.kubernetes:
            raise ComponentError("--kubernetes-process-metrics needs --kubernetes")
        for flag in unused_without_kubernetes(config):
            log.warning(
                "%s is ignored without --kubernetes (DCGM_EXPORTER_KUBERNETES): no pod is "
                "attributed",
                flag,
            )
        self.node_name = config.hostname or os.environ.get("NODE_NAME")
        if config.process_metrics and not self.node_name:
            raise ComponentError(
                "--kubernetes-process-metrics needs the node's name (--node-name / NODE_NAME)"
            )
        self.kubeconfig = kubeconfig
        self.gpus = gpus
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        nvml = self.gpus.open_or_fail()
        client = None
        try:
            directory = None
            if self.config.process_metrics and self.node_name:
                client = api_client(FIELD_MANAGER, self.kubeconfig)
                directory = PodDirectory(client, self.node_name)
            server = Exporter(self.config, nvml, directory)
            try:
                await server.start()
            except OSError as exc:
                raise ComponentError(
                    f"cannot listen on {self.config.address}: {exc.strerror or exc}"
                ) from None
            # everything loaded so far lives as long as the process: keep it out of the
            # cyclic garbage collector's full passes, which would otherwise stall scrapes
            gc.freeze()
            await self._stop.wait()
            await server.stop()
            log.info("exporter stopped")
        finally:
            if client is not None:
                await client.close()
            nvml.close()
