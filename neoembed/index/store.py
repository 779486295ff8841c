"""The document store of an index directory: ids, texts and metadata in SQLite, vectors in a raw file.

Row `pos` of the store is FAISS id `pos` and row `pos` of the vector file, so search results map back to
documents by position. SQLite gives random access by position and a unique index on document ids, so
`index add` detects duplicate ids without reading the corpus into memory. The vectors (float32, row-major,
no header) are kept so an index can be re-tuned, rebuilt with another factory or exported without
re-embedding; they are appended to as documents are embedded (`neoembed.vector_file`), so an
interrupted build keeps its work.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from neoembed.index.corpus import CorpusReader, Document
from neoembed.index.errors import CorpusError

STORE_CHUNK = 10_000  # documents read and inserted per transaction
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
        return [doc_id for doc_id, _ in self._positions(list(ids))]

    def append(self, documents: list[Document], start: int) -> None:
        """Store `documents` at positions start, start+1, ... in one transaction."""
        rows = (
            (start + i, d.id, d.text, json.dumps(d.metadata, default=str)) for i, d in enumerate(documents)
        )
        with self._lock, self._conn:
            self._conn.executemany("INSERT INTO docs VALUES (?, ?, ?, ?)", rows)

    def add_corpus(self, corpus: CorpusReader, start: int) -> tuple[int, str]:
        """Stream `corpus` into positions start, start+1, ..., one transaction per chunk; return the number of
        documents and a digest of their ids and texts. Duplicate ids, within the corpus or against the
        documents before `start`, and an empty corpus are errors."""
        digest, count = hashlib.blake2b(digest_size=16), 0
        for chunk in corpus.chunks(STORE_CHUNK):
            try:
                self.append([doc for _, doc in chunk], start + count)
            except sqlite3.IntegrityError:
                raise self._duplicate(chunk, corpus, start) from None
            except sqlite3.OperationalError as err:
                if "full" not in str(err):  # SQLite's "database or disk is full"
                    raise
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path)) from err
            for _, doc in chunk:
                digest.update(doc.id.encode() + b"\0" + doc.text.encode() + b"\0")
            count += len(chunk)
        if count == 0:
            raise CorpusError(
                f"empty corpus: no readable documents in {corpus.describe()} ({corpus.skipped.count} rows skipped)"
            )
        return count, digest.hexdigest()

    def _duplicate(self, chunk, corpus: CorpusReader, start: int) -> CorpusError:
        """The error naming the first id of `chunk` (whose insert failed) that was seen before."""
        stored = dict(self._positions([doc.id for _, doc in chunk]))
        seen: dict[str, str] = {}
        for where, doc in chunk:
            if doc.id in seen:
                first = seen[doc.id]
            elif doc.id in stored and stored[doc.id] < start:
                return CorpusError(f"document id {doc.id!r} at {where} is already in {self.path.parent}")
            elif doc.id in stored:
                first = corpus.location(stored[doc.id] - start)
            else:
                seen[doc.id] = where
                continue
            return CorpusError(f"duplicate document id {doc.id!r} at {where} (first at {first})")
        raise AssertionError("the insert failed, yet no id of the chunk is a duplicate")

    def _positions(self, ids: list[str]) -> list[tuple[str, int]]:
        found = []
        with self._lock:
            for begin in range(0, len(ids), 500):
                part = ids[begin : begin + 500]
                marks = ",".join("?" * len(part))
                found += self._conn.execute(
                    f"SELECT id, pos FROM docs WHERE id IN ({marks})", part
                ).fetchall()
        return found

    def texts(self, start: int, stop: int) -> TextView:
        """The texts at positions start .. stop - 1, read from the store as they are sliced."""
        return TextView(self, start, stop)

    def text_range(self, start: int, stop: int) -> list[str]:
        """The texts at positions start .. stop - 1, in order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT text FROM docs WHERE pos >= ? AND pos < ? ORDER BY pos", (start, stop)
            ).fetchall()
        return [text for (text,) in rows]

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


class TextView(Sequence[str]):
    """Texts of a store's position range as a sequence: slicing reads them, so they are never all in memory."""

    def __init__(self, store: DocStore, start: int, stop: int):
        self.store, self.start, self.stop = store, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, item):
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("TextView supports contiguous slices only")
        begin, end, _ = item.indices(len(self))
        return self.store.text_range(self.start + begin, self.start + end)
