"""The exporter: an HTTP endpoint serving DCGM exporter's metrics read through NVML.

Routes, as DCGM exporter's: `/metrics` (Prometheus text format), `/health` (200 `OK`) and
`/` (a short index). NVML is read on a scrape when the last reading is older than the
collect interval; pods are looked up on every scrape. The server is a small asyncio
HTTP/1.1 server (one request per connection); NVML and the kubelet are asked from a
worker thread so the event loop never blocks. A request it will not serve (malformed,
too large, too slow) gets the 4xx that says why (`kubegpu.base.request_head`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from kubegpu.base.loader import excerpt
from kubegpu.base.request_head import STREAM_LIMIT, HttpError, Request, read_request_within
from kubegpu.catalog import get_model
from kubegpu.catalog.placement import PlacedInstance
from kubegpu.exporter import dra, isolation
from kubegpu.exporter.collector import Collector, Snapshot
from kubegpu.exporter.counters import CounterSet, load_counters
from kubegpu.exporter.poddirectory import PodDirectory
from kubegpu.exporter.pods import PodResourcesClient, PodResourcesError, attribute
from kubegpu.exporter.processes import ProcCgroups, usage_by_pod
from kubegpu.exporter.xid import XidTracker
from kubegpu.kube.kubelet import POD_RESOURCES_SOCKET
from kubegpu.mig.headroom import more_instances
from kubegpu.nvml import Nvml

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = ":9400"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT_S = 10.0
# After an error answer, what is left of the request is read and dropped (at most this much,
# this long) so that closing does not reset the connection before the client reads it.
DISCARD_BYTES = 1024 * 1024
DISCARD_S = 1.0
INDEX_HTML = (
    b"<html><head><title>kubegpu exporter</title></head><body>"
    b"<h1>kubegpu exporter</h1><p><a href='/metrics'>Metrics</a></p></body></html>"
)


class AddressError(ValueError):
    """A listen address (or another flag) that cannot be used."""


def parse_address(address: str) -> tuple[str | None, int]:
    """`:9400` -> (None: every interface, 9400); `127.0.0.1:0`; `[::]:9400`."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise AddressError(f"listen address {address!r}: expected [host]:port, e.g. :9400")
    host = host.removeprefix("[").removesuffix("]")
    return (host or None), int(port)


MAX_COLLECT_INTERVAL_MS = 86_400_000  # a day
MAX_RESOURCE_NAMES = 64
MAX_RESOURCE_NAME = 253


def check_collect_interval(seconds: float) -> None:
    """--collect-interval within 0..a day (0: read the GPUs on every scrape)."""
    if not math.isfinite(seconds) or not 0 <= seconds * 1000 <= MAX_COLLECT_INTERVAL_MS:
        raise AddressError(
            f"--collect-interval / DCGM_EXPORTER_INTERVAL {seconds * 1000:g}: must be 0 to "
            f"{MAX_COLLECT_INTERVAL_MS} ms"
        )


def check_resource_names(names: tuple[str, ...]) -> None:
    """--nvidia-resource-names: at most MAX_RESOURCE_NAMES names of MAX_RESOURCE_NAME chars."""
    where = "--nvidia-resource-names / NVIDIA_RESOURCE_NAMES"
    if len(names) > MAX_RESOURCE_NAMES:
        raise AddressError(f"{where}: {len(names)} names; at most {MAX_RESOURCE_NAMES}")
    for name in names:
        if len(name) > MAX_RESOURCE_NAME:
            raise AddressError(
                f"{where}: {excerpt(name)} is longer than {MAX_RESOURCE_NAME} characters"
            )


def node_hostname() -> str:
    """The Hostname label: $NODE_NAME (the downward API's node name), else the host name."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


@dataclass
class ExporterConfig:
    address: str = DEFAULT_ADDRESS
    counters: CounterSet | None = None  # None: the built-in default counters
    collect_interval_s: float = 30.0  # DCGM exporter's -c default (30000 ms)
    kubernetes: bool = False
    pod_resources_socket: Path = Path(POD_RESOURCES_SOCKET)
    pod_resources_timeout_s: float = 3.0
    hostname: str | None = None  # None: node_hostname()
    no_hostname: bool = False
    replace_blanks_in_model_name: bool = False
    virtual_gpus: bool = False
    enable_dra: bool = False  # DRA claims' devices, with dra_* labels (needs kubernetes)
    nvidia_resource_names: tuple[str, ...] = ()
    xid_poll_s: float = 1.0
    # per-pod attribution of GPU processes and the pods' isolation (needs kubernetes, a pod
    # directory from the API server and the host's /proc at proc_root)
    process_metrics: bool = False
    proc_root: Path = Path("/proc")


class _GpuUp:
    """`kubegpu_exporter_gpu_up`: 1 per readable GPU, 0 (with NVML's error) otherwise."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kubegpu_exporter_gpu_up",
            "Whether the GPU could be read on the last collection (0: its DCGM series are "
            "omitted; err_code and err_msg give the NVML error).",
            labels=["gpu", "UUID", "modelName", "Hostname", "err_code", "err_msg"],
        )
        snap = self.exporter.snapshot
        host = self.exporter.collector.hostname or ""
        for r in snap.gpus if snap else ():
            family.add_metric(
                [
                    str(r.index),
                    r.info.uuid if r.info else "",
                    r.info.name if r.info else "",
                    host,
                    str(r.error_code),
                    r.error or "Success",
                ],
                0.0 if r.error else 1.0,
            )
        yield family


