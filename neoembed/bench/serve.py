"""`neoembed bench serve`: the HTTP server's throughput under concurrent clients vs `model.encode` in-process,
and how fast /health answers under a load of its own, for each model given (by default all-MiniLM-L6-v2 and a NeoBERT).

The same texts (WordNet glosses) are embedded two ways, alternating for `repeats` rounds so machine noise
hits both alike: directly with `SentenceTransformer.encode` in this process (batch size 32, its default,
which the ratio refers to, and larger batch sizes, which show what batching itself is worth here), and
through `neoembed serve` in a subprocess, by `clients` concurrent clients each posting requests of
`texts_per_request` texts (base64, as the openai client asks). The clients are `load.drive`: request bytes
built before the clock starts, one keep-alive connection each, so the load generator takes little of the CPU
the server is measured on. The best round of each side is compared; request latency percentiles come from
the best server round. The server runs in its own processes so clients and server do not share one
interpreter lock, as in deployment; both sides use the same number of torch threads and fp32.

/health is measured in a round of its own (`health_requests` requests from `health_clients` clients, every
one of which must be answered 200, while one more client polls /health every 20 ms), not during the
throughput rounds: on 2 cores a 50 Hz poller takes CPU from the model on the server side only (about 8% of
MiniLM's throughput, measured), which would make the comparison with in-process encode unfair.

The model name `neobert` stands for a NeoBERT of the quickstart's size (4 layers x 128, random weights:
speed does not depend on the weights) exported as a sentence-transformers directory under the output
directory; any other name is loaded as `neoembed serve --model` would load it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import torch
from tqdm.auto import tqdm

from neoembed.bench import load
from neoembed.bench.report import markdown_table, write_report
from neoembed.bench.settings import ServeBench
from neoembed.runs import append_jsonl

TARGET_RATIO = 0.9  # server throughput over direct encode at batch 32
HEALTH_TARGET_MS = 100.0  # /health p95 while the server is loaded
QUICKSTART_NEOBERT = {
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "max_length": 128,
}


def neobert_export(directory: Path) -> Path:
    """A NeoBERT of the quickstart's size saved as a sentence-transformers directory (built once)."""
    embedder = directory / "embedder"
    if not (embedder / "modules.json").exists():
        from sentence_transformers import SentenceTransformer

        from neoembed.pretrain import NeoBERTConfig, NeoBERTModel
        from neoembed.pretrain.tokenizer import load_tokenizer

        max_length = QUICKSTART_NEOBERT["max_length"]
        NeoBERTModel(NeoBERTConfig(**QUICKSTART_NEOBERT)).eval().save_pretrained(directory / "backbone")
        load_tokenizer(max_length=max_length).save_pretrained(directory / "backbone")
        SentenceTransformer(str(directory / "backbone"), device="cpu").save(str(embedder))
    return embedder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(model: str, threads: int, log_path: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    command = [sys.executable, "-c", "from neoembed.cli import main; main()", "serve", "--model", model]
    command += ["--port", str(port), "--threads", str(threads), "--truncate", "--log-level", "warning"]
    log = log_path.open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}; see {log_path}")
        try:
            if httpx.get(f"{base}/health").status_code == 200:
                return process, port
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    process.kill()
    raise RuntimeError(f"the server did not become healthy in 300 s; see {log_path}")


def _probe_health(base: str, latencies: list[float], done: threading.Event) -> None:
    with httpx.Client() as client:
        while not done.is_set():
            started = time.perf_counter()
            client.get(f"{base}/health").raise_for_status()
            latencies.append(time.perf_counter() - started)
            time.sleep(0.02)


def _drive(port: int, requests: list[bytes], clients: int) -> tuple[float, list[float]]:
    """Every request through `clients` keep-alive connections (`load.drive`); wall time and latencies."""
    with tqdm(total=len(requests), unit="req", desc="server", leave=False) as bar:
        return asyncio.run(load.drive("127.0.0.1", port, requests, clients, on_response=bar.update))


def _milliseconds(latencies: list[float], q: float) -> float:
    return float(np.percentile(latencies, q)) * 1000


