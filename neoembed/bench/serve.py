"""`neoembed bench serve`: the HTTP server's throughput under concurrent clients vs `model.encode` in-process,
for each model given (by default all-MiniLM-L6-v2 and `neobert`, a NeoBERT of the quickstart's size:
`neobert_export`; any other name loads as `serve --model` would). The report's intro says what each round
measures; what follows is why it is measured so.

Direct encode is timed at each of `direct_batch_sizes` and the fastest is the ratios' baseline: a server that
batches across requests competes with encode at its best batch, not at its default 32. The server is driven
twice a round: through the official openai client (`load.openai_round`, base64 decoded by the client: what a
user's code sees; the target's ratio) and through `load.drive`, a light raw-HTTP load generator (the server's
own capacity, with little client CPU taken from it). The server runs in its own processes so clients and
server do not share one interpreter lock, as in deployment. Rounds alternate so machine noise hits all alike.

/health is measured in a round of its own, not during the throughput rounds: on 2 cores a 50 Hz poller takes
CPU from the model on the server side only (about 8% of MiniLM's throughput, measured), which would make the
comparison with in-process encode unfair. With several `backends` (see `bench.backends`) all servers are up
at once, their rounds interleaved in rotating order, and all run on the CPU when an ONNX backend is among them,
as ONNX Runtime runs there.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch
from tqdm.auto import tqdm

from neoembed.bench import backends as inference_backends, load
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
from neoembed.precision import default_device
from neoembed.run_files import append_jsonl

TARGET_RATIO = 0.9  # server throughput through the openai client over direct encode at its best batch
HEALTH_TARGET_MS = 100.0  # /health p95 while the server is loaded
TARGET_BACKEND_SPEEDUP = 2.0  # the best backend's server over the torch-fp32 server
PROBE_SYNSETS = 1024
HOST = "127.0.0.1"
LOG_FILE = "serve_log.jsonl"


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


def server_arguments(backend: str, model: str, export: Path | None, device: str) -> list[str]:
    """The `neoembed serve` options that serve `model` on `backend`: torch on `device`, ONNX from the export
    directory `export` (on the CPU)."""
    if backend in inference_backends.ONNX_FILES:
        onnx_file = inference_backends.ONNX_FILES[backend]
        return ["--model", str(export), "--backend", "onnx", "--onnx-file", onnx_file]
    dtype = {"torch-fp32": "float32", "torch-bf16": "bfloat16"}[backend]
    return ["--model", model, "--dtype", dtype, "--device", device]


@contextmanager
def running_server(
    arguments: list[str], threads: int, log_path: Path
) -> Iterator[tuple[subprocess.Popen, int]]:
    """`neoembed serve` with `arguments` on a free loopback port, once healthy: (its process, its port).
    Stopped on leaving: terminated, killed if it has not exited within 120 s."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-c", "from neoembed.cli import main; main()", "serve", *arguments]
    command += ["--port", str(port), "--threads", str(threads), "--truncate", "--log-level", "warning"]
    with log_path.open("w") as log:  # the child writes to its own copy of the descriptor
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not _healthy(process, port, log_path):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not become healthy in 300 s; see {log_path}")
            time.sleep(0.25)
        yield process, port
    finally:
        process.terminate()
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _healthy(process: subprocess.Popen, port: int, log_path: Path) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"the server exited with status {process.returncode}; see {log_path}")
    with suppress(httpx.TransportError):
        return httpx.get(f"http://{HOST}:{port}/health").status_code == 200
    return False


def _requests(port: int, texts: list[list[str]]) -> list[bytes]:
    """A request of each list of `texts`, for `load.drive`."""
    body = {"model": "bench", "encoding_format": "base64"}
    return [load.post(HOST, port, "/v1/embeddings", {"input": chunk, **body}) for chunk in texts]


