"""`neoembed build-data`: build the contrastive dataset (query, positive, negatives) from data manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from neoembed.data.build import BuildConfig, build
from neoembed.data.manifest import ManifestError, load_manifests
from neoembed.data.mining import MiningConfig
from neoembed.data.sources import SourceError
from neoembed.data.wordnet import WordNetError


def _shard(value: str) -> tuple[int, int]:
    index, sep, count = value.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 0 <= int(index) < int(count):
        raise typer.BadParameter(f"expected i/N with 0 <= i < N, got {value!r}", param_hint="--shard")
    return int(index), int(count)


def build_data(
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output directory (parquet shards per source, stats.json/md)."),
    ] = None,
    manifests: Annotated[Path, typer.Option("--manifests", help="Directory of source YAMLs.")] = Path(
        "data_manifests"
    ),
    sources: Annotated[
        str,
        typer.Option(
            "--sources", help="Comma-separated source names, or 'all'. Default: the embedded WordNet set."
        ),
    ] = "wordnet",
    max_rows: Annotated[
        int,
        typer.Option(
            "--max-rows", help="Rows read per source; 0 reads all (default keeps a CPU build to minutes)."
        ),
    ] = 10000,
    local_data: Annotated[
        Path | None,
        typer.Option(
            "--local-data", help="Offline copies: DIR/<source> replaces the hub dataset of that source."
        ),
    ] = None,
    eval_texts: Annotated[
        list[Path] | None,
        typer.Option(
            "--eval-texts", help="Leakage guard: .txt (a text a line) or .jsonl ('text') files; repeatable."
        ),
    ] = None,
    teacher: Annotated[
        str, typer.Option("--teacher", help="Mining teacher: any sentence-transformers model.")
    ] = "minilm",
    teacher_dtype: Annotated[str, typer.Option("--teacher-dtype", help="float32 or bfloat16.")] = "float32",
    num_negatives: Annotated[
        int, typer.Option("--num-negatives", min=1, help="Mined negatives per row (top k).")
    ] = 3,
    margin: Annotated[
        float,
        typer.Option(
            "--margin", min=0.0, max=1.0, help="Drop candidates scoring above margin x the positive's score."
        ),
    ] = 0.95,
    candidates: Annotated[
        int, typer.Option("--candidates", min=1, help="Neighbours searched per query.")
    ] = 100,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Teacher encoding batch size.")
    ] = 128,
    mine: Annotated[
        bool, typer.Option("--mine/--no-mine", help="Mine negatives for sources without them.")
    ] = True,
    rows_per_shard: Annotated[
        int, typer.Option("--rows-per-shard", min=1, help="Rows per output part.")
    ] = 100000,
    shard: Annotated[
        str, typer.Option("--shard", help="Build only units i, i+N, ... (i/N) on this machine.")
    ] = "0/1",
    merge_stats: Annotated[
        bool, typer.Option("--merge-stats", help="Only merge stats of finished shards.")
    ] = False,
    check: Annotated[bool, typer.Option("--check", help="Only validate the manifests and exit.")] = False,
) -> None:
    """Build parquet shards of (query, positive, negatives, source) with hard negatives and stats."""
    if teacher_dtype not in ("float32", "bfloat16"):
        raise typer.BadParameter("choose float32 or bfloat16", param_hint="--teacher-dtype")
    eval_texts = eval_texts or []
    missing = [p for p in eval_texts if not p.is_file()]
    if missing:
        raise typer.BadParameter(f"not a file: {missing[0]}", param_hint="--eval-texts")
    names = None if sources == "all" else tuple(s.strip() for s in sources.split(",") if s.strip())
    try:
        if check:
            loaded = load_manifests(manifests, list(names) if names else None)
            typer.echo(f"{len(loaded)} manifest(s) valid: {', '.join(loaded)}")
            return
        if out is None:
            raise typer.BadParameter("required unless --check", param_hint="--out")
        stats = build(
            BuildConfig(
                manifests=manifests,
                out=out,
                sources=names,
                local_data=local_data,
                eval_texts=tuple(eval_texts),
                max_rows=max_rows or None,
                rows_per_shard=rows_per_shard,
                shard=_shard(shard),
                mine=mine,
                mining=MiningConfig(
                    teacher=teacher,
                    num_negatives=num_negatives,
                    margin=margin,
                    batch_size=batch_size,
                    candidates=candidates,
                    dtype=teacher_dtype,
                ),
            ),
            merge_only=merge_stats,
        )
    except (ManifestError, SourceError, WordNetError, ValueError) as err:
        typer.secho(f"error: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    if stats is None:
        typer.echo(f"shard {shard} done; stats are written once every shard has finished ({out}/build.jsonl)")
        return
    total = stats["total"]
    typer.echo(
        f"wrote {total['rows_out']} rows from {total['rows_read']} read "
        f"({total['negatives_per_row']} negatives/row) to {out}; see {out}/stats.md"
    )
