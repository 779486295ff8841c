"""Read a finished build: what the contrastive trainer imports (`load_records`)."""

from __future__ import annotations

import json
from pathlib import Path

from neoembed.errors import InputError


class RecordsError(InputError):
    """A build directory that is missing, unfinished, or lacks a requested source."""


def load_records(out: Path | str, sources: list[str] | None = None) -> dict:
    """{source: datasets.Dataset with query, positive, negatives, source} for a complete build in `out`; a
    build of this version also holds each text's `text_key` (query_key, positive_key, negative_keys).

    `stats.json` is written last, so its presence means every part of every source is there.
    """
    from datasets import Dataset, concatenate_datasets

    out = Path(out)
    stats_path = out / "stats.json"
    if not stats_path.exists():
        raise RecordsError(
            f"{out}: no stats.json; the build is missing or unfinished (run neoembed build-data)"
        )
    built = json.loads(stats_path.read_text())["sources"]
    unknown = sorted(set(sources or []) - set(built))
    if unknown:
        raise RecordsError(f"{out}: source(s) {unknown} not in this build; it has {sorted(built)}")
    records = {}
    for name in sources or list(built):
        parts = sorted((out / name).glob("part-*.parquet"))
        records[name] = concatenate_datasets([Dataset.from_parquet(str(p)) for p in parts])
        if len(records[name]) != built[name]["rows_out"]:
            raise RecordsError(
                f"{out}/{name}: {len(records[name])} rows, stats.json says {built[name]['rows_out']}"
            )
    return records