def _drive(port: int, requests: list[bytes], clients: int) -> tuple[float, list[float]]:
    """Every request through `clients` keep-alive connections (`load.drive`); wall time and latencies."""
    with tqdm(total=len(requests), unit="req", desc="server", leave=False) as bar:
        return asyncio.run(load.drive(HOST, port, requests, clients, on_response=bar.update))


def _served_vectors(port: int, texts: list[str], chunk: int = 64) -> np.ndarray:
    """The server's embeddings of `texts`, in order."""
    with httpx.Client(base_url=f"http://{HOST}:{port}", timeout=300) as client:
        rows = []
        for i in range(0, len(texts), chunk):
            response = client.post("/v1/embeddings", json={"input": texts[i : i + chunk], "model": "bench"})
            response.raise_for_status()
            rows += [item["embedding"] for item in sorted(response.json()["data"], key=lambda d: d["index"])]
    return np.array(rows, dtype=np.float32)


def _health_round(port: int, requests: list[bytes], count: int, clients: int) -> list[float]:
    """/health's latencies while `count` requests from `clients` clients run, every one answered 200: one more
    client polls it every 20 ms."""
    latencies: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=f"http://{HOST}:{port}") as client:
            while not done.is_set():
                started = time.perf_counter()
                client.get("/health").raise_for_status()
                latencies.append(time.perf_counter() - started)
                time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        _drive(port, [requests[i % len(requests)] for i in range(count)], clients)
    finally:
        done.set()
        poller.join()
    return latencies


Round = tuple[float, list[float]]  # wall seconds, request latencies: the fastest round is the least
Servers = dict[str, tuple[subprocess.Popen, int]]  # backend -> (process, port)


@dataclass(frozen=True)
class Served:
    """One backend's server for one model: each round through the raw-HTTP clients and through the openai
    client, /health's latencies in the health round, the fairness and fault rounds, the fidelity of what it
    serves."""

    rounds: list[Round]
    openai_rounds: list[Round]
    health: list[float]
    fairness: Fairness
    faults: Faults
    fidelity: dict[str, float]


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
        served = self.served[backend]
        (wall, _), (openai_wall, openai_latencies) = min(served.rounds), min(served.openai_rounds)
        figures = {
            "ratio": self.best_direct / wall,
            "openai_ratio": self.best_direct / openai_wall,
            "openai_p95_ms": percentile_ms(openai_latencies, 95),
            "best_batch": self.best_batch,
            "health_p50_ms": percentile_ms(served.health, 50),
            "health_p95_ms": percentile_ms(served.health, 95),
            "health_probes": len(served.health),
            "server_s": [w for w, _ in served.rounds],
            "openai_s": [w for w, _ in served.openai_rounds],
            "fairness": served.fairness,
            "faults": served.faults,
            **served.fidelity,
        }
        if inference_backends.REFERENCE in self.served:
            figures["vs_fp32_server"] = min(self.served[inference_backends.REFERENCE].rounds)[0] / wall
        return figures

    def rows(self, settings: ServeBench, inputs: int) -> list[Row]:
        def row(path: str, seconds: float, latencies: list[float] | None = None, **more: float) -> Row:
            speed = {"texts/s": inputs / seconds, "tokens/s": self.tokens / seconds}
            speed |= {"ratio": self.best_direct / seconds, **more}
            if latencies is not None:
                speed |= {f"p{q} ms": percentile_ms(latencies, q) for q in (50, 95, 99)}
            return Row({"model": self.label, "path": path}, speed)

        rows = [row(f"model.encode (in-process, batch {b})", min(s)) for b, s in self.direct_s.items()]
        clients = f"{settings.clients} clients x {settings.texts_per_request} texts/request"
        for backend, served in self.served.items():
            rows.append(
                row(f"neoembed serve {backend}, openai client, {clients}", *min(served.openai_rounds))
            )
            figures, faults = self.figures(backend), served.faults
            vs = {"vs fp32 server": figures["vs_fp32_server"]} if "vs_fp32_server" in figures else {}
            raw = row(f"neoembed serve {backend}, raw HTTP, {clients}", *min(served.rounds), **vs)
            rounds = {
                "health p95 ms": figures["health_p95_ms"],
                "small behind 2048 p95 ms": served.fairness.small_p95_ms,
                "killed -> ready s": max(faults.restart_s),
                "hung -> ready s": faults.hang_ready_s,
                "health p95 ms (faults)": faults.health_p95_ms,
                "worst cosine": served.fidelity["worst cosine"],
                "recall@10 change": served.fidelity["recall@10 change"],
            }
            rows.append(raw.adding(rounds))
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
        backends = {b: self.figures(b) for b in self.served}
        direct_s = {str(size): times for size, times in self.direct_s.items()}
        return dict(
            model=self.model, label=self.label, tokens=self.tokens, backends=backends, direct_s=direct_s
        )


