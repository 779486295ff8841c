"""Load an embedder once per process and embed texts into float32 arrays, or straight into a vector file."""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from neoembed.embedder import load_embedder, model_fingerprint
from neoembed.index.manifest import append_log
from neoembed.index.store import append_vectors

CHUNK = 2048  # documents embedded (and appended to the vector file) per step


@lru_cache(maxsize=4)
def load_model(name: str):
    """(SentenceTransformer, fingerprint) for `name`, loaded once per process."""
    model = load_embedder(name)
    return model, model_fingerprint(model)


def dimension(model) -> int:
    return model.get_embedding_dimension()


def embed(model, texts: list[str], *, normalize: bool, batch_size: int = 64) -> np.ndarray:
    # sentence-transformers sorts each call's texts by length before batching, so padding stays small.
    vectors = model.encode(
        texts,
        batch_size=batch_size,
        normalize_embeddings=normalize,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.asarray(vectors, dtype="float32").reshape(len(texts), -1)


def embed_to_file(
    model, texts: list[str], path: Path, *, normalize: bool, batch_size: int, start: int = 0, log_dir: Path
) -> None:
    """Embed texts[start:] chunk by chunk, appending each chunk to `path` as soon as it is done.

    An interrupted run keeps every finished chunk, so a rerun can resume at `start` = rows on disk.
    """
    with tqdm(total=len(texts), initial=start, unit="doc", desc="embedding") as bar:
        for begin in range(start, len(texts), CHUNK):
            chunk = texts[begin : begin + CHUNK]
            tic = time.perf_counter()
            append_vectors(path, embed(model, chunk, normalize=normalize, batch_size=batch_size))
            seconds = time.perf_counter() - tic
            bar.update(len(chunk))
            append_log(
                log_dir, {"step": "embed", "rows": begin + len(chunk), "docs_per_s": len(chunk) / seconds}
            )
