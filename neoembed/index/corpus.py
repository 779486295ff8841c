"""Read documents to index from jsonl, parquet or txt files, or the WordNet glosses.

Formats: `.jsonl` (one JSON object a line), `.parquet` (one row per document), `.txt` (one document a
non-empty line, id `<file stem>:<line>`). The text is in `text_field` and the id in `id_field` (when a row
has no id it gets `<file name>:<row>`); every other field is kept as metadata. The name `wordnet` reads
the WordNet 3.0 synsets as documents (id = synset id, text = "lemmas: gloss").

Documents are streamed, never held all at once: `CorpusReader` yields them one by one and the document
store takes them a chunk at a time (`DocStore.add_corpus`), so a corpus larger than memory can be indexed.
Rows that cannot be read (bad JSON, missing or empty text) are skipped and counted, with their location;
duplicate ids (the store's unique index finds them) and an empty corpus are errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from neoembed.index.errors import CorpusError

WORDNET = "wordnet"
SUFFIXES = (".jsonl", ".parquet", ".txt")
SKIPS_KEPT = 20  # skipped rows whose location and reason are kept (all are counted)


@dataclass
class Tally:
    """Rows of one kind a pass met (skipped ones, ones with bytes that are not UTF-8): how many, and the
    first `SKIPS_KEPT` of them as "file:row[: reason]"."""

    count: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, where: str) -> None:
        self.count += 1
        if len(self.first) < SKIPS_KEPT:
            self.first.append(where)


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    metadata: dict = field(default_factory=dict)


def _row_to_document(row: object, where: str, id_field: str, text_field: str) -> Document:
    if not isinstance(row, dict):
        raise ValueError(f"expected an object, got {type(row).__name__}")
    text = row.get(text_field)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"field {text_field!r} is missing, empty or not a string")
    doc_id = row.get(id_field)
    doc_id = where if doc_id is None else str(doc_id)
    metadata = {k: v for k, v in row.items() if k not in (id_field, text_field)}
    return Document(doc_id, text, metadata)


def _lines(path: Path, not_utf8: Tally) -> Iterator[tuple[str, str]]:
    """(location, text) of every line; a line holding bytes that are not UTF-8 is read with U+FFFD in their
    place and counted in `not_utf8`. Read as text (universal newlines), the bytes kept as surrogates until
    checked."""
    with path.open(encoding="utf-8", errors="surrogateescape") as f:
        for number, line in enumerate(f, start=1):
            where = f"{path.name}:{number}"
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:
                not_utf8.add(where)
                line = line.encode("utf-8", "surrogateescape").decode("utf-8", errors="replace")
            yield where, line


def _jsonl_rows(path: Path, not_utf8: Tally) -> Iterator[tuple[str, object]]:
    for where, line in _lines(path, not_utf8):
        if line.strip():
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as err:
                yield where, ValueError(f"invalid JSON ({err.msg})")


def _parquet_rows(path: Path, not_utf8: Tally) -> Iterator[tuple[str, object]]:  # arrow checks UTF-8
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several types for a file that is not parquet
        raise CorpusError(f"{path}: not a readable parquet file ({err})") from err
    number = 0
    for batch in parquet.iter_batches(batch_size=8192):
        for row in batch.to_pylist():
            number += 1
            yield f"{path.name}:{number}", row


def _txt_rows(path: Path, not_utf8: Tally) -> Iterator[tuple[str, object]]:
    for where, line in _lines(path, not_utf8):
        if line.strip():
            yield where, {"id": f"{path.stem}:{where.rsplit(':', 1)[1]}", "text": line.rstrip("\n")}


def wordnet_documents(synsets=None) -> Iterator[Document]:
    """One document per WordNet synset (default: all of them): id = synset id, text = "lemmas: gloss".

    The example sentences are left out of the text: they serve as held-out queries.
    """
    from neoembed.data import load_synsets

    for synset in load_synsets() if synsets is None else synsets:
        lemmas = ", ".join(lemma.replace("_", " ") for lemma in synset.lemmas)
        yield Document(synset.id, f"{lemmas}: {synset.gloss}", {"pos": synset.pos})


def _files(source: Path) -> list[Path]:
    """`source` itself, or the corpus files directly inside a directory (sorted, so ids keep their order)."""
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.suffix in SUFFIXES)
        if not files:
            raise CorpusError(f"{source}: directory holds no {', '.join(SUFFIXES)} files")
        return files
    return [source]


def _rows(path: Path, not_utf8: Tally) -> Iterator[tuple[str, object]]:
    readers = {".jsonl": _jsonl_rows, ".parquet": _parquet_rows, ".txt": _txt_rows}
    return readers[path.suffix](path, not_utf8)


def _check(path: Path) -> Path:
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    if path.suffix not in SUFFIXES:
        raise CorpusError(f"{path}: unknown corpus format {path.suffix!r}; use one of {', '.join(SUFFIXES)}")
    return path


class CorpusReader:
    """The documents of `sources` (files, directories of them, or "wordnet"), streamed as (location, Document).

    Every file is checked (exists, known format) when the reader is made, before any document is read.
    Each pass tallies the rows it skips in `skipped` ("file:row: reason") and the rows it read with bytes
    that are not UTF-8, replaced by U+FFFD, in `not_utf8` ("file:row").
    """

    def __init__(self, sources: Sequence[str | Path], *, id_field: str = "id", text_field: str = "text"):
        self.sources = [str(s) for s in sources]
        self.id_field, self.text_field = id_field, text_field
        self._files = {s: [] if s == WORDNET else [_check(p) for p in _files(Path(s))] for s in self.sources}
        self.skipped, self.not_utf8 = Tally(), Tally()

    def __iter__(self) -> Iterator[tuple[str, Document]]:
        self.skipped, self.not_utf8 = Tally(), Tally()
        for source in self.sources:
            if source == WORDNET:
                yield from ((f"wordnet:{d.id}", d) for d in wordnet_documents())
                continue
            for path in self._files[source]:
                for where, row in _rows(path, self.not_utf8):
                    try:
                        if isinstance(row, Exception):
                            raise row
                        doc = _row_to_document(row, where, self.id_field, self.text_field)
                    except ValueError as err:
                        self.skipped.add(f"{where}: {err}")
                        continue
                    yield where, doc

    def chunks(self, size: int) -> Iterator[list[tuple[str, Document]]]:
        rows = iter(self)
        while chunk := list(islice(rows, size)):
            yield chunk

    def location(self, number: int) -> str:
        """Where the document `number` (0-based, in reading order) is: read again, for error messages."""
        again = CorpusReader(self.sources, id_field=self.id_field, text_field=self.text_field)
        return next(islice(again, number, None))[0]

    def describe(self) -> str:
        return ", ".join(self.sources) or "(no files given)"
