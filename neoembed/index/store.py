"""The document store of an index directory: ids, texts and metadata in SQLite, vectors in a raw file.

Row `pos` of the store is FAISS id `pos` and row `pos` of the vector file, so search results map back to
documents by position. SQLite gives random access by position and a unique index on document ids, so
`index add` detects duplicate ids without reading the corpus into memory. The vectors (float32, row-major,
no header) are kept so an index can be re-tuned, rebuilt with another factory or exported without
re-embedding; they are appended to as documents are embedded (`neoembed.embedding_file`), so an
interrupted build keeps its work.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from neoembed.index.corpus import Document

_SCHEMA = "CREATE TABLE IF NOT EXISTS docs (pos INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, metadata TEXT NOT NULL)"


class DocStore:
    def __init__(self, path: Path, *, readonly: bool = False):
        self.path = Path(path)
        uri = f"file:{self.path}?mode=ro" if readonly else f"file:{self.path}"
        # Searches may come from a server's worker threads: one connection, serialised by a lock.
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        if not readonly:
            self._conn.execute(_SCHEMA)

    def existing_ids(self, ids: Iterable[str]) -> list[str]:
        """The ids among `ids` that the store already holds."""
        ids = list(ids)
        found: list[str] = []
        with self._lock:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found += [
                    r[0] for r in self._conn.execute(f"SELECT id FROM docs WHERE id IN ({marks})", chunk)
                ]
        return found

    def append(self, documents: list[Document], start: int) -> None:
        """Store `documents` at positions start, start+1, ... in one transaction."""
        rows = (
            (start + i, d.id, d.text, json.dumps(d.metadata, default=str)) for i, d in enumerate(documents)
        )
        with self._lock, self._conn:
            self._conn.executemany("INSERT INTO docs VALUES (?, ?, ?, ?)", rows)

    def truncate(self, rows: int) -> None:
        """Drop documents at positions >= rows (left by an interrupted add)."""
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM docs WHERE pos >= ?", (rows,))

    def get(self, positions: list[int]) -> list[Document]:
        """Documents at `positions`, in that order."""
        marks = ",".join("?" * len(positions))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT pos, id, text, metadata FROM docs WHERE pos IN ({marks})", positions
            )
            by_pos = {pos: Document(i, t, json.loads(m)) for pos, i, t, m in rows}
        return [by_pos[p] for p in positions]

    def iter_batches(self, size: int = 50_000) -> Iterator[list[Document]]:
        """All documents in position order, `size` at a time."""
        last = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT pos, id, text, metadata FROM docs WHERE pos > ? ORDER BY pos LIMIT ?",
                    (last, size),
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [Document(i, t, json.loads(m)) for _, i, t, m in rows]

    def close(self) -> None:
        self._conn.close()
