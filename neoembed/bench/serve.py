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

With several `backends` (torch-fp32, torch-bf16, onnx-fp32, onnx-int8; see `bench.backends`), each model is
served once per backend (all on the CPU, direct encode too, when an ONNX backend is among them, as ONNX
Runtime runs there), all servers up at once and their rounds interleaved in rotating order; each server
row then also gives its throughput over the torch-fp32 server's and its fidelity: the vectors it serves for
a WordNet probe (1,024 glosses and their example-sentence queries) against in-process torch fp32 encode.

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

from neoembed.bench import backends as inference_backends, load
from neoembed.bench.report import Report, Table, WrittenReport, write_report
from neoembed.bench.serve_faults import RESTART_TARGET_S, fault_round
from neoembed.bench.settings import ServeBench
from neoembed.errors import InputError
from neoembed.run_files import append_jsonl

TARGET_RATIO = 0.9  # server throughput over direct encode at batch 32
HEALTH_TARGET_MS = 100.0  # /health p95 while the server is loaded
TARGET_BACKEND_SPEEDUP = 2.0  # the best backend's server over the torch-fp32 server
PROBE_SYNSETS = 1024
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

        from neoembed.pretrain.neobert import NeoBERTConfig, NeoBERTModel, load_tokenizer

        max_length = QUICKSTART_NEOBERT["max_length"]
        NeoBERTModel(NeoBERTConfig(**QUICKSTART_NEOBERT)).eval().save_pretrained(directory / "backbone")
        load_tokenizer(max_length=max_length).save_pretrained(directory / "backbone")
        SentenceTransformer(str(directory / "backbone"), device="cpu").save(str(embedder))
    return embedder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_arguments(backend: str, model: str, export: Path | None, device: str) -> list[str]:
    """The `neoembed serve` options that serve `model` on `backend`: torch on `device`, ONNX from the export
    directory `export` (on the CPU)."""
    if backend in inference_backends.ONNX_FILES:
        return [
            "--model",
            str(export),
            "--backend",
            "onnx",
            "--onnx-file",
            inference_backends.ONNX_FILES[backend],
        ]
    dtype = {"torch-fp32": "float32", "torch-bf16": "bfloat16"}[backend]
    return ["--model", model, "--dtype", dtype, "--device", device]


