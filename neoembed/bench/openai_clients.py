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

from neoembed.bench.report import Report, Row, Table, WrittenReport, meets, percentile_ms, timed, write_report
from neoembed.bench.serve import resolve_model, server_arguments, start_server, stop_server
from neoembed.bench.settings import OpenaiBench, resolve_device
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

    device = resolve_device(settings.device)
    torch.set_num_threads(settings.threads)
    settings.out.mkdir(parents=True, exist_ok=True)
    model = resolve_model(settings.model, settings.out)
    texts = [s.gloss for s in load_synsets()[: settings.texts]]
    per = settings.texts_per_request
    requests = [texts[i : i + per] for i in range(0, len(texts), per)]

    embedder = load_embedder(model, device=device)
    embedder.encode(texts[:64])  # warm-up
    direct = timed(lambda: embedder.encode(texts, batch_size=settings.batch_size, show_progress_bar=False))
    embedder = None  # its memory back before the server loads the model again

    arguments = server_arguments(settings.backend, model, None, device)
    process, port = start_server(arguments, settings.threads, settings.out / "server.log")
    try:
        client_round(port, model, requests[: settings.clients], settings.clients)  # warm-up
        seconds, latencies = client_round(port, model, requests, settings.clients)
    finally:
        stop_server(process)
    ratio = direct / seconds
    served = f"neoembed serve {settings.backend}, {settings.clients} openai clients x {per} texts"
    rows = [
        Row({"path": f"model.encode (in-process, batch {settings.batch_size})"},
            {"texts/s": len(texts) / direct}),
        Row({"path": served}, {"texts/s": len(texts) / seconds, "ratio": ratio,
                               **{f"p{q} ms": percentile_ms(latencies, q) for q in (50, 95)}}),
    ]  # fmt: skip
    report = Report(
        name="openai",
        title="neoembed bench openai",
        intro=[f"{len(texts)} WordNet glosses on {device}, {settings.model}, {settings.backend}."],
        tables=[Table(rows)],
        verdicts=[
            f"served through the openai client / direct encode = {ratio:.2f}x ({meets(ratio >= 0.9)} 0.9x)"
        ],
        payload={
            "settings": settings.model_dump(mode="json") | {"device": device},
            "rows": rows,
            "ratio": ratio,
        },
    )
    return write_report(report, settings.out)
