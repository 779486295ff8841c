"""Atomic file writes: a killed build leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def temp_path(path: Path) -> Path:
    """A sibling name unique to this writer: ranks on other machines may write the same file at once."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}")


def write_json(path: Path, data: dict) -> None:
    tmp = temp_path(path)
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    tmp = temp_path(path)
    tmp.write_text(text)
    os.replace(tmp, path)


def write_parquet(path: Path, table: pa.Table, row_group_size: int = 10_000) -> None:
    tmp = temp_path(path)
    pq.write_table(table, tmp, compression="zstd", row_group_size=row_group_size)
    os.replace(tmp, path)
