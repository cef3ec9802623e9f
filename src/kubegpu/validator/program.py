"""The validator's commands as programs (`kubegpu validator check|wait|hold|metrics|workload`),
each a component that `kubegpu.node.runtime.run()` drives (signals, exit status)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from kubegpu.node.api import api_client
from kubegpu.node.gpus import GpuBackend
from kubegpu.node.runtime import ComponentError, OneShot
from kubegpu.validator.checks import CheckFailed, check_cuda_here
from kubegpu.validator.files import ReadyFiles
from kubegpu.validator.runner import COMPONENTS, Validator, ValidatorSettings

log = logging.getLogger("kubegpu.validator")

FIELD_MANAGER = "kubegpu-validator"
MIG_STRATEGIES = ("none", "single", "mixed")


def _check_output_dir(output_dir: Path) -> None:
    """Said at start, not as a traceback once the validation has passed."""
    if output_dir.exists() and not output_dir.is_dir():
        raise ComponentError(f"--output-dir {output_dir}: is a file, not a directory")


def check(settings: ValidatorSettings, gpus: GpuBackend, kubeconfig: str | None) -> OneShot:
    """Validate one component; write its ready file when it passes."""
    if settings.component not in COMPONENTS:
        raise ComponentError(
            f"--component {settings.component!r}: use one of {', '.join(COMPONENTS)}"
        )
    if settings.mig_strategy not in MIG_STRATEGIES:
        # anything but 'mixed' would otherwise pass as 'single' in the plugin workload
        raise ComponentError(
            f"--mig-strategy / MIG_STRATEGY {settings.mig_strategy!r}: "
            f"use one of {', '.join(MIG_STRATEGIES)}"
        )
    _check_output_dir(settings.output_dir)
    needs_api = settings.component == "plugin" or (
        settings.component == "cuda" and settings.with_workload
    )

    async def work() -> None:
        client = api_client(FIELD_MANAGER, kubeconfig) if needs_api else None
        try:
            await Validator(settings, gpus, client).run()
        except CheckFailed as exc:
            raise ComponentError(f"{settings.component}: {exc}") from None
        finally:
            if client is not None:
                await client.close()

    return OneShot(work)


def wait(
    output_dir: Path, files: Sequence[str], interval_s: float, timeout_s: float | None
) -> OneShot:
    """Wait until the ready files exist (an operand's init container)."""
    _check_output_dir(output_dir)
    if timeout_s is not None and not timeout_s >= 0:  # NaN would wait forever
        raise ComponentError(f"--timeout {timeout_s}: must be 0 or more seconds")

    async def work() -> None:
        log.info("waiting for %s in %s", ", ".join(files), output_dir)
        ready = ReadyFiles(output_dir)
        if not await ready.wait(list(files), interval_s=interval_s, timeout_s=timeout_s):
            raise ComponentError(f"{', '.join(files)} not ready after {timeout_s}s")
        log.info("%s ready", ", ".join(files))

    return OneShot(work)


def workload(kind: str, gpus: GpuBackend, visible: str | None, root: Path | None) -> OneShot:
    """The workload pods' command: the GPU accepts a workload (the result on stdout)."""
    if kind not in {"cuda", "plugin"}:
        raise ComponentError(f"workload {kind!r}: use cuda or plugin")
    if kind == "plugin" and (not visible or visible in {"all", "void", "none"}):
        raise ComponentError(
            "plugin workload: the device plugin allocated no device to this container"
        )

    async def work() -> None:
        result = await asyncio.to_thread(check_cuda_here, gpus.open, gpus.cuda, visible, root)
        print(result.message, file=sys.stdout, flush=True)

    return OneShot(work)


class Hold:
    """Stay up while the validations hold; on stop remove every *-ready file (as the
    upstream validator's preStop hook does), so operands wait again for a new validation."""

    def __init__(self, output_dir: Path) -> None:
        self.files = ReadyFiles(output_dir)
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        present = ", ".join(self.files.present()) or "(none)"
        log.info("all validations are successful: %s", present)
        await self._stop.wait()
        removed = self.files.clear_all()
        log.info("stopping: removed %s", ", ".join(removed) or "nothing")


class StatusExporter:
    """The node status exporter: the validation state on /metrics."""

    def __init__(self, output_dir: Path, address: str, port: int, node_name: str | None) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        from kubegpu.validator.metrics import ValidationCollector

        registry = CollectorRegistry()
        registry.register(ValidationCollector(ReadyFiles(output_dir), node_name))
        try:
            self.server, self.thread = start_http_server(port, addr=address, registry=registry)
        except OSError as exc:
            raise ComponentError(
                f"cannot listen on {address}:{port}: {exc.strerror or exc}"
            ) from None
        self.address = address
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        log.info("node status exporter on %s:%d", self.address, self.server.server_port)
        try:
            await self._stop.wait()
        finally:
            self.server.shutdown()
            self.thread.join(timeout=5)
