"""Reading one HTTP/1.1 request head within bounds: the one request reader of kubegpu's
small servers (the exporter's /metrics, the operator's probes, the simulated kubelet's log
endpoint). Only asyncio streams: a server's parser, not an HTTP client.

A request the server will not serve is answered with the 4xx that says why, never by
dropping the connection: 400 for a malformed request, 408 for one that does not arrive in
time, 413 for a body larger than the server reads, 414 for a request line longer than
`MAX_REQUEST_LINE`, 431 for headers larger than `MAX_HEADER_BYTES` or more than
`MAX_HEADERS` of them, 505 for an HTTP major version other than 1.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

MAX_REQUEST_LINE = 8 * 1024
MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 100
MAX_BODY = 64 * 1024  # a scrape has no body; a small one is read and ignored
STREAM_LIMIT = max(MAX_REQUEST_LINE, MAX_HEADER_BYTES) + 2  # the StreamReader's line bound

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VERSION = re.compile(r"^HTTP/(\d)\.(\d)$")

REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    505: "HTTP Version Not Supported",
}


class HttpError(Exception):
    """A request that gets `status` and `message` instead of an answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def status_line(self) -> str:
        return f"{self.status} {REASONS.get(self.status, 'Error')}"


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


def parse_request_line(line: bytes) -> tuple[str, str, str]:
    """`GET /metrics HTTP/1.1` -> its three parts; HttpError for anything else."""
    if len(line) > MAX_REQUEST_LINE:
        raise HttpError(414, f"request line longer than {MAX_REQUEST_LINE} bytes")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise HttpError(400, "request line is not ASCII") from None
    parts = text.split(" ")
    if len(parts) != 3 or not all(parts):
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.match(method):
        raise HttpError(400, "malformed method")
    if not target.startswith("/") or any(c <= " " or c == "\x7f" for c in target):
        raise HttpError(400, "malformed request target")
    match = _VERSION.match(version)
    if match is None:
        raise HttpError(400, "malformed HTTP version")
    if match.group(1) != "1":
        raise HttpError(505, f"{version} is not supported; use HTTP/1.1")
    return method, target, version


def parse_header(line: bytes) -> tuple[str, str]:
    """`Name: value` -> (lower-cased name, value); HttpError for a malformed line."""
    text = line.decode("latin-1")
    name, sep, value = text.partition(":")
    if not sep or not _TOKEN.match(name):
        raise HttpError(400, "malformed header line")
    return name.lower(), value.strip(" \t")


def body_length(headers: dict[str, str]) -> int:
    """The body's length from Content-Length (0 without one), within MAX_BODY."""
    if "transfer-encoding" in headers:
        raise HttpError(400, "request bodies with a transfer encoding are not accepted")
    text = headers.get("content-length", "0")
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise HttpError(400, "malformed Content-Length")
    length = int(text)
    if length > MAX_BODY:
        raise HttpError(413, f"request body larger than {MAX_BODY} bytes")
    return length


async def _line(reader: asyncio.StreamReader, too_long: HttpError) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise too_long from None
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise
        raise HttpError(400, "incomplete request") from None
    return line.rstrip(b"\n").rstrip(b"\r")


async def read_request(reader: asyncio.StreamReader) -> Request:
    """One request head (and its small body, which is ignored).

    IncompleteReadError when the client closed before sending anything (nobody to answer);
    HttpError for a request that gets a 4xx. `reader` must have `limit=STREAM_LIMIT`."""
    line = await _line(reader, HttpError(414, f"request line longer than {MAX_REQUEST_LINE} bytes"))
    method, target, version = parse_request_line(line)
    headers: dict[str, str] = {}
    size = count = 0
    too_big = HttpError(431, f"request headers larger than {MAX_HEADER_BYTES} bytes")
    while True:
        try:
            raw = await _line(reader, too_big)
        except asyncio.IncompleteReadError:
            raise HttpError(400, "incomplete request") from None
        if not raw:
            break
        size += len(raw) + 2
        if size > MAX_HEADER_BYTES:
            raise too_big
        count += 1
        if count > MAX_HEADERS:
            raise HttpError(431, f"more than {MAX_HEADERS} request headers")
        name, value = parse_header(raw)
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    length = body_length(headers)
    if length:
        try:
            await reader.readexactly(length)
        except asyncio.IncompleteReadError:
            raise HttpError(400, "incomplete request body") from None
    return Request(method, target, version, headers)


async def read_request_within(reader: asyncio.StreamReader, timeout_s: float) -> Request:
    """`read_request` with `timeout_s` for the whole head and body: a client that sends too
    slowly gets HttpError 408 rather than holding the connection open."""
    try:
        return await asyncio.wait_for(read_request(reader), timeout=timeout_s)
    except TimeoutError:
        raise HttpError(408, "request not received in time") from None
