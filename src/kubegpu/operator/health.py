"""A tiny HTTP endpoint for kubelet's probes: /healthz (liveness, tied to watch health and
the reconcile loop), /readyz (caches synced) and /metrics (request counters).

Requests are read by `kubegpu.base.request_head` within its bounds and `REQUEST_TIMEOUT_S`:
an oversized, malformed or slow request gets the 4xx that says why and is closed, never
buffered or waited on without end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from kubegpu.base.request_head import STREAM_LIMIT, HttpError, read_request_within

REQUEST_TIMEOUT_S = 5.0  # for the whole request head: a probe sends it at once

Check = Callable[[], tuple[bool, str]]


class HealthServer:
    def __init__(
        self,
        live: Check,
        ready: Check,
        metrics: Callable[[], str],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._routes: dict[str, Callable[[], tuple[bool, str]]] = {
            "/healthz": live,
            "/readyz": ready,
            "/metrics": lambda: (True, metrics()),
        }
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, limit=STREAM_LIMIT
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                request = await read_request_within(reader, REQUEST_TIMEOUT_S)
            except asyncio.IncompleteReadError:
                return  # closed before sending anything: nobody to answer
            except HttpError as exc:
                body, code = f"{exc.message}\n", exc.status_line
            else:
                route = self._routes.get(request.path)
                if route is None:
                    ok, body, code = False, "not found\n", "404 Not Found"
                else:
                    ok, body = route()
                    code = "200 OK" if ok else "503 Service Unavailable"
            payload = body.encode()
            writer.write(
                f"HTTP/1.1 {code}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
