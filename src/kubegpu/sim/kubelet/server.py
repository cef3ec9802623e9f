"""The simulated kubelet's HTTPS endpoint: what the API server proxies `kubectl logs` to.

The node publishes this server's port as `status.daemonEndpoints.kubeletEndpoint.Port`, and
its address as the node's InternalIP; the API server then reaches
`GET /containerLogs/<namespace>/<pod>/<container>` here (query: follow, previous,
tailLines, limitBytes, timestamps are accepted; timestamps are not added). It serves TLS
with a certificate of its own, as a real kubelet does with a self-signed serving
certificate; the simulated control plane does not verify kubelet certificates, and this
server does not verify the API server's client certificate (a local simulator).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from kubegpu.base.request_head import REASONS, STREAM_LIMIT, HttpError, read_request_within
from kubegpu.sim.controlplane.certs import CertificateAuthority

log = logging.getLogger(__name__)

FOLLOW_POLL_S = 0.2
REQUEST_TIMEOUT_S = 10.0  # for the whole request head


@dataclass(frozen=True)
class LogSource:
    """One container's log files and whether it may still write more."""

    files: list[Path]  # every run's log, oldest first (one per restart)
    running: Callable[[], bool]


# (namespace, pod, container) -> its logs, or None when no such container runs here
Finder = Callable[[str, str, str], LogSource | None]


@dataclass(frozen=True)
class LogRequest:
    namespace: str
    pod: str
    container: str
    follow: bool = False
    previous: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None


class BadRequest(ValueError):
    """The request cannot be served; the message is the response body."""


def parse_log_request(target: str) -> LogRequest:
    """`/containerLogs/ns/pod/ctr?follow=true&tailLines=5` -> LogRequest."""
    url = urlsplit(target)
    parts = [unquote(p) for p in url.path.split("/") if p]
    if len(parts) != 4 or parts[0] != "containerLogs":
        raise BadRequest(f"not found: {url.path} (serving /containerLogs/<ns>/<pod>/<container>)")
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}

    def number(name: str) -> int | None:
        if name not in query:
            return None
        try:
            value = int(query[name])
        except ValueError:
            raise BadRequest(f"{name}={query[name]!r}: not a whole number") from None
        if value < 0:
            raise BadRequest(f"{name}={value}: must not be negative")
        return value

    return LogRequest(
        namespace=parts[1],
        pod=parts[2],
        container=parts[3],
        follow=query.get("follow") in {"true", "1"},
        previous=query.get("previous") in {"true", "1"},
        tail_lines=number("tailLines"),
        limit_bytes=number("limitBytes"),
    )


def select_log(source: LogSource, request: LogRequest) -> Path | None:
    """The current run's log, or the one before with `previous`."""
    files = source.files
    if request.previous:
        return files[-2] if len(files) >= 2 else None
    return files[-1] if files else None


def tail(data: bytes, lines: int | None) -> bytes:
    if lines is None:
        return data
    if lines == 0:
        return b""
    return b"".join(data.splitlines(keepends=True)[-lines:])


def serving_context(directory: Path, node: str, addresses: list[str]) -> ssl.SSLContext:
    """A self-signed serving certificate for the node's addresses (written under
    `directory`, as kubelet keeps its own in /var/lib/kubelet/pki)."""
    ca = CertificateAuthority.create(f"{node}-kubelet-ca")
    issued = ca.issue(
        f"{node}-kubelet", dns_names=[node, "localhost"], ip_addresses=addresses, server=True
    )
    cert, key = directory / "kubelet.crt", directory / "kubelet.key"
    issued.write(cert, key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["http/1.1"])
    return context


class KubeletServer:
    def __init__(self, finder: Finder, host: str, context: ssl.SSLContext) -> None:
        self.finder = finder
        self.host = host
        self.context = context
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self, port: int = 0) -> int:
        self._server = await asyncio.start_server(
            self._serve, self.host, port, ssl=self.context, limit=STREAM_LIMIT
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, ValueError):
            pass
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await read_request_within(reader, REQUEST_TIMEOUT_S)
        except HttpError as exc:
            await _respond(writer, exc.status, f"{exc.message}\n".encode())
            return
        method, target = head.method, head.target
        if method != "GET":
            await _respond(writer, 405, f"{method} is not served here\n".encode())
            return
        try:
            request = parse_log_request(target)
        except BadRequest as exc:
            code = 404 if str(exc).startswith("not found") else 400
            await _respond(writer, code, f"{exc}\n".encode())
            return
        source = self.finder(request.namespace, request.pod, request.container)
        if source is None:
            await _respond(
                writer,
                404,
                f"container {request.container!r} in pod {request.namespace}/{request.pod} "
                "is not running on this node\n".encode(),
            )
            return
        path = select_log(source, request)
        if path is None:
            what = "no previous terminated container" if request.previous else "no log yet"
            await _respond(writer, 400, f"{request.container}: {what}\n".encode())
            return
        data = tail(path.read_bytes() if path.exists() else b"", request.tail_lines)
        if request.limit_bytes is not None:
            data = data[: request.limit_bytes]
        if not request.follow or request.previous:
            await _respond(writer, 200, data)
            return
        await self._follow(writer, path, data, source)

    async def _follow(
        self, writer: asyncio.StreamWriter, path: Path, data: bytes, source: LogSource
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        offset = path.stat().st_size if path.exists() else 0
        await _chunk(writer, data)
        while True:
            alive = source.running()
            size = path.stat().st_size if path.exists() else 0
            if size > offset:
                with path.open("rb") as f:
                    f.seek(offset)
                    more = f.read(size - offset)
                offset = size
                await _chunk(writer, more)
            elif not alive:
                break
            await asyncio.sleep(FOLLOW_POLL_S)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    if data:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()


async def _respond(writer: asyncio.StreamWriter, code: int, body: bytes) -> None:
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", **REASONS}[code]
    writer.write(
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
