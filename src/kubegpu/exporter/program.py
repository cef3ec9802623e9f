"""The exporter as a program (`kubegpu exporter`): its flags checked before any GPU is
touched, NVML opened, and clean shutdown; `kubegpu.node.runtime.run()` drives it."""

from __future__ import annotations

import asyncio
import gc
import logging
from dataclasses import replace
from pathlib import Path

from kubegpu.exporter.counters import CountersError, load_counters
from kubegpu.exporter.server import (
    AddressError,
    Exporter,
    ExporterConfig,
    check_collect_interval,
    check_resource_names,
    parse_address,
)
from kubegpu.node.gpus import GpuBackend
from kubegpu.node.runtime import ComponentError

log = logging.getLogger("kubegpu.exporter")


class ExporterProgram:
    def __init__(self, config: ExporterConfig, collectors: Path | None, gpus: GpuBackend) -> None:
        """`collectors`: the counters file (None: the built-in set); refused here, whole,
        when it or the listen address is bad."""
        try:
            parse_address(config.address)
            check_collect_interval(config.collect_interval_s)
            check_resource_names(config.nvidia_resource_names)
            self.config = replace(config, counters=load_counters(collectors))
        except (AddressError, CountersError) as exc:
            raise ComponentError(str(exc)) from None
        self.gpus = gpus
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        nvml = self.gpus.open_or_fail()
        try:
            server = Exporter(self.config, nvml)
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
            nvml.close()
