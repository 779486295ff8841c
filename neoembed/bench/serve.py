"""`neoembed bench serve`: the HTTP server's throughput under concurrent clients vs `model.encode` in-process.

The same texts (WordNet glosses) are embedded two ways, alternating for `repeats` rounds so machine noise
hits both alike: directly with `SentenceTransformer.encode` in this process (batch size 32, its default,
which the target refers to, and larger batch sizes, which show what batching itself is worth here), and
through `neoembed serve` in a subprocess, by `clients` concurrent clients each posting requests of
`texts_per_request` texts (base64, as the openai client asks). The best round of each is compared; latency
percentiles are per request, from the best server round. The server runs in its own process so clients
and server do not share one GIL, as in deployment; both sides use the same number of torch threads.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import torch
from tqdm.auto import tqdm

from neoembed.bench.report import markdown_table, write_report
from neoembed.runs import append_jsonl

TARGET_RATIO = 0.8  # the target: server throughput >= 0.8x direct encode


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(model: str, threads: int, log_path: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    command = [sys.executable, "-c", "from neoembed.cli import main; main()", "serve", "--model", model]
    command += ["--port", str(port)]
    command += ["--threads", str(threads), "--log-level", "warning"]
    log = log_path.open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}; see {log_path}")
        try:
            if httpx.get(f"{base}/health").status_code == 200:
                return process, base
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    process.kill()
    raise RuntimeError(f"the server did not become healthy in 300 s; see {log_path}")


async def _drive(base: str, requests: list[list[str]], clients: int) -> tuple[float, list[float]]:
    """Send every request through `clients` concurrent connections; wall time and per-request latencies."""
    pending = list(reversed(range(len(requests))))
    latencies: list[float] = []
    bar = tqdm(total=len(requests), unit="req", desc="server", leave=False)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while pending:
            texts = requests[pending.pop()]
            started = time.perf_counter()
            body = {"input": texts, "model": "bench", "encoding_format": "base64"}
            response = await client.post(f"{base}/v1/embeddings", json=body)
            response.raise_for_status()
            latencies.append(time.perf_counter() - started)
            bar.update()

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
        wall = time.perf_counter() - started
    bar.close()
    return wall, latencies


def run(
    *,
    model: str,
    texts: int,
    texts_per_request: int,
    clients: int,
    repeats: int,
    threads: int,
    out_dir: Path,
    direct_batch_sizes: tuple[int, ...] = (32, 256),
) -> dict:
    from neoembed.data.wordnet import load_synsets
    from neoembed.embedder import load_embedder

    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "serve_log.jsonl"
    log_path.unlink(missing_ok=True)
    torch.set_num_threads(threads)
    inputs = [s.gloss for s in load_synsets()[:texts]]
    requests = [inputs[i : i + texts_per_request] for i in range(0, len(inputs), texts_per_request)]
    embedder = load_embedder(model)
    tokens = sum(len(ids) for ids in embedder.tokenizer(inputs, truncation=True)["input_ids"])
    embedder.encode(inputs[:64])  # warm-up

    server, base = _start_server(model, threads, out_dir / "server.log")
    try:
        asyncio.run(_drive(base, requests[: 2 * clients], clients))  # warm-up: connections, first batches
        direct_s: dict[int, list[float]] = {size: [] for size in direct_batch_sizes}
        served = []
        for round_ in range(repeats):
            for size in direct_batch_sizes:
                started = time.perf_counter()
                embedder.encode(inputs, batch_size=size, show_progress_bar=False)
                direct_s[size].append(time.perf_counter() - started)
                append_jsonl(
                    log_path, {"round": round_, "path": f"encode batch {size}", "seconds": direct_s[size][-1]}
                )
            wall, latencies = asyncio.run(_drive(base, requests, clients))
            served.append((wall, latencies))
            append_jsonl(log_path, {"round": round_, "path": "server", "seconds": wall, "texts": len(inputs)})
    finally:
        server.terminate()
        server.wait(timeout=120)

    # The target compares with encode at the first batch size (32: what a plain `model.encode` call does).
    best_direct = min(direct_s[direct_batch_sizes[0]])
    best_wall, latencies = min(served, key=lambda pair: pair[0])
    p50, p95, p99 = (float(np.percentile(latencies, q)) * 1000 for q in (50, 95, 99))
    rows = [
        {
            "path": f"model.encode (in-process, batch {size})",
            "texts/s": len(inputs) / min(times),
            "tokens/s": tokens / min(times),
            "ratio": best_direct / min(times),
        }
        for size, times in direct_s.items()
    ]
    rows.append(
        {
            "path": f"neoembed serve, {clients} clients x {texts_per_request} texts/request",
            "texts/s": len(inputs) / best_wall,
            "tokens/s": tokens / best_wall,
            "ratio": best_direct / best_wall,
            "p50 ms": p50,
            "p95 ms": p95,
            "p99 ms": p99,
        }
    )
    ratio = best_direct / best_wall
    table = markdown_table(rows, ["path", "texts/s", "tokens/s", "ratio", "p50 ms", "p95 ms", "p99 ms"])
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    summary = f"server/direct throughput ratio {ratio:.2f} ({verdict} the {TARGET_RATIO}x target)"
    for size in direct_batch_sizes[1:]:
        summary += f"; vs encode at batch {size}: {min(direct_s[size]) / best_wall:.2f}"
    settings = {
        "model": model,
        "texts": len(inputs),
        "tokens": tokens,
        "texts_per_request": texts_per_request,
        "requests": len(requests),
        "clients": clients,
        "repeats": repeats,
        "threads": threads,
        "direct_batch_sizes": list(direct_batch_sizes),
        "load_average": os.getloadavg(),
    }
    markdown = (
        f"# neoembed bench serve\n\n{len(inputs)} WordNet glosses ({tokens} tokens), {model}, "
        f"{threads} torch threads on both sides, best of {repeats} alternating rounds; ratio = throughput / "
        f"model.encode at batch {direct_batch_sizes[0]}.\n\n{table}\n\n{summary}\n"
    )
    payload = {
        "settings": settings,
        "rows": rows,
        "ratio": ratio,
        "direct_s": {str(k): v for k, v in direct_s.items()},
    }
    payload["server_s"] = [wall for wall, _ in served]
    json_path, md_path = write_report(out_dir, "serve", payload, markdown)
    return {"table": table, "summary": summary, "ratio": ratio, "json": json_path, "markdown": md_path}