def start_server(arguments: list[str], threads: int, log_path: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    command = [sys.executable, "-c", "from neoembed.cli import main; main()", "serve", *arguments]
    command += ["--port", str(port), "--threads", str(threads), "--truncate", "--log-level", "warning"]
    with log_path.open("w") as log:  # the child writes to its own copy of the descriptor
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
    stop_server(process)
    raise RuntimeError(f"the server did not become healthy in 300 s; see {log_path}")


def stop_server(process: subprocess.Popen) -> None:
    """Terminate a server and wait for it; kill it if it has not exited within 120 s."""
    process.terminate()
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


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


def _requests(port: int, inputs: list[str], texts_per_request: int) -> list[bytes]:
    return [
        load.post("127.0.0.1", port, "/v1/embeddings", {"input": inputs[i : i + texts_per_request],
                  "model": "bench", "encoding_format": "base64"})
        for i in range(0, len(inputs), texts_per_request)
    ]  # fmt: skip


def _served_vectors(port: int, texts: list[str], chunk: int = 64) -> np.ndarray:
    """The server's embeddings of `texts`, in order."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
        rows = []
        for i in range(0, len(texts), chunk):
            response = client.post("/v1/embeddings", json={"input": texts[i : i + chunk], "model": "bench"})
            response.raise_for_status()
            rows += [item["embedding"] for item in sorted(response.json()["data"], key=lambda d: d["index"])]
    return np.array(rows, dtype=np.float32)


def _health_round(port: int, requests: list[bytes], count: int, clients: int) -> list[float]:
    """`count` requests from `clients` clients, every one answered 200, while one more polls /health."""
    latencies: list[float] = []
    done = threading.Event()
    poller = threading.Thread(target=_probe_health, args=(f"http://127.0.0.1:{port}", latencies, done))
    poller.start()
    try:
        _drive(port, [requests[i % len(requests)] for i in range(count)], clients)
    finally:
        done.set()
        poller.join()
    return latencies


def bench_model(
    model: str,
    backends: list[str],
    inputs: list[str],
    probe: inference_backends.Probe,
    settings: ServeBench,
    *,
    device: str,
    label: str,
    log_path: Path,
) -> dict:
    """Direct encode vs a server per backend for `model` (named `label` in the report), with the fidelity of
    what each server serves for `probe`: rows and figures."""
    from neoembed.embedder import load_embedder

    embedder = load_embedder(model, device=device)
    # The server truncates as encode does (--truncate), so both sides embed the same tokens.
    tokens = sum(
        len(ids)
        for ids in embedder.tokenizer(inputs, truncation=True, max_length=embedder.max_seq_length)[
            "input_ids"
        ]
    )
    embedder.encode(inputs[:64])  # warm-up
    reference = embedder.encode(probe.texts, show_progress_bar=False)
    servers: dict[str, tuple[subprocess.Popen, int]] = {}
    direct_s: dict[int, list[float]] = {size: [] for size in settings.direct_batch_sizes}
    served: dict[str, list[tuple[float, list[float]]]] = {backend: [] for backend in backends}
    health: dict[str, list[float]] = {}
    vectors: dict[str, np.ndarray] = {}
    faults: dict[str, dict] = {}
    try:
        onnx = any(backend in inference_backends.ONNX_FILES for backend in backends)
        export = inference_backends.onnx_export(model, settings.out / "export" / label) if onnx else None
        for backend in backends:
            arguments = server_arguments(backend, model, export, device)
            servers[backend] = start_server(
                arguments, settings.threads, settings.out / f"server-{label}-{backend}.log"
            )
        requests = {
            b: _requests(port, inputs, settings.texts_per_request) for b, (_, port) in servers.items()
        }
        for backend, (_, port) in servers.items():  # warm-up: connections, first batches
            _drive(port, requests[backend][: 2 * settings.clients], settings.clients)
        for round_ in range(settings.repeats):
            for size in settings.direct_batch_sizes:
                started = time.perf_counter()
                embedder.encode(inputs, batch_size=size, show_progress_bar=False)
                direct_s[size].append(time.perf_counter() - started)
                record = {"model": model, "round": round_, "path": f"encode batch {size}"}
                append_jsonl(log_path, {**record, "seconds": direct_s[size][-1]})
            for backend in backends[round_ % len(backends) :] + backends[: round_ % len(backends)]:
                wall, latencies = _drive(servers[backend][1], requests[backend], settings.clients)
                served[backend].append((wall, latencies))
                record = {"model": model, "round": round_, "path": f"server {backend}", "seconds": wall}
                append_jsonl(log_path, record)
        for backend, (_, port) in servers.items():
            health[backend] = _health_round(
                port, requests[backend], settings.health_requests, settings.health_clients
            )
            vectors[backend] = _served_vectors(port, probe.texts)
            faults[backend] = fault_round(servers[backend][0], port)  # last: it kills the inference process
    finally:
        for process, _ in servers.values():
            stop_server(process)

    best_direct = min(direct_s[settings.direct_batch_sizes[0]])
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
    best = {backend: min(served[backend], key=lambda pair: pair[0]) for backend in backends}
    reference_wall = best[inference_backends.REFERENCE][0] if inference_backends.REFERENCE in best else None
    figures = {}
    for backend, (best_wall, latencies) in best.items():
        figures[backend] = {
            "ratio": best_direct / best_wall,
            "health_p50_ms": _milliseconds(health[backend], 50),
            "health_p95_ms": _milliseconds(health[backend], 95),
            "health_probes": len(health[backend]),
            "server_s": [wall for wall, _ in served[backend]],
            "faults": faults[backend],
            **inference_backends.fidelity(probe, reference, vectors[backend]),
        }
        if reference_wall:
            figures[backend]["vs_fp32_server"] = reference_wall / best_wall
        rows.append(
            {
                "model": label,
                "path": f"neoembed serve {backend}, {settings.clients} clients x "
                f"{settings.texts_per_request} texts/request",
                "texts/s": len(inputs) / best_wall,
                "tokens/s": tokens / best_wall,
                "ratio": best_direct / best_wall,
                "p50 ms": _milliseconds(latencies, 50),
                "p95 ms": _milliseconds(latencies, 95),
                "p99 ms": _milliseconds(latencies, 99),
                "health p95 ms": figures[backend]["health_p95_ms"],
                "killed -> ready s": max(faults[backend]["restart_s"]),
                "hung -> ready s": faults[backend]["hang_ready_s"],
                "health p95 ms (faults)": faults[backend]["health_p95_ms"],
                "worst cosine": figures[backend]["worst cosine"],
                "recall@10 change": figures[backend]["recall@10 change"],
            }
        )
        if reference_wall:
            rows[-1]["vs fp32 server"] = figures[backend]["vs_fp32_server"]
    return {
        "model": model,
        "label": label,
        "tokens": tokens,
        "backends": figures,
        "rows": rows,
        "direct_s": {str(k): v for k, v in direct_s.items()},
    }


def _summary(result: dict) -> str:
    """One line per model: each backend's ratio and /health p95, and the best backend's speed-up."""
    parts = [
        f"{backend} server/direct {f['ratio']:.2f} (target {TARGET_RATIO}), /health p95 "
        f"{f['health_p95_ms']:.0f} ms over {f['health_probes']} probes (target {HEALTH_TARGET_MS:.0f}); "
        f"killed -> ready in at most {max(f['faults']['restart_s']):.1f} s (target {RESTART_TARGET_S:.0f}), "
        f"hung -> 503 in {f['faults']['hang_unready_s']:.1f} s and ready in {f['faults']['hang_ready_s']:.1f} s, "
        f"/health p95 {f['faults']['health_p95_ms']:.0f} ms meanwhile"
        for backend, f in result["backends"].items()
    ]
    speedups = {b: f["vs_fp32_server"] for b, f in result["backends"].items() if "vs_fp32_server" in f}
    if len(speedups) > 1:
        best = max(speedups, key=speedups.get)
        parts.append(
            f"best backend {best}: {speedups[best]:.2f}x the torch-fp32 server (target "
            f"{TARGET_BACKEND_SPEEDUP}), worst cosine {result['backends'][best]['worst cosine']:.4f}, "
            f"recall@10 change {result['backends'][best]['recall@10 change']:+.4f}"
        )
    return f"{result['label']}: " + "; ".join(parts)


def run(settings: ServeBench) -> WrittenReport:
    from neoembed.data import load_synsets
    from neoembed.precision import default_device

    # ONNX Runtime runs on the CPU, so with an ONNX backend every side runs there, torch servers included.
    onnx = any(b in inference_backends.ONNX_FILES for b in settings.backends)
    device = "cpu" if onnx else default_device()
    skipped = {b: reason for b in settings.backends if (reason := inference_backends.skip_reason(b, device))}
    backends = [b for b in settings.backends if b not in skipped]
    if not backends:
        raise InputError(f"no backend can run here: {skipped}", param="--backends")
    out_dir, threads = settings.out, settings.threads
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "serve_log.jsonl"
    log_path.unlink(missing_ok=True)
    torch.set_num_threads(threads)
    inputs = [s.gloss for s in load_synsets()[: settings.texts]]
    probe = inference_backends.wordnet_probe(PROBE_SYNSETS)  # the same for every model
    results = []
    for model in settings.models:
        path = str(neobert_export(out_dir / "neobert")) if model == "neobert" else model
        label = Path(model).name if Path(model).exists() else model
        results.append(
            bench_model(
                path,
                backends,
                inputs,
                probe,
                settings,
                device=device,
                label=label,
                log_path=log_path,
            )
        )
    rows = [row for result in results for row in result["rows"]]
    columns = ["model", "path", "texts/s", "tokens/s", "ratio", "vs fp32 server", "p50 ms", "p95 ms"]
    columns += ["p99 ms", "health p95 ms", "killed -> ready s", "hung -> ready s", "health p95 ms (faults)"]
    columns += ["worst cosine", "recall@10 change"]
    described = {
        **settings.model_dump(mode="json"),
        "probe_synsets": PROBE_SYNSETS,
        "load_average": os.getloadavg(),
    }
    report = Report(
        name="serve",
        title="neoembed bench serve",
        intro=[
            f"{len(inputs)} WordNet glosses per round, {threads} threads on both sides, best of "
            f"{settings.repeats} rounds alternating between direct encode (torch fp32) and each server; ratio = "
            f"throughput / model.encode at batch {settings.direct_batch_sizes[0]}; /health polled every 20 ms "
            f"in a separate round of {settings.health_requests} requests from {settings.health_clients} "
            "clients, all answered 200. Then the fault round: the inference process killed twice and stopped "
            "once (SIGSTOP), /health polled every 10 ms until a new one is ready. Worst cosine and recall@10 change: the served vectors of a WordNet "
            f"probe ({PROBE_SYNSETS} glosses and their example-sentence queries) against in-process torch fp32."
        ],
        tables=[Table(rows, [c for c in columns if any(c in row for row in rows)])],
        verdicts=[_summary(result) for result in results]
        + [f"{backend} skipped: {reason}" for backend, reason in skipped.items()],
        payload={
            "settings": described,
            "rows": rows,
            "skipped": skipped,
            "results": [{k: v for k, v in r.items() if k != "rows"} for r in results],
        },
    )
    return write_report(report, out_dir)
