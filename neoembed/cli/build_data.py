"""`neoembed build-data`: build the contrastive dataset (query, positive, negatives) from data manifests."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from neoembed.cli.options import Flag, options_from
from neoembed.data import BuildConfig, RescoreConfig, build, load_manifests


@options_from(
    BuildConfig,
    flags=[
        Flag("pairs", ("--from",)),
        Flag("mining.dtype", ("--teacher-dtype",)),
        *(
            Flag(f"mining.rescore.{name}", (f"--rescore-{name.replace('_', '-')}",))
            for name in RescoreConfig.model_fields
        ),
    ],
    exclude=("mining.chunk_rows",),
    # The command line builds the embedded WordNet set at a CPU-friendly size unless told otherwise; the
    # library's defaults (every manifest, every row) suit callers that pass their own manifests, and your
    # own pairs (--from), which are read whole.
    cli_defaults={"sources": ["wordnet"], "max_rows": 10000},
    cli_defaults_yield_to="pairs",
)
def build_data(
    settings: BuildConfig,
    merge_stats: Annotated[
        bool, typer.Option("--merge-stats", help="Only merge stats of finished shards.")
    ] = False,
    check: Annotated[bool, typer.Option("--check", help="Only validate the manifests and exit.")] = False,
) -> None:
    """Build parquet shards of (query, positive, negatives, source) with hard negatives and stats."""
    if check:
        loaded = load_manifests(settings.manifests, list(settings.sources) if settings.sources else None)
        typer.echo(f"{len(loaded)} manifest(s) valid: {', '.join(loaded)}")
        return
    from neoembed.data import resolve_share
    from neoembed.evaluation import benchmark_texts

    logging.basicConfig(format="warning: %(message)s")  # the build's warnings (a part built again)

    benchmark = benchmark_texts(settings.eval_benchmark, settings.eval_benchmark_missing)
    result = build(settings, merge_only=merge_stats, benchmark=benchmark)
    out = settings.out
    if result is None:
        share = resolve_share(settings.shard)
        typer.echo(
            f"shard {share.index}/{share.count} done; the stats are written once every shard has finished "
            f"({out}/build.jsonl)"
        )
        return
    for line in result.sources:
        typer.echo(line)
    typer.echo(
        f"wrote {result.rows_out} rows from {result.rows_read} read "
        f"({result.negatives_per_row} negatives/row) to {out}; see {out}/stats.md"
    )
    for line in result.mining:
        typer.echo(f"mining {line}")
    for line in result.warnings:
        typer.echo(f"warning: {line}", err=True)
