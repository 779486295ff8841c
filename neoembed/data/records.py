"""Read a finished build: what the contrastive trainer imports (`load_records`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from neoembed.errors import InputError
from neoembed.run_files import file_checksum

if TYPE_CHECKING:
    from datasets import Dataset


class RecordsError(InputError):
    """A build directory that is missing, unfinished, or lacks a requested source."""


def load_records(out: Path | str, sources: list[str] | None = None) -> dict[str, Dataset]:
    """{source: datasets.Dataset with query, positive, negatives, source} for a complete build in `out`; a
    build of this version also holds each text's `text_key` (query_key, positive_key, negative_keys).

    `stats.json` is written last, so its presence means every part of every source is there; each part is
    checked against the checksum the build recorded for it before anything is read.
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
        _check_parts(out / name, parts, built[name].get("part_checksums"))
        records[name] = concatenate_datasets([Dataset.from_parquet(str(p)) for p in parts])
        if len(records[name]) != built[name]["rows_out"]:
            raise RecordsError(
                f"{out}/{name}: {len(records[name])} rows, stats.json says {built[name]['rows_out']}"
            )
    return records


def part_damage(part: Path, xxh3: str | None) -> str | None:
    """Why `part` is not the file whose checksum the build recorded (missing, or other bytes), or None.
    Builds from before the checksums recorded none (`xxh3` None): their parts are taken as they are."""
    if not part.is_file():
        return "is missing"
    if xxh3 is not None and file_checksum(part) != xxh3:
        return "is damaged or replaced: its checksum differs from the one the build recorded"
    return None


def _check_parts(source_dir: Path, parts: list[Path], checksums: dict[str, str | None] | None) -> None:
    if checksums is None:
        return
    for name, xxh3 in checksums.items():
        if (why := part_damage(source_dir / name, xxh3)) is not None:
            raise RecordsError(
                f"{source_dir / name} {why}; run the same neoembed build-data again to rebuild it"
            )
    if extra := sorted(p.name for p in parts if p.name not in checksums):
        raise RecordsError(f"{source_dir}: {extra} are not parts of this build; remove them")
