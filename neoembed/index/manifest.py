"""The manifest of an index directory, and the names of the files the directory holds.

An index directory contains:
  index-*.faiss    the FAISS index (FAISS id = row position); the manifest names the current file
  docs.sqlite      the document store: id, text, metadata per position
  vectors.f32      the embeddings, float32 row-major, one row per position
  manifest.json    this manifest: which model made the vectors, how the index was chosen and tuned,
                   and the recall@10 and QPS measured for it
  build_log.jsonl  one JSON line per step (embedding progress, tuning points, totals)
  build_state.json present only while a build or add is unfinished: what its vectors are
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field, ValidationError

from neoembed.index.errors import IndexingError
from neoembed.index.settings import Metric
from neoembed.recipes import StrictSettings, describe_validation_error
from neoembed.run_files import append_jsonl, file_checksum, write_json

FORMAT_VERSION = 1
STORE_FILE = "docs.sqlite"
VECTORS_FILE = "vectors.f32"
MANIFEST_FILE = "manifest.json"
LOG_FILE = "build_log.jsonl"
STATE_FILE = "build_state.json"


class Tuning(StrictSettings):
    """How the search parameter was chosen, and what the chosen setting measured on held-out queries."""

    target_recall: float
    queries: int  # corpus vectors used as queries, their own document excluded from both result lists
    recall_at_10: float
    qps_batch: float  # all queries in one call
    qps_single: float  # one query per call, on one thread
    exact_qps_batch: float  # exact search (brute force) over the same vectors, same queries
    threads: int  # faiss threads for batch search and exact search
    curve: list[dict] = Field(default_factory=list)  # every setting tried: value, recall_at_10, QPS


class FileRecord(StrictSettings):
    """A file of the index directory as the build left it."""

    size: int
    xxh3: str  # xxh3-128 of its bytes (`run_files.file_checksum`)


def record_files(directory: Path, names: list[str]) -> dict[str, FileRecord]:
    return {
        name: FileRecord(
            size=(Path(directory) / name).stat().st_size, xxh3=file_checksum(Path(directory) / name)
        )
        for name in names
    }


class Manifest(StrictSettings):
    model: str
    model_fingerprint: str
    dimension: int
    metric: Metric
    normalized: bool
    factory: str
    factory_reason: str
    index_file: str  # a new name per write, so the manifest commits the switch to it atomically
    search_params: dict  # e.g. {"nprobe": 8} or {"efSearch": 64}; {} for exact search
    ntotal: int
    tuning: Tuning
    faiss_version: str
    files: dict[str, FileRecord] = Field(default_factory=dict)  # empty in indexes built before it existed
    format_version: int = FORMAT_VERSION

    def verify(self, directory: Path, checksums: bool = True, *, without_index: bool = False) -> None:
        """Check that the files the manifest records are as the build left them: each present, of its size,
        and (with `checksums`) of its checksum. A damaged file is an `IndexingError` naming it, before
        anything reads it. `without_index` leaves the FAISS index file out: `index rebuild` replaces it from
        the vectors, so a damaged one must not stop it.

        While an add is unfinished (its state file present), the store and the vectors have grown past what
        the manifest records, while the committed index still serves: they are then checked to be no shorter,
        the vectors' committed rows (the bytes the manifest records) by their checksum, and the store by
        SQLite's own integrity check (SQLite rewrites pages in place, so it has no committed prefix). A resumed
        add therefore never appends to, or seals into a new manifest, a committed row that was damaged."""
        directory = Path(directory)
        unfinished = (directory / STATE_FILE).exists()
        for name, record in self.files.items():
            if without_index and name == self.index_file:
                continue
            path = directory / name
            remedy = _remedy(directory, name == self.index_file)
            if not path.is_file():
                raise IndexingError(f"{path} is missing; the index in {directory} is incomplete: {remedy}")
            size, grown = path.stat().st_size, unfinished and name != self.index_file
            if size < record.size or (size != record.size and not grown):
                raise IndexingError(
                    f"{path} is damaged: {size:,} bytes where the index was written with {record.size:,} "
                    f"(truncated or overwritten); {remedy}"
                )
            if not checksums:
                continue
            if grown and name == STORE_FILE:
                _check_sqlite(path, remedy)
            elif file_checksum(path, size=record.size) != record.xxh3:
                raise IndexingError(
                    f"{path} is damaged: its checksum differs from the one the index was written with; {remedy}"
                )

    def save(self, directory: Path) -> None:
        """Write atomically: a crash leaves the previous manifest in place."""
        write_json(Path(directory) / MANIFEST_FILE, self.model_dump(mode="json"))

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = Path(directory) / MANIFEST_FILE
        if not path.is_file():
            raise IndexingError(f"{directory} is not an index directory: {MANIFEST_FILE} is missing")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise IndexingError(f"{path}: not a valid neoembed index manifest ({err})") from err
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            found = data.get("format_version") if isinstance(data, dict) else None
            raise IndexingError(f"{path}: format_version {found!r}, expected {FORMAT_VERSION}")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise IndexingError(
                f"{path}: not a valid neoembed index manifest ({describe_validation_error(err)})"
            ) from None


def append_log(directory: Path, record: dict) -> None:
    append_jsonl(Path(directory) / LOG_FILE, record)


def _remedy(directory: Path, is_index_file: bool) -> str:
    """What recovers from a damaged file: the FAISS index is made again from the stored vectors; the vectors
    and the documents only from the corpus."""
    if is_index_file:
        return f"`neoembed index rebuild {directory}` makes it again from the stored vectors"
    return "build the index again from its corpus (`neoembed index build`)"


def _check_sqlite(path: Path, remedy: str) -> None:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            result = conn.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as err:
        result = str(err)
    if result != "ok":
        raise IndexingError(f"{path} is damaged ({result}); {remedy}")
