"""The builder's contrastive records as training columns: query, positive, negative_1..k per source.

sentence-transformers tokenises one column per text position, so the variable-length `negatives` list becomes
k fixed columns, k = the most negatives any row of the source has (capped by `max_negatives`). A row with
fewer negatives repeats its own positive in the spare columns; the loss counts each distinct text once per
row, so these fillers score nothing.
"""

from __future__ import annotations

import hashlib
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Dataset, Features, Sequence, Value
from datasets.exceptions import DatasetGenerationError

from neoembed.data.records import RecordsError, load_records
from neoembed.errors import InputError

REQUIRED_COLUMNS = ("query", "positive", "negatives")


class ContrastiveDataError(InputError):
    """Records that cannot be trained on; the message names the source, row or file."""


def load_training_sources(
    path: str | Path, sources: list[str] | None, max_negatives: int, max_rows: int | None = None
) -> dict[str, Dataset]:
    """{source: Dataset with query, positive, negative_1..k} from a finished `neoembed build-data` output."""
    if Path(path).is_dir():  # a missing directory gets load_records' message
        check_parts(Path(path), sources)
    try:
        records = load_records(path, sources)
    except RecordsError as err:
        raise ContrastiveDataError(str(err)) from err
    except (pa.ArrowInvalid, OSError, ValueError, DatasetGenerationError) as err:  # empty/broken parts
        raise ContrastiveDataError(f"{path}: cannot read the parquet shards: {err}") from err
    prepared = {}
    for name, table in records.items():
        where = f"{path}/{name}"
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise ContrastiveDataError(f"{where}: missing column(s) {missing}; has {table.column_names}")
        if len(table) == 0:
            raise ContrastiveDataError(f"{where}: no rows")
        if max_rows:
            table = table.select(range(min(max_rows, len(table))))
        prepared[name] = to_columns(table.select_columns(list(REQUIRED_COLUMNS)), max_negatives, where)
    return prepared


def check_parts(out: Path, sources: list[str] | None) -> None:
    """Name the part file that is not parquet, and the source with no rows, before `datasets` reads them."""
    directories = [out / name for name in sources] if sources else [p for p in out.iterdir() if p.is_dir()]
    for directory in directories:
        parts = sorted(directory.glob("part-*.parquet"))
        rows = 0
        for part in parts:
            try:
                rows += pq.read_metadata(part).num_rows
            except (pa.ArrowInvalid, OSError) as err:
                raise ContrastiveDataError(f"{part}: not a readable parquet file ({err})") from err
        if parts and rows == 0:
            raise ContrastiveDataError(f"{directory}: no rows")


def to_columns(table: Dataset, max_negatives: int, where: str) -> Dataset:
    for column in ("query", "positive"):
        for row, text in enumerate(table[column]):
            if not isinstance(text, str) or not text.strip():
                raise ContrastiveDataError(f"{where}: row {row} has no {column} (got {text!r})")
    k = min(max_negatives, max((len(n or ()) for n in table["negatives"]), default=0))

    def spread(batch: dict) -> dict:
        out = {"query": batch["query"], "positive": batch["positive"]}
        for j in range(k):
            out[f"negative_{j + 1}"] = [
                negs[j] if negs and j < len(negs) and negs[j] else pos
                for negs, pos in zip(batch["negatives"], batch["positive"], strict=True)
            ]
        return out

    return table.map(spread, batched=True, remove_columns=["negatives"], desc=f"columns {Path(where).name}")


def normalise(text: str) -> str:
    """What counts as the same text for the sampler: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def text_key(text: str) -> int:
    """An 8-byte blake2b digest of the normalised text (collisions: ~1 in 10^19 per pair)."""
    return int.from_bytes(
        hashlib.blake2b(normalise(text).encode(), digest_size=8).digest(), "little", signed=True
    )


def row_keys(dataset: Dataset) -> np.ndarray:
    """(rows, columns) int64 `text_key`s of every text of every row: the sampler's duplicate check.

    8 bytes a text whatever its length, so the full 9M-row build with 10 texts a row takes ~0.7 GB here, where
    the texts themselves as Python strings would take tens of GB. Computed in Arrow batches (no text is kept)
    by `datasets.map`, which caches the result beside an on-disk dataset for the next run.
    """
    columns = dataset.column_names

    def digest(batch: dict) -> dict:
        return {"keys": [[text_key(text) for text in row] for row in zip(*(batch[c] for c in columns))]}

    keyed = dataset.map(
        digest,
        batched=True,
        remove_columns=columns,
        features=Features({"keys": Sequence(Value("int64"), length=len(columns))}),
        desc="text keys",
    )
    return keyed.with_format("numpy")[:]["keys"]
