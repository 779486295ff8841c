"""`neoembed bench serve`: the HTTP server's throughput under concurrent clients vs `model.encode` in-process,
and how fast /health answers under a load of its own, for each model given (by default all-MiniLM-L6-v2 and
`neobert`, a NeoBERT of the quickstart's size: `neobert_export`; any other name loads as `serve --model` would).

The same texts (WordNet glosses) are embedded three ways, alternating for `repeats` rounds so machine noise
hits all alike: directly with `SentenceTransformer.encode` in this process, at each of `direct_batch_sizes`
(the fastest of them is the ratios' baseline: a server that batches across requests competes with encode at
its best batch, not at its default 32), and through `neoembed serve` in a subprocess by `clients` concurrent
clients each posting requests of `texts_per_request` texts, twice: through the official openai client
(`load.openai_round`, base64 by default, decoded by the client: what a user's code sees; the target's ratio)
and through `load.drive`, a light raw-HTTP load generator sending the same requests (the server's own
capacity, with little client CPU taken from it). The best round of each is compared; latency percentiles come
from the best round. The server runs in its own processes so clients and server do not share one interpreter
lock, as in deployment; both sides use the same number of torch threads and fp32.

/health is measured in a round of its own (`health_requests` requests from `health_clients` clients, every
one of which must be answered 200, while one more client polls /health every 20 ms), not during the
throughput rounds: on 2 cores a 50 Hz poller takes CPU from the model on the server side only (about 8% of
MiniLM's throughput, measured), which would make the comparison with in-process encode unfair.

With several `backends` (torch-fp32, torch-bf16, onnx-fp32, onnx-int8; see `bench.backends`), each model is
served once per backend (all on the CPU, direct encode too, when an ONNX backend is among them, as ONNX
Runtime runs there), all servers up at once and their rounds interleaved in rotating order; each server
row then also gives its throughput over the torch-fp32 server's and its fidelity: the vectors it serves for
a WordNet probe (1,024 glosses and their example-sentence queries) against in-process torch fp32 encode.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch
from tqdm.auto import tqdm

from neoembed.bench import backends as inference_backends, load
from neoembed.bench.load import client_processes, openai_round
from neoembed.bench.report import (
    Report,
    Row,
    Table,
    WrittenReport,
    percentile_ms,
    rotated,
    timed,
    write_report,
)
from neoembed.bench.serve_fairness import Fairness, fairness_round
from neoembed.bench.serve_faults import RESTART_TARGET_S, Faults, fault_round
from neoembed.bench.settings import ServeBench
from neoembed.errors import InputError
from neoembed.run_files import append_jsonl

TARGET_RATIO = 0.9  # server throughput through the openai client over direct encode at its best batch
HEALTH_TARGET_MS = 100.0  # /health p95 while the server is loaded
TARGET_BACKEND_SPEEDUP = 2.0  # the best backend's server over the torch-fp32 server
PROBE_SYNSETS = 1024


def quickstart_neobert() -> dict[str, Any]:
    """The NeoBERT shape of the quickstart's pretraining recipe (pretrain-cpu: 4 layers x 128, 128 tokens)."""
    from neoembed.packaged import resolve_recipe
    from neoembed.pretrain import PretrainSettings
    from neoembed.recipes import load_recipe

    return load_recipe(resolve_recipe("pretrain-cpu"), PretrainSettings).model.config


def neobert_export(directory: Path) -> Path:
    """A NeoBERT of the quickstart's size with random weights (speed does not depend on them) saved as a
    sentence-transformers directory (built once)."""
    embedder = directory / "embedder"
    if not (embedder / "modules.json").exists():
        from sentence_transformers import SentenceTransformer

        from neoembed.pretrain.neobert import NeoBERTConfig, NeoBERTModel, load_tokenizer

        config = NeoBERTConfig(**quickstart_neobert())
        NeoBERTModel(config).eval().save_pretrained(directory / "backbone")
        load_tokenizer(max_length=config.max_length).save_pretrained(directory / "backbone")
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
        onnx_file = inference_backends.ONNX_FILES[backend]
        return ["--model", str(export), "--backend", "onnx", "--onnx-file", onnx_file]
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


