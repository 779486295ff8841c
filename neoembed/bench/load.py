"""A light HTTP/1.1 load generator for `bench serve`: every request's bytes are built before the clock starts,
each client is one keep-alive asyncio connection, and a response is read by its Content-Length.

On a 2-core machine the load generator's CPU time is taken from the server it measures. httpx's AsyncClient
builds, JSON-encodes and parses each request in Python (connection pool, header models, response decoding):
about a millisecond of CPU a request here, several percent of a round. `wrk` (a Debian package) would be as
light, but it is not on every machine and would need a Lua script to cycle through distinct bodies; this stays
in Python and needs nothing installed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable


def post(host: str, port: int, path: str, body: dict) -> bytes:
    """A complete HTTP/1.1 POST of `body` as JSON, for a keep-alive connection."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bytes:
    """Send one request and return its response body; a status other than 200 is an error."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(":", 1) for line in header_lines if ":" in line)
    length = {name.strip().lower(): value.strip() for name, value in headers.items()}.get("content-length")
    if length is None:
        raise RuntimeError(f"a response without Content-Length: {status_line}")
    body = await reader.readexactly(int(length))
    if status_line.split(" ", 2)[1] != "200":
        raise RuntimeError(f"{status_line}: {body[:500].decode(errors='replace')}")
    return body


async def drive(
    host: str, port: int, requests: list[bytes], clients: int, on_response: Callable[[], None] = lambda: None
) -> tuple[float, list[float]]:
    """Send every request through `clients` concurrent connections; wall time and per-request latencies."""
    pending = list(reversed(requests))
    latencies: list[float] = []

    async def client_loop() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while pending:
                request = pending.pop()
                started = time.perf_counter()
                await _exchange(reader, writer, request)
                latencies.append(time.perf_counter() - started)
                on_response()
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(clients)))
    return time.perf_counter() - started, latencies
