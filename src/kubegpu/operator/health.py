"""A tiny HTTP endpoint for kubelet's probes: /healthz (liveness, tied to watch health and
the reconcile loop), /readyz (caches synced) and /metrics (request counters)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

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
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (
                b"\r\n",
                b"\n",
                b"",
            ):
                pass
            parts = request.decode(errors="replace").split()
            path = parts[1].split("?", 1)[0] if len(parts) > 1 else "/"
            route = self._routes.get(path)
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
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