def bench_model(
    model: str,
    inputs: list[str],
    *,
    texts_per_request: int,
    clients: int,
    repeats: int,
    threads: int,
    direct_batch_sizes: tuple[int, ...],
    health_requests: int,
    health_clients: int,
    label: str,
    out_dir: Path,
    log_path: Path,
) -> dict:
    """Direct encode vs the server for `model` (named `label` in the report): table rows and figures."""
    from neoembed.embedder import load_embedder

    embedder = load_embedder(model)
    # The server truncates as encode does (--truncate), so both sides embed the same tokens.
    tokens = sum(
        len(ids)
        for ids in embedder.tokenizer(inputs, truncation=True, max_length=embedder.max_seq_length)[
            "input_ids"
        ]
    )
    embedder.encode(inputs[:64])  # warm-up
    server, port = _start_server(model, threads, out_dir / f"server-{label}.log")
    base = f"http://127.0.0.1:{port}"
    requests = [
        load.post("127.0.0.1", port, "/v1/embeddings", {"input": inputs[i : i + texts_per_request],
                  "model": "bench", "encoding_format": "base64"})
        for i in range(0, len(inputs), texts_per_request)
    ]  # fmt: skip
    direct_s: dict[int, list[float]] = {size: [] for size in direct_batch_sizes}
    served, health = [], []
    try:
        _drive(port, requests[: 2 * clients], clients)  # warm-up: connections, first batches
        for round_ in range(repeats):
            for size in direct_batch_sizes:
                started = time.perf_counter()
                embedder.encode(inputs, batch_size=size, show_progress_bar=False)
                direct_s[size].append(time.perf_counter() - started)
                record = {"model": model, "round": round_, "path": f"encode batch {size}"}
                append_jsonl(log_path, {**record, "seconds": direct_s[size][-1]})
            wall, latencies = _drive(port, requests, clients)
            served.append((wall, latencies))
            append_jsonl(log_path, {"model": model, "round": round_, "path": "server", "seconds": wall})
        done = threading.Event()
        poller = threading.Thread(target=_probe_health, args=(base, health, done))
        poller.start()
        try:
            cycled = [requests[i % len(requests)] for i in range(health_requests)]
            _drive(port, cycled, health_clients)  # raises unless every request is answered 200
        finally:
            done.set()
            poller.join()
    finally:
        server.terminate()
        server.wait(timeout=120)

    best_direct = min(direct_s[direct_batch_sizes[0]])
    best_wall, latencies = min(served, key=lambda pair: pair[0])
    rows = [
        {
            "model": label,
            "path": f"model.encode (in-process, batch {size})",
            "texts/s": len(inputs) / min(times),
            "tokens/s": tokens / min(times),
            "ratio": best_direct / min(times),
        }
        for size, times in direct_s.items()
    ]
    rows.append(
        {
            "model": label,
            "path": f"neoembed serve, {clients} clients x {texts_per_request} texts/request",
            "texts/s": len(inputs) / best_wall,
            "tokens/s": tokens / best_wall,
            "ratio": best_direct / best_wall,
            "p50 ms": _milliseconds(latencies, 50),
            "p95 ms": _milliseconds(latencies, 95),
            "p99 ms": _milliseconds(latencies, 99),
            "health p95 ms": _milliseconds(health, 95),
        }
    )
    return {
        "model": model,
        "label": label,
        "tokens": tokens,
        "ratio": best_direct / best_wall,
        "health_p50_ms": _milliseconds(health, 50),
        "health_p95_ms": _milliseconds(health, 95),
        "health_probes": len(health),
        "rows": rows,
        "direct_s": {str(k): v for k, v in direct_s.items()},
        "server_s": [wall for wall, _ in served],
    }


def run(settings: ServeBench) -> dict:
    from neoembed.data.wordnet import load_synsets

    models, texts, texts_per_request = settings.models, settings.texts, settings.texts_per_request
    clients, repeats, threads, out_dir = settings.clients, settings.repeats, settings.threads, settings.out
    direct_batch_sizes = settings.direct_batch_sizes

    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "serve_log.jsonl"
    log_path.unlink(missing_ok=True)
    torch.set_num_threads(threads)
    inputs = [s.gloss for s in load_synsets()[:texts]]
    results = []
    for model in models:
        path = str(neobert_export(out_dir / "neobert")) if model == "neobert" else model
        label = Path(model).name if Path(model).exists() else model
        results.append(
            bench_model(
                path,
                inputs,
                texts_per_request=texts_per_request,
                clients=clients,
                repeats=repeats,
                threads=threads,
                direct_batch_sizes=direct_batch_sizes,
                health_requests=settings.health_requests,
                health_clients=settings.health_clients,
                label=label,
                out_dir=out_dir,
                log_path=log_path,
            )
        )
    rows = [row for result in results for row in result["rows"]]
    columns = ["model", "path", "texts/s", "tokens/s", "ratio", "p50 ms", "p95 ms", "p99 ms", "health p95 ms"]
    table = markdown_table(rows, columns)
    summary = "; ".join(
        f"{r['label']}: server/direct {r['ratio']:.2f} (target {TARGET_RATIO}), /health p95 "
        f"{r['health_p95_ms']:.0f} ms over {r['health_probes']} probes (target {HEALTH_TARGET_MS:.0f})"
        for r in results
    )
    described = {
        "models": list(models),
        "texts": len(inputs),
        "texts_per_request": texts_per_request,
        "clients": clients,
        "repeats": repeats,
        "threads": threads,
        "direct_batch_sizes": list(direct_batch_sizes),
        "health_requests": settings.health_requests,
        "health_clients": settings.health_clients,
        "load_average": os.getloadavg(),
    }
    markdown = (
        f"# neoembed bench serve\n\n{len(inputs)} WordNet glosses per round, {threads} torch threads on both "
        f"sides, fp32, best of {repeats} alternating rounds; ratio = throughput / model.encode at batch "
        f"{direct_batch_sizes[0]}; /health polled every 20 ms in a separate round of {settings.health_requests} "
        f"requests from {settings.health_clients} clients, all answered 200.\n\n{table}\n\n"
        f"{summary}\n"
    )
    payload = {
        "settings": described,
        "rows": rows,
        "results": [{k: v for k, v in r.items() if k != "rows"} for r in results],
    }
    json_path, md_path = write_report(out_dir, "serve", payload, markdown)
    return {"table": table, "summary": summary, "results": results, "json": json_path, "markdown": md_path}