def resolve_model(name: str, out: Path) -> str:
    """What to load for a model name: `neobert` is the quickstart-size export made under `out`."""
    return str(neobert_export(out / "neobert")) if name == "neobert" else name


def onnx_among(backends: Sequence[str]) -> bool:
    return any(b in inference_backends.ONNX_FILES for b in backends)


def serving_device(backends: Sequence[str]) -> str:
    """ONNX Runtime runs on the CPU, so with an ONNX backend every side runs there, torch servers included."""
    return "cpu" if onnx_among(backends) else default_device()


def bench_model(
    name: str,
    backends: Sequence[str],
    inputs: list[str],
    probe: inference_backends.Probe,
    settings: ServeBench,
) -> ModelResult:
    """Direct encode vs a server per backend for `name`, with the fidelity of what each serves for `probe`."""
    from neoembed.compilation import compile_for_inference
    from neoembed.embedder import load_embedder

    model, label = resolve_model(name, settings.out), Path(name).name if Path(name).exists() else name
    onnx, device = onnx_among(backends), serving_device(backends)
    embedder = load_embedder(model, device=device)
    compile_for_inference(embedder, "auto")  # like the servers: compiled on CUDA, eager on a CPU
    # The server truncates as encode does (--truncate), so both sides embed the same tokens.
    truncated = embedder.tokenizer(inputs, truncation=True, max_length=embedder.max_seq_length)
    tokens = sum(len(ids) for ids in truncated["input_ids"])
    embedder.encode(inputs[:64])  # warm-up
    reference = embedder.encode(probe.texts, show_progress_bar=False)
    texts = [
        inputs[i : i + settings.texts_per_request] for i in range(0, len(inputs), settings.texts_per_request)
    ]
    export = inference_backends.onnx_export(model, settings.out / "export" / label) if onnx else None
    with ExitStack() as stack:
        servers: Servers = {}
        for backend in backends:
            arguments = server_arguments(backend, model, export, device)
            log = settings.out / f"server-{label}-{backend}.log"
            servers[backend] = stack.enter_context(running_server(arguments, settings.threads, log))
        encode = partial(embedder.encode, inputs, show_progress_bar=False)
        direct_s, rounds = _throughput_rounds(encode, model, servers, texts, settings)
        served = {}
        for backend, (process, port) in servers.items():
            requests = _requests(port, texts)
            health = _health_round(port, requests, settings.health_requests, settings.health_clients)
            fidelity = inference_backends.fidelity(probe, reference, _served_vectors(port, probe.texts))
            fairness = fairness_round(port, inputs)
            faults = fault_round(process, port)  # last: it kills the inference process
            served[backend] = Served(*rounds[backend], health, fairness, faults, fidelity)
    return ModelResult(model, label, tokens, direct_s, served)


