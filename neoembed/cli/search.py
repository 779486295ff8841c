"""`neoembed search`: query an index directory and print ranked results."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from neoembed.cli.index import setup
from neoembed.cli.options import Flag, options_from
from neoembed.index import SearchSettings


# mmap is left to library callers: the command line always memory-maps the index.
@options_from(SearchSettings, flags=[Flag("k", ("--k", "-k"))], exclude=("mmap",))
def search(
    settings: SearchSettings,
    query: Annotated[
        list[str], typer.Argument(help="Query text; several queries are searched in one batch.")
    ],
    index: Annotated[Path, typer.Option(help="Index directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per query.")] = False,
) -> None:
    """Search an index with text queries: rank, score, id and text of the top-k documents."""
    setup(settings.threads)
    from neoembed.index import load_index

    searcher = load_index(index, settings)
    for text, hits in zip(query, searcher.search_batch(query)):
        if as_json:
            typer.echo(json.dumps({"query": text, "hits": [asdict(h) for h in hits]}))
            continue
        typer.echo(f"query: {text}")
        for hit in hits:
            typer.echo(f"{hit.rank:>3}  {hit.score:.4f}  {hit.id}  {hit.text}")
