"""The builder's contrastive records as training columns, and the collator that hands them to the loss.

sentence-transformers tokenises one column per text position, so the variable-length `negatives` list becomes
k fixed columns, k = the most negatives any row of the source has (capped by `max_negatives`). A row with
fewer negatives repeats its own positive in the spare columns; the loss counts each distinct text once per
row, so these fillers score nothing.

Every text column `c` has an int64 column `c_text_key` beside it: the text's `data.normalize.text_key`, which the
sampler and the loss compare (the collator hands the loss a batch's keys). The build stores the keys in the records; records built before it did get
them computed here, with the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from datasets import Dataset, Features, Value
from datasets.exceptions import DatasetGenerationError
from sentence_transformers.sentence_transformer.data_collator import SentenceTransformerDataCollator

from neoembed.data import RecordsError, load_records, text_key
from neoembed.errors import InputError

REQUIRED_COLUMNS = ("query", "positive", "negatives")
KEY_COLUMNS = ("query_key", "positive_key", "negative_keys")  # written by the build
KEY_SUFFIX = "_text_key"
TEXT_KEYS = "text_keys"  # the batch entry TextKeyCollator adds


class ContrastiveDataError(InputError):
    """Records that cannot be trained on; the message names the source, row or file."""


def load_training_sources(
    path: str | Path, sources: list[str] | None, max_negatives: int, max_rows: int | None = None
) -> dict[str, Dataset]:
    """{source: Dataset with query, positive, negative_1..k and their key columns} from a finished
    `neoembed build-data` output."""
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
        columns = [c for c in (*REQUIRED_COLUMNS, *KEY_COLUMNS) if c in table.column_names]
        prepared[name] = to_columns(table.select_columns(columns), max_negatives, where)
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
    """query, positive, negative_1..k, then each one's key column; keys are computed when the records have
    none."""
    for column in ("query", "positive"):
        for row, text in enumerate(table[column]):
            if not isinstance(text, str) or not text.strip():
                raise ContrastiveDataError(f"{where}: row {row} has no {column} (got {text!r})")
    k = min(max_negatives, max((len(n or ()) for n in table["negatives"]), default=0))
    texts = ["query", "positive", *(f"negative_{j + 1}" for j in range(k))]
    keyed = all(c in table.column_names for c in KEY_COLUMNS)

    def spread(batch: dict[str, list]) -> dict[str, list]:
        positives, negatives = batch["positive"], [negs or [] for negs in batch["negatives"]]
        if keyed:
            query_keys, positive_keys = batch["query_key"], batch["positive_key"]
            negative_keys = [keys or [] for keys in batch["negative_keys"]]
        else:
            query_keys = [text_key(text) for text in batch["query"]]
            positive_keys = [text_key(text) for text in positives]
            negative_keys = [[text_key(text) for text in negs[:k]] for negs in negatives]
        out = {"query": batch["query"], "positive": positives}
        keys = {"query" + KEY_SUFFIX: query_keys, "positive" + KEY_SUFFIX: positive_keys}
        for j in range(k):
            given = [j < len(negs) and bool(negs[j]) for negs in negatives]
            out[f"negative_{j + 1}"] = [
                n[j] if g else p for n, g, p in zip(negatives, given, positives, strict=True)
            ]
            keys[f"negative_{j + 1}{KEY_SUFFIX}"] = [
                n[j] if g else p for n, g, p in zip(negative_keys, given, positive_keys, strict=True)
            ]
        return out | keys

    features = Features({c: Value("string") for c in texts} | {c + KEY_SUFFIX: Value("int64") for c in texts})
    return table.map(
        spread,
        batched=True,
        remove_columns=table.column_names,
        features=features,
        desc=f"columns {Path(where).name}",
    )


def text_columns(dataset: Dataset) -> list[str]:
    """The columns holding texts (query, positive, negative_1..k), in order."""
    return [c for c in dataset.column_names if not c.endswith(KEY_SUFFIX) and c != "dataset_name"]


def text_keys(dataset: Dataset) -> np.ndarray:
    """(rows, texts) int64 keys of every text of every row, in column order: the sampler's duplicate check.

    8 bytes a text whatever its length, so the full 9M-row build with 10 texts a row takes ~0.7 GB here, where
    the texts themselves as Python strings would take tens of GB.
    """
    columns = [c + KEY_SUFFIX for c in text_columns(dataset)]
    table = dataset.with_format("numpy", columns=columns)[:]
    return np.stack([table[c] for c in columns], axis=1)


@dataclass
class TextKeyCollator(SentenceTransformerDataCollator):
    """sentence-transformers' collator, which would tokenise the key columns as text: this one sets them
    aside and adds them as one int64 tensor `text_keys` (rows, text columns), in the text columns' order."""

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        keys = [c + KEY_SUFFIX for c in features[0] if c + KEY_SUFFIX in features[0]]
        texts = [{c: v for c, v in row.items() if not c.endswith(KEY_SUFFIX)} for row in features]
        batch = super().__call__(texts)
        batch[TEXT_KEYS] = torch.tensor([[row[c] for c in keys] for row in features], dtype=torch.int64)
        return batch