def _throughput_rounds(
    encode: Callable[..., Any], model: str, servers: Servers, texts: list[list[str]], settings: ServeBench
) -> tuple[dict[int, list[float]], dict[str, tuple[list[Round], list[Round]]]]:
    """`repeats` rounds, each logged: encode at each batch size, then each server in rotating order through the
    raw-HTTP clients and through the openai client. Encode's seconds by batch size, each server's rounds."""
    clients, processes = settings.clients, settings.openai_processes or load.client_processes()
    log_path = settings.out / LOG_FILE
    requests = {backend: _requests(port, texts) for backend, (_, port) in servers.items()}
    for backend, (_, port) in servers.items():  # warm-up: connections, first batches
        _drive(port, requests[backend][: 2 * clients], clients)
    direct_s: dict[int, list[float]] = {size: [] for size in settings.direct_batch_sizes}
    rounds: dict[str, tuple[list[Round], list[Round]]] = {backend: ([], []) for backend in servers}
    for round_ in range(settings.repeats):
        log = {"model": model, "round": round_}
        for size, times in direct_s.items():
            times.append(timed(partial(encode, batch_size=size)))
            append_jsonl(log_path, {**log, "path": f"encode batch {size}", "seconds": times[-1]})
        for backend in rotated(list(servers), round_):
            (raw, openai), port = rounds[backend], servers[backend][1]
            raw.append(_drive(port, requests[backend], clients))
            openai.append(load.openai_round(port, model, texts, clients, processes))
            seconds = {"seconds": raw[-1][0], "openai_seconds": openai[-1][0]}
            append_jsonl(log_path, {**log, "path": f"server {backend}", **seconds})
    return direct_s, rounds


def run(settings: ServeBench) -> WrittenReport:
    from neoembed.data import load_synsets

    device = serving_device(settings.backends)
    skipped = {b: reason for b in settings.backends if (reason := inference_backends.skip_reason(b, device))}
    backends = [b for b in settings.backends if b not in skipped]
    if not backends:
        raise InputError(f"no backend can run here: {skipped}", param="--backends")
    settings.out.mkdir(parents=True, exist_ok=True)
    (settings.out / LOG_FILE).unlink(missing_ok=True)
    torch.set_num_threads(settings.threads)
    inputs = [s.gloss for s in load_synsets()[: settings.texts]]
    probe = inference_backends.wordnet_probe(PROBE_SYNSETS)  # the same for every model
    results = [bench_model(model, backends, inputs, probe, settings) for model in settings.models]
    rows = [row for result in results for row in result.rows(settings, len(inputs))]
    report = Report(
        name="serve",
        title="neoembed bench serve",
        intro=[
            f"{len(inputs)} WordNet glosses per round, {settings.threads} threads on both sides, best of "
            f"{settings.repeats} rounds alternating between direct encode (torch fp32; compiled on CUDA, as the "
            "servers are) and each server, through the official openai client and through raw HTTP clients; ratio "
            "= throughput / model.encode at its fastest batch size of those timed; /health polled every 20 ms "
            f"in a separate round of {settings.health_requests} requests from {settings.health_clients} "
            "clients, all answered 200. Then the fairness round: one-text requests, one after another, while a "
            "2,048-input request of glosses joined to 160 characters runs (their p95). Then the fault round: the "
            "inference process killed twice and stopped once (SIGSTOP), /health polled every 10 ms until a new "
            "one is ready. Worst cosine and recall@10 change: the served vectors of a WordNet probe "
            f"({PROBE_SYNSETS} glosses and their example-sentence queries) against in-process torch fp32."
        ],
        tables=[Table(rows)],
        verdicts=[result.summary() for result in results]
        + [f"{b} skipped: {why}" for b, why in skipped.items()],
        payload={
            "settings": settings.model_dump(mode="json")
            | {"probe_synsets": PROBE_SYNSETS, "load_average": os.getloadavg()},
            "rows": rows,
            "skipped": skipped,
            "results": [result.json() for result in results],
        },
    )
    return write_report(report, settings.out)
