"""The clients of `bench serve`: a light HTTP/1.1 load generator (`drive`) and the official openai client
(`openai_round`).

`drive`: every request's bytes are built before the clock starts, each client is one keep-alive asyncio
connection, and a response is read by its Content-Length.

On a 2-core machine the load generator's CPU time is taken from the server it measures. httpx's AsyncClient
builds, JSON-encodes and parses each request in Python (connection pool, header models, response decoding):
about a millisecond of CPU a request here, several percent of a round. `wrk` (a Debian package) would be as
light, but it is not on every machine and would need a Lua script to cycle through distinct bodies; this stays
in Python and needs nothing installed.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

from neoembed.extras import require


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


def client_processes() -> int:
    """Processes for `openai_round` by default: a quarter of the usable cores, at least one (the rest are the
    server's and its model's)."""
    return max(1, len(os.sched_getaffinity(0)) // 4)


def openai_round(
    port: int, model: str, requests: list[list[str]], clients: int, processes: int
) -> tuple[float, list[float]]:
    """(wall seconds, per-request latencies) of `requests` sent through the official openai client
    (`embeddings.create`, base64 vectors decoded by the client): `clients` threads with a client each, spread
    over `processes` processes.

    Several processes, because the client's own Python work (request building, pydantic models, decoding) runs
    under one interpreter lock per process: on an H200, 32 client threads in one process got 4.7k texts/s
    where raw HTTP clients got 11.1k from a server of the same settings. Each process imports openai and sends one request
    per thread before a barrier; the clock runs from the barrier to the last answer.
    """
    require("openai")
    context = multiprocessing.get_context("spawn")  # the caller runs torch's thread pools: no fork
    barrier, answers = context.Barrier(processes + 1), context.Queue()
    threads = -(-clients // processes)
    workers = [
        context.Process(
            target=_openai_share, args=(port, model, requests[i::processes], threads, barrier, answers)
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        try:
            barrier.wait(timeout=300)
        except threading.BrokenBarrierError:  # a process failed before the start: its error is queued
            raise RuntimeError(f"an openai client failed: {answers.get(timeout=60)}") from None
        started = time.perf_counter()
        shares = [answers.get(timeout=3600) for _ in workers]
        seconds = time.perf_counter() - started
    except BaseException:
        for worker in workers:
            worker.kill()
        raise
    finally:
        for worker in workers:
            worker.join()
    if failed := next((share for share in shares if isinstance(share, str)), None):
        raise RuntimeError(f"an openai client failed: {failed}")
    return seconds, [latency for share in shares for latency in share]


def _openai_share(
    port: int, model: str, requests: list[list[str]], threads: int, barrier: Barrier, answers: Queue
) -> None:
    """One process's part of `openai_round`: its latencies, or the error's text, into `answers`."""
    import openai

    local = threading.local()

    def send(texts: list[str]) -> float:
        if not hasattr(local, "client"):
            local.client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0
            )
        started = time.perf_counter()
        response = local.client.embeddings.create(model=model, input=texts)
        latency = time.perf_counter() - started
        if len(response.data) != len(texts):
            raise RuntimeError(f"{len(texts)} texts sent, {len(response.data)} vectors back")
        return latency

    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(send, requests[:threads]))  # warm-up: the threads, their clients and connections
            barrier.wait(timeout=300)
            answers.put(list(pool.map(send, requests)))
    except Exception as err:
        barrier.abort()  # the parent waits at the barrier no longer
        answers.put(f"{type(err).__name__}: {err}")