def resolve_model(name: str, out: Path) -> str:
    """What to load for a model name: `neobert` is the quickstart-size export made under `out`."""
    return str(neobert_export(out / "neobert")) if name == "neobert" else name


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


def _requests(port: int, texts: list[list[str]]) -> list[bytes]:
    """A request of each list of `texts`, for `load.drive`."""
    body = {"model": "bench", "encoding_format": "base64"}
    return [load.post("127.0.0.1", port, "/v1/embeddings", {"input": chunk, **body}) for chunk in texts]


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


Round = tuple[float, list[float]]  # wall seconds, request latencies: the fastest round is the least


@dataclass(frozen=True)
class Served:
    """One backend's server for one model: each round through the raw-HTTP clients and through the openai
    client, /health's latencies in the health round, the fairness round, the fault round, and the fidelity of
    what it serves."""

    rounds: list[Round]
    openai_rounds: list[Round]
    health: list[float]
    fairness: Fairness
    faults: Faults
    fidelity: dict[str, float]

    @property
    def best(self) -> Round:
        return min(self.rounds)

    @property
    def best_openai(self) -> Round:
        return min(self.openai_rounds)


@dataclass(frozen=True)
class ModelResult:
    """Direct encode and a server per backend for one model (`label` in the report)."""

    model: str
    label: str
    tokens: int  # of the inputs, as both sides truncate them
    direct_s: dict[int, list[float]]  # batch size -> seconds of each round
    served: dict[str, Served]

    @property
    def best_batch(self) -> int:
        """The batch size at which encode was fastest: the ratios' baseline."""
        return min(self.direct_s, key=lambda size: min(self.direct_s[size]))

    @property
    def best_direct(self) -> float:
        return min(self.direct_s[self.best_batch])

    def figures(self, backend: str) -> dict[str, Any]:
        """What the JSON keeps of a backend's server, and its row's figures beyond throughput."""
        served, wall = self.served[backend], self.served[backend].best[0]
        openai_wall, openai_latencies = served.best_openai
        figures = {"ratio": self.best_direct / wall, "openai_ratio": self.best_direct / openai_wall,
                   "openai_p95_ms": percentile_ms(openai_latencies, 95), "best_batch": self.best_batch,
                   "health_p50_ms": percentile_ms(served.health, 50),
                   "health_p95_ms": percentile_ms(served.health, 95), "health_probes": len(served.health),
                   "server_s": [w for w, _ in served.rounds], "openai_s": [w for w, _ in served.openai_rounds],
                   "fairness": served.fairness, "faults": served.faults, **served.fidelity}  # fmt: skip
        if inference_backends.REFERENCE in self.served:
            figures["vs_fp32_server"] = self.served[inference_backends.REFERENCE].best[0] / wall
        return figures

    def rows(self, settings: ServeBench, inputs: int) -> list[Row]:
        label = {"model": self.label}
        clients = f"{settings.clients} clients x {settings.texts_per_request} texts/request"
        rows = [
            Row({**label, "path": f"model.encode (in-process, batch {size})"},
                {"texts/s": inputs / min(times), "tokens/s": self.tokens / min(times),
                 "ratio": self.best_direct / min(times)})
            for size, times in self.direct_s.items()
        ]  # fmt: skip
        for backend, served in self.served.items():
            (wall, latencies), figures, faults = served.best_openai, self.figures(backend), served.faults
            rows.append(Row({**label, "path": f"neoembed serve {backend}, openai client, {clients}"}, {
                "texts/s": inputs / wall, "tokens/s": self.tokens / wall, "ratio": figures["openai_ratio"],
                **{f"p{q} ms": percentile_ms(latencies, q) for q in (50, 95, 99)},
            }))  # fmt: skip
            wall, latencies = served.best
            rows.append(Row({**label, "path": f"neoembed serve {backend}, raw HTTP, {clients}"}, {
                "texts/s": inputs / wall, "tokens/s": self.tokens / wall, "ratio": figures["ratio"],
                **({"vs fp32 server": figures["vs_fp32_server"]} if "vs_fp32_server" in figures else {}),
                **{f"p{q} ms": percentile_ms(latencies, q) for q in (50, 95, 99)},
                "health p95 ms": figures["health_p95_ms"],
                "small behind 2048 p95 ms": served.fairness.small_p95_ms,
                "killed -> ready s": max(faults.restart_s),
                "hung -> ready s": faults.hang_ready_s, "health p95 ms (faults)": faults.health_p95_ms,
                "worst cosine": served.fidelity["worst cosine"],
                "recall@10 change": served.fidelity["recall@10 change"],
            }))  # fmt: skip
        return rows

    def summary(self) -> str:
        """One line: each backend's ratio and /health p95, its fault round, and the best backend's speed-up."""
        parts = []
        for backend, served in self.served.items():
            f, faults = self.figures(backend), served.faults
            parts.append(
                f"{backend} through the openai client / encode at its best batch ({f['best_batch']}) "
                f"{f['openai_ratio']:.2f} (target {TARGET_RATIO}), p95 {f['openai_p95_ms']:.0f} ms; raw HTTP "
                f"clients {f['ratio']:.2f}; /health p95 "
                f"{f['health_p95_ms']:.0f} ms over {f['health_probes']} probes (target {HEALTH_TARGET_MS:.0f}); "
                f"killed -> ready in at most {max(faults.restart_s):.1f} s (target {RESTART_TARGET_S:.0f}), "
                f"hung -> 503 in {faults.hang_unready_s:.1f} s and ready in {faults.hang_ready_s:.1f} s, "
                f"/health p95 {faults.health_p95_ms:.0f} ms meanwhile; {served.fairness.line()}"
            )
        if len(self.served) > 1 and inference_backends.REFERENCE in self.served:
            # With the reference served, every backend has a speed-up against it.
            speedups: dict[str, float] = {b: self.figures(b)["vs_fp32_server"] for b in self.served}
            best = max(speedups, key=speedups.__getitem__)
            fidelity = self.served[best].fidelity
            parts.append(
                f"best backend {best}: {speedups[best]:.2f}x the torch-fp32 server (target "
                f"{TARGET_BACKEND_SPEEDUP}), worst cosine {fidelity['worst cosine']:.4f}, "
                f"recall@10 change {fidelity['recall@10 change']:+.4f}"
            )
        return f"{self.label}: " + "; ".join(parts)

    def json(self) -> dict[str, object]:
        return {"model": self.model, "label": self.label, "tokens": self.tokens,
                "backends": {b: self.figures(b) for b in self.served},
                "direct_s": {str(size): times for size, times in self.direct_s.items()}}  # fmt: skip


