"""`neoembed bench openai`: `neoembed serve` on this machine's device answering the official openai client
under load, against direct `model.encode` at the same batch size.

`bench serve` drives the server with a light raw-HTTP load generator sending what the openai client sends;
this bench sends it through the client itself (`OpenAI(base_url=...).embeddings.create`, base64 vectors
decoded by the client), from `clients` threads with one client each, so what a user's code sees is measured:
texts/s, latency percentiles, and every response checked for one vector per text.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from neoembed.bench.report import Report, Table, WrittenReport, write_report
from neoembed.bench.serve import neobert_export, server_arguments, start_server, stop_server
from neoembed.bench.settings import OpenaiBench
from neoembed.extras import require


def client_round(port: int, model: str, requests: list[list[str]], clients: int) -> tuple[float, list[float]]:
    """(seconds, per-request latencies) of `requests` sent by `clients` threads, one openai client each."""
    openai = require("openai")
    local = threading.local()
    latencies: list[float] = []

    def send(texts: list[str]) -> None:
        if not hasattr(local, "client"):
            local.client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        start = time.perf_counter()
        response = local.client.embeddings.create(model=model, input=texts)
        latencies.append(time.perf_counter() - start)
        if len(response.data) != len(texts):
            raise RuntimeError(f"{len(texts)} texts sent, {len(response.data)} vectors back")

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, requests))
    return time.perf_counter() - start, latencies


def run(settings: OpenaiBench) -> WrittenReport:
    import torch

    from neoembed.data import load_synsets
    from neoembed.embedder import load_embedder
    from neoembed.precision import default_device

    device = default_device() if settings.device == "auto" else settings.device
    torch.set_num_threads(settings.threads)
    settings.out.mkdir(parents=True, exist_ok=True)
    model = str(neobert_export(settings.out / "neobert")) if settings.model == "neobert" else settings.model
    texts = [s.gloss for s in load_synsets()[: settings.texts]]
    per = settings.texts_per_request
    requests = [texts[i : i + per] for i in range(0, len(texts), per)]

    embedder = load_embedder(model, device=device)
    embedder.encode(texts[:64])  # warm-up
    start = time.perf_counter()
    embedder.encode(texts, batch_size=settings.batch_size, show_progress_bar=False)
    direct = time.perf_counter() - start
    del embedder

    arguments = server_arguments(settings.backend, model, None, device)
    process, port = start_server(arguments, settings.threads, settings.out / "server.log")
    try:
        client_round(port, model, requests[: settings.clients], settings.clients)  # warm-up
        seconds, latencies = client_round(port, model, requests, settings.clients)
    finally:
        stop_server(process)
    ratio = direct / seconds
    rows = [
        {"path": f"model.encode (in-process, batch {settings.batch_size})", "texts/s": len(texts) / direct},
        {
            "path": f"neoembed serve {settings.backend}, {settings.clients} openai clients x {per} texts",
            "texts/s": len(texts) / seconds,
            "ratio": ratio,
            "p50 ms": 1000 * float(np.percentile(latencies, 50)),
            "p95 ms": 1000 * float(np.percentile(latencies, 95)),
        },
    ]
    verdict = f"served through the openai client / direct encode = {ratio:.2f}x"
    verdict += f" ({'meets' if ratio >= 0.9 else 'MISSES'} the 0.9x target)"
    report = Report(
        name="openai",
        title="neoembed bench openai",
        intro=[f"{len(texts)} WordNet glosses on {device}, {settings.model}, {settings.backend}."],
        tables=[Table(rows, ["path", "texts/s", "ratio", "p50 ms", "p95 ms"])],
        verdicts=[verdict],
        payload={
            "settings": settings.model_dump(mode="json") | {"device": device},
            "rows": rows,
            "ratio": ratio,
        },
    )
    return write_report(report, settings.out)
