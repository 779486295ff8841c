"""Embed texts into a float32 file on disk, chunk by chunk, resuming after a crash; read it back memory-mapped.

The file is raw float32, row-major, no header: row i is text i (after `offset` rows already there), so it
grows by appending and its size says how much work is done. Hard-negative mining and index builds both embed
this way. Chunk boundaries are fixed multiples of `chunk_rows` from the first text, and sentence-transformers
sorts each chunk's texts by length before batching, so a resumed run batches every chunk exactly as an
uninterrupted one and writes the same bytes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from neoembed.errors import InputError, naming


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

    Each chunk of `chunk_rows` texts is appended and synced to disk as soon as it is embedded. Complete
    chunks already past `offset` are kept and a torn last one is cut, so after a crash the same call embeds
    only the rest. The caller makes sure rows past `offset` belong to these texts (or trims them first).
    `texts` is any sequence that slices: a list, or a view that reads a store chunk by chunk.
    `on_chunk(texts_done, chunk_size, seconds)` is called after each chunk.
    """
    dim = model.get_embedding_dimension()
    on_disk = vector_rows(path, dim)
    if on_disk < offset:
        raise VectorFileError(f"{path} holds {on_disk} vectors, fewer than the {offset} before these texts")
    kept = on_disk - offset
    done = len(texts) if kept >= len(texts) else kept // chunk_rows * chunk_rows
    trim_vectors(path, dim, offset + done)
    with (
        open(path, "ab") as f,
        tqdm(total=len(texts), initial=done, unit="text", desc="embedding", disable=not progress) as bar,
    ):
        for begin in range(done, len(texts), chunk_rows):
            chunk = texts[begin : begin + chunk_rows]
            tic = time.perf_counter()
            vectors = embed(model, chunk, normalize=normalize, batch_size=batch_size).astype("<f4")
            try:
                f.write(vectors.tobytes())
                f.flush()
                os.fsync(f.fileno())  # a chunk counts as done only once it is on disk
            except OSError as err:  # a full disk: the torn chunk is cut on the next run
                raise naming(err, path) from err
            bar.update(len(chunk))
            if on_chunk is not None:
                on_chunk(begin + len(chunk), len(chunk), time.perf_counter() - tic)
    return read_vectors(path, dim, len(texts), offset)
