"""`neoembed index build|add|rebuild|export`: make, grow, re-index and export FAISS index directories."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Build, extend and export FAISS index directories.", no_args_is_help=True)

Corpus = Annotated[
    list[str],
    typer.Option(
        "--corpus", help="A .jsonl/.parquet/.txt file, a directory of them, or 'wordnet'; repeat for several."
    ),
]
IndexDir = Annotated[Path, typer.Argument(help="Index directory.")]
Threads = Annotated[
    int | None, typer.Option(min=1, help="faiss/torch threads (default: all CPUs this process may use).")
]
BatchSize = Annotated[int, typer.Option(min=1, help="Embedding batch size.")]
TuneQueries = Annotated[int, typer.Option(min=1, help="Corpus documents used as held-out tuning queries.")]
IdField = Annotated[str, typer.Option(help="Field holding the document id.")]
TextField = Annotated[str, typer.Option(help="Field holding the document text.")]


def setup(threads: int | None = None) -> None:
    """Show the index package's progress lines, and set torch threads."""
    logging.basicConfig(format="%(message)s")
    logging.getLogger("neoembed").setLevel(logging.INFO)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def _print_summary(manifest, directory: Path) -> None:
    t = manifest.tuning
    params = ", ".join(f"{k}={v}" for k, v in manifest.search_params.items()) or "exact"
    typer.echo(
        f"{directory}: {manifest.ntotal} documents, {manifest.factory} ({params}), "
        f"recall@10 {t.recall_at_10:.3f} on {t.queries} held-out queries, "
        f"{t.qps_batch:.0f} QPS batch / {t.qps_single:.0f} QPS single-query "
        f"(exact: {t.exact_qps_batch:.0f} QPS batch) with {t.threads} threads"
    )


@app.command()
def build(
    corpus: Corpus,
    out: Annotated[Path, typer.Option(help="Index directory to create (an unfinished build there resumes).")],
    model: Annotated[str, typer.Option(help="Embedder: directory, hub id, or 'minilm'.")] = "minilm",
    factory: Annotated[
        str, typer.Option(help="'auto' (by corpus size and memory) or a FAISS factory string.")
    ] = "auto",
    target_recall: Annotated[float, typer.Option(help="recall@10 against exact search to reach.")] = 0.95,
    metric: Annotated[str, typer.Option(help="cosine (normalised, inner product), ip or l2.")] = "cosine",
    memory_gb: Annotated[
        float | None, typer.Option(help="Memory for the index (default: half of available).")
    ] = None,
    batch_size: BatchSize = 64,
    tune_queries: TuneQueries = 1000,
    id_field: IdField = "id",
    text_field: TextField = "text",
    threads: Threads = None,
) -> None:
    """Embed a corpus, choose and train a FAISS index, tune it to the target recall, and save it."""
    setup(threads)
    from neoembed.index import build_index

    memory = None if memory_gb is None else int(memory_gb * 2**30)
    manifest = build_index(
        corpus, out, model=model, factory=factory, target_recall=target_recall, metric=metric,
        batch_size=batch_size, threads=threads, memory_bytes=memory, tune_queries=tune_queries,
        id_field=id_field, text_field=text_field,
    )  # fmt: skip
    _print_summary(manifest, out)


@app.command()
def add(
    index: IndexDir,
    corpus: Corpus,
    model: Annotated[str | None, typer.Option(help="Embedder (default: the index's; must match it).")] = None,
    batch_size: BatchSize = 64,
    tune_queries: TuneQueries = 1000,
    id_field: IdField = "id",
    text_field: TextField = "text",
    threads: Threads = None,
) -> None:
    """Embed and append documents to an index, then re-tune and re-measure it (an interrupted add resumes)."""
    setup(threads)
    from neoembed.index import add_documents

    manifest = add_documents(
        index, corpus, model=model, batch_size=batch_size, threads=threads, tune_queries=tune_queries,
        id_field=id_field, text_field=text_field,
    )  # fmt: skip
    _print_summary(manifest, index)


@app.command()
def rebuild(
    index: IndexDir,
    factory: Annotated[str, typer.Option(help="'auto' or a FAISS factory string.")] = "auto",
    target_recall: Annotated[
        float | None, typer.Option(help="recall@10 to reach (default: the index's).")
    ] = None,
    memory_gb: Annotated[
        float | None, typer.Option(help="Memory for the index (default: half of available).")
    ] = None,
    tune_queries: TuneQueries = 1000,
    threads: Threads = None,
) -> None:
    """Rebuild the FAISS index from the stored vectors with another factory or target; no re-embedding."""
    setup(threads)
    from neoembed.index import rebuild_index

    memory = None if memory_gb is None else int(memory_gb * 2**30)
    manifest = rebuild_index(
        index, factory=factory, target_recall=target_recall, threads=threads, memory_bytes=memory,
        tune_queries=tune_queries,
    )  # fmt: skip
    _print_summary(manifest, index)


@app.command()
def export(
    index: IndexDir,
    out: Annotated[Path, typer.Option(help="File to write.")],
    format: Annotated[
        str, typer.Option(help="Export format: parquet (id, text, metadata, vector).")
    ] = "parquet",
) -> None:
    """Export ids, texts, metadata and vectors for a vector database (Milvus, Qdrant, ...) to ingest."""
    from neoembed.index import export_index

    typer.echo(f"wrote {export_index(index, out, format=format)}")
