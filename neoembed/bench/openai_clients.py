"""`neoembed bench openai`: `neoembed serve` on this machine's device answering the official openai client
under load, against direct `model.encode` at the same batch size.

`bench serve` drives the server with a light raw-HTTP load generator sending what the openai client sends;
this bench sends it through the client itself (`load.openai_round`: `OpenAI(base_url=...).embeddings.create`,
base64 vectors decoded by the client, from `clients` threads with one client each, over `processes`
processes), so what a user's code sees is measured: texts/s, latency percentiles, and every response checked
for one vector per text. `bench serve` now has this round too, against encode at its best batch size.
"""

from __future__ import annotations

from neoembed.bench.load import client_processes, openai_round
from neoembed.bench.report import Report, Row, Table, WrittenReport, meets, percentile_ms, timed, write_report
from neoembed.bench.serve import resolve_model, server_arguments, start_server, stop_server
from neoembed.bench.settings import OpenaiBench, resolve_device


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
        processes = settings.processes or client_processes()
        seconds, latencies = openai_round(port, model, requests, settings.clients, processes)
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
