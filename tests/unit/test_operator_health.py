"""The operator's probe endpoint reads a request within bounds: an oversized or slow request
is answered with the 4xx that says why and closed, not buffered or waited on forever."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kubegpu.operator import health
from kubegpu.operator.health import HealthServer


@pytest.fixture
async def server() -> AsyncIterator[HealthServer]:
    s = HealthServer(lambda: (True, "ok\n"), lambda: (False, "caches not synced\n"), lambda: "")
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


async def _exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_probes_are_answered(server: HealthServer) -> None:
    live = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    ready = await _exchange(server.port, b"GET /readyz?verbose HTTP/1.1\r\n\r\n")
    missing = await _exchange(server.port, b"GET /nope HTTP/1.1\r\n\r\n")
    assert live.startswith(b"HTTP/1.1 200 OK\r\n") and live.endswith(b"\r\n\r\nok\n")
    assert ready.startswith(b"HTTP/1.1 503 ")
    assert missing.startswith(b"HTTP/1.1 404 ")


async def test_a_request_with_headers_beyond_the_bound_is_refused(server: HealthServer) -> None:
    flood = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"y" * 100) for i in range(400))
    answer = await _exchange(server.port, b"GET /healthz HTTP/1.1\r\n" + flood)
    assert answer.startswith(b"HTTP/1.1 431 ")


async def test_an_overlong_request_line_is_refused(server: HealthServer) -> None:
    answer = await _exchange(server.port, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 414 ")


async def test_a_request_that_trickles_in_is_refused_in_time(
    server: HealthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "REQUEST_TIMEOUT_S", 0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /healthz HTTP/1.1\r\n")

    async def trickle() -> None:
        for i in range(100):  # a header line every 50 ms: never the end of the head
            writer.write(b"X-Slow-%d: 1\r\n" % i)
            await writer.drain()
            await asyncio.sleep(0.05)

    dripping = asyncio.create_task(trickle())
    try:
        answer = await asyncio.wait_for(reader.read(), 4)
    finally:
        dripping.cancel()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
