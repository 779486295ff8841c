"""Embed texts into a float32 file on disk, chunk by chunk, resuming after a crash; read it back memory-mapped.

The file is raw float32, row-major, no header: row i is text i (after `offset` rows already there), so it
grows by appending and its size says how much work is done. Hard-negative mining and index builds both embed
this way. Chunk boundaries are fixed multiples of `chunk_rows` from the first text, and sentence-transformers
sorts each chunk's texts by length before batching, so a resumed run batches every chunk exactly as an
uninterrupted one and writes the same bytes.

Each chunk's checksum goes to a JSONL file beside the vectors (`chunk_records`) once the chunk is on disk; a
resumed run keeps a chunk only where its bytes still match, so a row damaged between the kill and the resume
is embedded again instead of being handed on.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from neoembed.errors import InputError, naming
from neoembed.finite import require_finite

log = logging.getLogger(__name__)


class VectorFileError(InputError):
    """A vector file that holds fewer rows than the caller's records say it must."""


def embed(model, texts: Sequence[str], *, normalize: bool, batch_size: int = 64) -> np.ndarray:
    """float32 embeddings of `texts`, one row each (sentence-transformers sorts them by length to batch)."""
    vectors = model.encode(
        list(texts),
        batch_size=batch_size,
        normalize_embeddings=normalize,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.asarray(vectors, dtype="float32").reshape(len(texts), -1)


def vector_rows(path: Path, dim: int) -> int:
    """Whole rows in the vector file (0 when it does not exist)."""
    return path.stat().st_size // (4 * dim) if path.exists() else 0


def trim_vectors(path: Path, dim: int, rows: int) -> None:
    """Cut the vector file to its first `rows` rows."""
    whole = vector_rows(path, dim)
    if rows > whole:
        # os.truncate would pad with zeros: zero vectors stored silently for texts never embedded.
        raise VectorFileError(f"{path} holds {whole} vectors, fewer than the {rows} needed; rebuild it")
    if path.exists() and path.stat().st_size != rows * 4 * dim:  # a file already whole is left untouched
        os.truncate(path, rows * 4 * dim)


def chunk_records(path: Path) -> Path:
    """The JSONL file beside the vector file `path` where each chunk's rows and checksum are recorded."""
    return path.with_name(path.name + ".chunks.jsonl")


def _checksum(data: bytes) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest(data)


def _record_chunk(path: Path, first_row: int, vectors: np.ndarray) -> None:
    """Record the rows and checksum of a chunk just written (one JSON line, as `run_files.append_jsonl`
    writes; this module may not import it, being in its layer)."""
    record = {"rows": [first_row, first_row + len(vectors)], "xxh3": _checksum(vectors.tobytes())}
    with chunk_records(path).open("a", encoding="utf-8") as records:
        records.write(json.dumps(record) + "\n")


def _recorded_chunks(path: Path) -> dict[tuple[int, int], str]:
    """(first row, end row) -> checksum of every chunk written, the last record of each range winning (a range
    embedded again after a trim appends a new one); a line torn by a kill is skipped."""
    records = {}
    if chunk_records(path).exists():
        for line in chunk_records(path).read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
                records[tuple(record["rows"])] = record["xxh3"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return records


def _intact_rows(path: Path, dim: int, offset: int, rows: int, chunk_rows: int) -> int:
    """How many of the `rows` rows past `offset` to keep: the chunks, from the first, whose bytes match the
    checksum recorded when they were written. A chunk with no record (written before records were kept, or
    killed between its write and its record) counts as damaged: it and every later chunk are embedded again."""
    recorded = _recorded_chunks(path)
    with path.open("rb") as file:
        for begin in range(0, rows, chunk_rows):
            end = min(begin + chunk_rows, rows)
            file.seek((offset + begin) * 4 * dim)
            if recorded.get((offset + begin, offset + end)) != _checksum(file.read((end - begin) * 4 * dim)):
                log.warning(
                    "%s: rows %d-%d differ from what was written (checksum); embedding them again",
                    path, offset + begin, offset + end - 1,
                )  # fmt: skip
                return begin
    return rows


def read_vectors(path: Path, dim: int, rows: int | None = None, offset: int = 0) -> np.ndarray:
    """Rows offset .. offset + rows (default: to the end) of the vector file, memory-mapped read-only."""
    rows = vector_rows(path, dim) - offset if rows is None else rows
    if rows <= 0:
        return np.zeros((0, dim), dtype="float32")
    return np.memmap(path, dtype="<f4", mode="r", offset=offset * 4 * dim, shape=(rows, dim))


def embed_to_file(
    model,
    texts: Sequence[str],
    path: Path,
    *,
    chunk_rows: int,
    batch_size: int,
    normalize: bool,
    offset: int = 0,
    progress: bool = True,
    on_chunk: Callable[[int, int, float], None] | None = None,
) -> np.ndarray:
    """Embed `texts` into rows offset, offset + 1, ... of the vector file `path`; return them memory-mapped.

    Each chunk of `chunk_rows` texts is appended and synced to disk as soon as it is embedded, and its checksum
    recorded. A chunk with a non-finite vector is not written: `finite.NonFiniteVectors` names its rows (as
    rows of the file). Complete chunks already past `offset` whose checksums still match are kept and a torn
    last one is cut, so after a crash the same call embeds only the rest. The caller makes sure rows past
    `offset` belong to these texts (or trims them first). `texts` is any sequence that slices: a list, or a
    view that reads a store chunk by chunk.
    `on_chunk(texts_done, chunk_size, seconds)` is called after each chunk.
    """
    dim = model.get_embedding_dimension()
    on_disk = vector_rows(path, dim)
    if on_disk < offset:
        raise VectorFileError(f"{path} holds {on_disk} vectors, fewer than the {offset} before these texts")
    kept = on_disk - offset
    done = len(texts) if kept >= len(texts) else kept // chunk_rows * chunk_rows
    done = _intact_rows(path, dim, offset, done, chunk_rows) if done else 0
    trim_vectors(path, dim, offset + done)
    with (
        open(path, "ab") as f,
        tqdm(total=len(texts), initial=done, unit="text", desc="embedding", disable=not progress) as bar,
    ):
        for begin in range(done, len(texts), chunk_rows):
            chunk = texts[begin : begin + chunk_rows]
            tic = time.perf_counter()
            vectors = embed(model, chunk, normalize=normalize, batch_size=batch_size).astype("<f4")
            require_finite(vectors, what=str(path), first_row=offset + begin)
            try:
                f.write(vectors.tobytes())
                f.flush()
                os.fsync(f.fileno())  # a chunk counts as done only once it is on disk
                _record_chunk(path, offset + begin, vectors)
            except OSError as err:  # a full disk: the torn chunk is cut on the next run
                raise naming(err, path) from err
            bar.update(len(chunk))
            if on_chunk is not None:
                on_chunk(begin + len(chunk), len(chunk), time.perf_counter() - tic)
    return read_vectors(path, dim, len(texts), offset)