def bench_model(
    model: str,
    backends: Sequence[str],
    inputs: list[str],
    probe: inference_backends.Probe,
    settings: ServeBench,
    *,
    device: str,
    label: str,
    log_path: Path,
) -> ModelResult:
    """Direct encode vs a server per backend for `model`, with the fidelity of what each serves for `probe`."""
    from neoembed.compilation import compile_for_inference
    from neoembed.embedder import load_embedder

    embedder = load_embedder(model, device=device)
    compile_for_inference(embedder, "auto")  # like the servers: compiled on CUDA, eager on a CPU
    # The server truncates as encode does (--truncate), so both sides embed the same tokens.
    truncated = embedder.tokenizer(inputs, truncation=True, max_length=embedder.max_seq_length)
    tokens = sum(len(ids) for ids in truncated["input_ids"])
    embedder.encode(inputs[:64])  # warm-up
    reference = embedder.encode(probe.texts, show_progress_bar=False)
    servers: dict[str, tuple[subprocess.Popen, int]] = {}
    direct_s: dict[int, list[float]] = {size: [] for size in settings.direct_batch_sizes}
    rounds: dict[str, list[Round]] = {backend: [] for backend in backends}
    openai_rounds: dict[str, list[Round]] = {backend: [] for backend in backends}
    texts = [
        inputs[i : i + settings.texts_per_request] for i in range(0, len(inputs), settings.texts_per_request)
    ]
    processes = settings.openai_processes or client_processes()
    served: dict[str, Served] = {}
    try:
        onnx = any(backend in inference_backends.ONNX_FILES for backend in backends)
        export = inference_backends.onnx_export(model, settings.out / "export" / label) if onnx else None
        for backend in backends:
            log = settings.out / f"server-{label}-{backend}.log"
            servers[backend] = start_server(
                server_arguments(backend, model, export, device), settings.threads, log
            )
        requests = {b: _requests(port, texts) for b, (_, port) in servers.items()}
        for backend, (_, port) in servers.items():  # warm-up: connections, first batches
            _drive(port, requests[backend][: 2 * settings.clients], settings.clients)
        for round_ in range(settings.repeats):
            for size in settings.direct_batch_sizes:
                direct_s[size].append(
                    timed(partial(embedder.encode, inputs, batch_size=size, show_progress_bar=False))
                )
                append_jsonl(log_path, {"model": model, "round": round_, "path": f"encode batch {size}",
                                        "seconds": direct_s[size][-1]})  # fmt: skip
            for backend in rotated(backends, round_):
                port = servers[backend][1]
                rounds[backend].append(_drive(port, requests[backend], settings.clients))
                openai_rounds[backend].append(openai_round(port, model, texts, settings.clients, processes))
                append_jsonl(log_path, {"model": model, "round": round_, "path": f"server {backend}",
                                        "seconds": rounds[backend][-1][0],
                                        "openai_seconds": openai_rounds[backend][-1][0]})  # fmt: skip
        for backend, (process, port) in servers.items():
            health = _health_round(port, requests[backend], settings.health_requests, settings.health_clients)
            fidelity = inference_backends.fidelity(probe, reference, _served_vectors(port, probe.texts))
            fairness = fairness_round(port, inputs)
            faults = fault_round(process, port)  # last: it kills the inference process
            served[backend] = Served(
                rounds[backend], openai_rounds[backend], health, fairness, faults, fidelity
            )
    finally:
        for process, _ in servers.values():
            stop_server(process)
    return ModelResult(model, label, tokens, direct_s, served)


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
    results = [
        bench_model(resolve_model(model, out_dir), backends, inputs, probe, settings, device=device,
                    label=Path(model).name if Path(model).exists() else model, log_path=log_path)
        for model in settings.models
    ]  # fmt: skip
    rows = [row for result in results for row in result.rows(settings, len(inputs))]
    report = Report(
        name="serve",
        title="neoembed bench serve",
        intro=[
            f"{len(inputs)} WordNet glosses per round, {threads} threads on both sides, best of "
            f"{settings.repeats} rounds alternating between direct encode (torch fp32; compiled on CUDA, as the "
            "servers are) and each server, through the official openai client and through raw HTTP clients; ratio "
            "= throughput / model.encode at its fastest batch size of those timed; /health polled every 20 ms "
            f"in a separate round of {settings.health_requests} requests from {settings.health_clients} "
            "clients, all answered 200. Then the fairness round: one-text requests, one after another, while a "
            "2,048-input request of glosses joined to 160 characters runs (their p95). Then the fault round: the inference process killed twice and stopped "
            "once (SIGSTOP), /health polled every 10 ms until a new one is ready. Worst cosine and recall@10 "
            f"change: the served vectors of a WordNet probe ({PROBE_SYNSETS} glosses and their "
            "example-sentence queries) against in-process torch fp32."
        ],
        tables=[Table(rows)],
        verdicts=[result.summary() for result in results]
        + [f"{backend} skipped: {reason}" for backend, reason in skipped.items()],
        payload={
            "settings": {
                **settings.model_dump(mode="json"),
                "probe_synsets": PROBE_SYNSETS,
                "load_average": os.getloadavg(),
            },
            "rows": rows,
            "skipped": skipped,
            "results": [result.json() for result in results],
        },  # fmt: skip
    )
    return write_report(report, out_dir)
