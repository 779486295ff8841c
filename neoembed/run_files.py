"""Run files: every JSON, text or parquet file a run, build or index writes, and every JSONL log.

Writes are atomic (a killed process leaves the old file or the new one, never half of one), so a resumed
job can trust what it finds. Nothing here imports transformers: writing a file must stay cheap.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

METRICS_FILE = "metrics.jsonl"


def temp_path(path: Path) -> Path:
    """A sibling name unique to this writer: ranks on other machines may write the same file at once."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}")


def write_text(path: Path, text: str) -> None:
    """Write `text` atomically (through a sibling temporary file and a rename)."""
    path = Path(path)
    tmp = temp_path(path)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data: dict) -> None:
    """Write `data` atomically as indented JSON with sorted keys (the same data gives the same bytes)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_parquet(path: Path, table, row_group_size: int = 10_000) -> None:
    """Write a pyarrow Table atomically as zstd-compressed parquet."""
    import pyarrow.parquet as pq

    path = Path(path)
    tmp = temp_path(path)
    pq.write_table(table, tmp, compression="zstd", row_group_size=row_group_size)
    os.replace(tmp, path)


def append_jsonl(path: Path, record: dict) -> None:
    """Append `record` as one JSON line: what every neoembed log file (metrics, build and index logs) holds."""
    with Path(path).open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
