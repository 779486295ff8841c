"""Train an index on a sample of the vectors, then add them all: the rule that index builds, rebuilds and
adds and the `bench index` candidates share.

FAISS's k-means trains on at most 256 points per centroid by default, so a sample of max(100k, 64 x lists)
vectors trains the coarse quantizer (and SQ/PQ codes) about as well as the full set, much faster.
"""

from __future__ import annotations

import logging

import numpy as np
from tqdm.auto import tqdm

from neoembed.index.factory import nlist

log = logging.getLogger("neoembed.index")

MIN_TRAIN = 100_000
ADD_CHUNK = 100_000  # vectors copied out of the memory-mapped file and added per step


def train_and_add(index, vectors: np.ndarray, *, seed: int = 0):
    """Train `index` (unless trained) on a random sample of `vectors`, then add them all; returns it."""
    n = len(vectors)
    if not index.is_trained:
        size = min(n, max(MIN_TRAIN, 64 * (nlist(index) or 0)))
        rows = np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
        log.info("training on %d of %d vectors", size, n)
        index.train(np.ascontiguousarray(vectors[rows]))
    for begin in tqdm(range(0, n, ADD_CHUNK), desc="adding to index", unit="chunk", disable=n <= ADD_CHUNK):
        index.add(np.ascontiguousarray(vectors[begin : begin + ADD_CHUNK]))
    return index
