"""`neoembed search`: query an index directory and print ranked results."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from neoembed.cli.index import Threads, setup


def search(
    query: Annotated[
        list[str], typer.Argument(help="Query text; several queries are searched in one batch.")
    ],
    index: Annotated[Path, typer.Option(help="Index directory.")],
    k: Annotated[int, typer.Option("-k", "--k", help="Results per query.")] = 10,
    model: Annotated[
        str | None, typer.Option(help="Query embedder (default: the index's; must match it).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per query.")] = False,
    threads: Threads = None,
) -> None:
    """Search an index with text queries: rank, score, id and text of the top-k documents."""
    setup(threads)
    from neoembed.index import load_index

    searcher = load_index(index, model=model, threads=threads)
    for text, hits in zip(query, searcher.search_batch(query, k)):
        if as_json:
            typer.echo(json.dumps({"query": text, "hits": [asdict(h) for h in hits]}))
            continue
        typer.echo(f"query: {text}")
        for hit in hits:
            typer.echo(f"{hit.rank:>3}  {hit.score:.4f}  {hit.id}  {hit.text}")