class _MigHeadroom:
    """`kubegpu_mig_free_instances`: per node and MIG profile, how many more instances the
    free slices of its MIG-enabled GPUs could still hold (kubegpu.mig.headroom), summed over
    the GPUs; one series per profile the driver offers, 0 included. A GPU whose instances
    cannot be read is left out (said once in the log)."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter
        self._failed: set[int] = set()

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kubegpu_mig_free_instances",
            "How many more MIG instances of this profile the free slices of the node's "
            "MIG-enabled GPUs could still hold, without moving the instances there.",
            labels=["Hostname", "modelName", "profile"],
        )
        snap = self.exporter.snapshot
        host = self.exporter.collector.hostname or ""
        totals: dict[tuple[str, str], int] = {}
        for r in snap.gpus if snap else ():
            counts = self._gpu(r.index, r.info.model_id if r.info else None)
            for profile, n in counts.items():
                key = (r.info.name if r.info else "", profile)
                totals[key] = totals.get(key, 0) + n
        for (model, profile), n in sorted(totals.items()):
            family.add_metric([host, model, profile], float(n))
        yield family

    def _gpu(self, index: int, model_id: str | None) -> dict[str, int]:
        if model_id is None:
            return {}
        model = get_model(model_id)
        if model.mig is None:
            return {}
        nvml = self.exporter.nvml
        try:
            if not nvml.mig_mode(index).current:
                return {}
            by_id = {p.id: p for p in model.mig.gpu_instance_profiles}
            placed = [
                PlacedInstance(gi.placement.start, by_id[gi.profile_id])
                for gi in nvml.gpu_instances(index)
                if gi.profile_id in by_id
            ]
            system = self.exporter.snapshot.system if self.exporter.snapshot else None
            driver = system.driver_version if system else None
        except Exception as exc:  # one GPU must never take the endpoint down
            if index not in self._failed:
                log.warning("GPU %d: MIG instances not read, no headroom series: %s", index, exc)
                self._failed.add(index)
            return {}
        self._failed.discard(index)
        return more_instances(model, placed, driver)


class Exporter:
    """The exporter, in-process: `await run()` serves until `stop()`; also `async with`."""

    def __init__(
        self, config: ExporterConfig, nvml: Nvml, pod_directory: PodDirectory | None = None
    ) -> None:
        """`pod_directory`: the node's pods from the API server, for per-process attribution
        and the isolation metrics (`process_metrics`); without it neither is exported."""
        self.config = config
        self.nvml = nvml
        attributing = config.process_metrics and config.kubernetes and pod_directory is not None
        self.pod_directory = pod_directory if attributing else None
        self.owners = ProcCgroups(config.proc_root)
        self.counters = config.counters or load_counters()
        self.xids = XidTracker(nvml, config.xid_poll_s)
        self.collector = Collector(
            nvml,
            self.counters,
            hostname=config.hostname or node_hostname(),
            no_hostname=config.no_hostname,
            replace_blanks_in_model_name=config.replace_blanks_in_model_name,
            xids=self.xids,
            read_processes=self.pod_directory is not None,
        )
        self.pod_resources = (
            PodResourcesClient(
                config.pod_resources_socket, config.pod_resources_timeout_s, missing_ok=True
            )
            if config.kubernetes
            else None
        )
        self.snapshot: Snapshot | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self._collect_seconds = Histogram(
            "kubegpu_exporter_collect_seconds",
            "Time spent reading the GPUs through NVML.",
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self._pod_errors = Counter(
            "kubegpu_exporter_pod_resources_errors",
            "Scrapes served without pod labels because the kubelet's pod-resources API failed.",
            registry=self.registry,
        )
        self.registry.register(_GpuUp(self))
        self.registry.register(_MigHeadroom(self))
        self._scrape_lock = threading.Lock()
        self._server: asyncio.Server | None = None
        self._stopped = asyncio.Event()
        self._running = False
        self.port = 0

    # -- one scrape ---------------------------------------------------------------------------
    def _fresh_snapshot(self) -> Snapshot:
        snap = self.snapshot
        if snap is None or time.monotonic() - snap.taken_at >= self.config.collect_interval_s:
            with self._collect_seconds.time():
                snap = self.snapshot = self.collector.read()
        return snap

    def scrape(self) -> bytes:
        """The /metrics body (blocking: reads NVML and the kubelet)."""
        with self._scrape_lock:
            snap = self._fresh_snapshot()
            pods = None
            if self.pod_resources is not None:
                entities = self.collector.entities(snap)
                try:
                    held = self.pod_resources.list_resources()
                except PodResourcesError as exc:
                    log.warning("serving without pod labels: %s", exc)
                    self._pod_errors.inc()
                else:
                    pods = attribute(
                        held.devices,
                        self.collector.device_index(snap, entities),
                        virtual_gpus=self.config.virtual_gpus,
                        resource_names=self.config.nvidia_resource_names,
                    )
                    if self.config.enable_dra and held.claims:
                        keys = frozenset(e.key for e in entities)
                        index = dra.read_index(self.nvml, {k[1] for k in keys})
                        pods = dra.merge(pods, dra.attribute_claims(held.claims, index, keys))
            usage = None
            directory = self.pod_directory
            if directory is not None and pods is not None:
                by_uid = {uid: (m.namespace, m.name) for uid, m in directory.by_uid.items()}
                usage = usage_by_pod(
                    [r.processes for r in snap.gpus if r.processes is not None],
                    frozenset(e.key for e in self.collector.entities(snap)),
                    self.owners.pod_uid,
                    by_uid,
                )
            text = self.collector.render(
                snap, pods, virtual_gpus=self.config.virtual_gpus, usage=usage
            )
            if directory is not None:
                text += isolation.render(directory.by_uid.values(), self.collector.hostname)
            return text.encode() + generate_latest(self.registry)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        host, port = parse_address(self.config.address)
        for warning in self.counters.warnings():
            log.warning("%s", warning)
        self._server = await asyncio.start_server(
            self._handle, host, port, reuse_address=True, limit=STREAM_LIMIT
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._stopped.clear()
        self._running = True
        self.xids.start()
        log.info(
            "exporter listening on %s (port %d), counters from %s",
            self.config.address,
            self.port,
            self.counters.source,
        )

    async def stop(self) -> None:
        """Stop serving and release everything; safe to call more than once."""
        if not self._running:
            return
        self._running = False
        self.xids.request_stop()  # first: done even if this stop is cancelled part-way
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        await asyncio.to_thread(self.xids.stop)
        if self.pod_resources is not None:
            self.pod_resources.close()
        self._stopped.set()

    async def run(self) -> None:
        """Serve until `stop()` (starting first unless already started)."""
        if not self._running:
            await self.start()
        await self._stopped.wait()

    async def __aenter__(self) -> Exporter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- HTTP ---------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                request = await read_request_within(reader, REQUEST_TIMEOUT_S)
            except asyncio.IncompleteReadError:
                return  # closed before sending anything: nobody to answer
            except HttpError as exc:
                await self._refuse(reader, writer, exc)
                return
            status, headers, body = await self._respond(request)
            self._write(writer, status, headers, body, send_body=request.method != "HEAD")
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("serving a request")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    def _write(
        writer: asyncio.StreamWriter,
        status: str,
        headers: dict[str, str],
        body: bytes,
        *,
        send_body: bool = True,
    ) -> None:
        lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items())]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        writer.write("\r\n".join(lines).encode("latin-1"))
        if send_body:
            writer.write(body)

    async def _refuse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, error: HttpError
    ) -> None:
        """Answer `error`, then drop what is left of the request before closing."""
        body = f"{error.message}\n".encode()
        self._write(writer, error.status_line, {"Content-Type": "text/plain"}, body)
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        left = DISCARD_BYTES
        with contextlib.suppress(TimeoutError, ConnectionError, asyncio.LimitOverrunError):
            async with asyncio.timeout(DISCARD_S):
                while left > 0 and (chunk := await reader.read(min(left, 65536))):
                    left -= len(chunk)

    async def _respond(self, request: Request) -> tuple[str, dict[str, str], bytes]:
        method, path, headers = request.method, request.path, request.headers
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", {"Allow": "GET, HEAD"}, b""
        if path == "/metrics":
            if self.pod_directory is not None:
                await self.pod_directory.refresh()
            try:
                body = await asyncio.to_thread(self.scrape)
            except Exception as exc:  # a bug, not a device: say so rather than hang up
                log.exception("scrape failed")
                return (
                    "500 Internal Server Error",
                    {"Content-Type": "text/plain"},
                    f"{exc}\n".encode(),
                )
            out = {"Content-Type": CONTENT_TYPE}
            if "gzip" in headers.get("accept-encoding", ""):
                body = gzip.compress(body, compresslevel=1)
                out["Content-Encoding"] = "gzip"
            return "200 OK", out, body
        if path == "/health":
            return "200 OK", {"Content-Type": "text/plain; charset=utf-8"}, b"OK"
        if path == "/":
            return "200 OK", {"Content-Type": "text/html; charset=utf-8"}, INDEX_HTML
        return "404 Not Found", {"Content-Type": "text/plain"}, b"404 page not found\n"
