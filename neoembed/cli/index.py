"""`neoembed index build|add|rebuild|export`: make, grow, re-index and export FAISS index directories.

The options of each verb are the fields of its settings in `neoembed.index.settings`; the corpus and the
directories are the call's subjects, declared here.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from neoembed.cli.options import options_from
from neoembed.index import AddSettings, BuildSettings, ExportSettings, RebuildSettings

app = typer.Typer(help="Build, extend and export FAISS index directories.", no_args_is_help=True)

Corpus = Annotated[
    list[str],
    typer.Option(
        "--corpus", help="A .jsonl/.parquet/.txt file, a directory of them, or 'wordnet'; repeat for several."
    ),
]
IndexDir = Annotated[Path, typer.Argument(help="Index directory.")]
# Library-only fields: the command line keeps their defaults.
LIBRARY_ONLY = ("seed",)


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
@options_from(BuildSettings, exclude=LIBRARY_ONLY)
def build(
    settings: BuildSettings,
    corpus: Corpus,
    out: Annotated[Path, typer.Option(help="Index directory to create (an unfinished build there resumes).")],
) -> None:
    """Embed a corpus, choose and train a FAISS index, tune it to the target recall, and save it."""
    setup(settings.threads)
    from neoembed.index import build_index

    _print_summary(build_index(corpus, out, settings), out)


@app.command()
@options_from(AddSettings, exclude=LIBRARY_ONLY)
def add(settings: AddSettings, index: IndexDir, corpus: Corpus) -> None:
    """Embed and append documents to an index, then re-tune and re-measure it (an interrupted add resumes)."""
    setup(settings.threads)
    from neoembed.index import add_documents

    _print_summary(add_documents(index, corpus, settings), index)


@app.command()
@options_from(RebuildSettings, exclude=LIBRARY_ONLY)
def rebuild(settings: RebuildSettings, index: IndexDir) -> None:
    """Rebuild the FAISS index from the stored vectors with another factory or target; no re-embedding."""
    setup(settings.threads)
    from neoembed.index import rebuild_index

    _print_summary(rebuild_index(index, settings), index)


@app.command()
@options_from(ExportSettings)
def export(
    settings: ExportSettings, index: IndexDir, out: Annotated[Path, typer.Option(help="File to write.")]
) -> None:
    """Export ids, texts, metadata and vectors for a vector database (Milvus, Qdrant, ...) to ingest."""
    from neoembed.index import export_index

    typer.echo(f"wrote {export_index(index, out, settings)}")
