"""Measure recall@10 against exact search and QPS, and tune an index's search parameter to a target recall.

FAISS's ParameterSpace.explore does a similar sweep, but its criterion cannot leave a query's own document
out of the results, which is what makes corpus vectors usable as held-out queries; the sweep is short, so
it is written here.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from neoembed.faiss_setup import faiss

import numpy as np

from neoembed.index.factory import faiss_metric, search_parameter, set_search_params

K = 10
SINGLE_QUERIES = 200  # one-query-per-call timing uses this many queries


@dataclass
class Point:
    """One search setting and what it measured."""

    value: int | None
    recall_at_10: float
    qps_batch: float
    qps_single: float


def drop_self(ids: np.ndarray, self_ids: np.ndarray | None, k: int) -> np.ndarray:
    """Top-k ids of each row without the query's own id (rows were searched with k + 1)."""
    if self_ids is None:
        return ids[:, :k]
    out = np.empty((len(ids), k), dtype=ids.dtype)
    for row, (found, own) in enumerate(zip(ids, self_ids)):
        kept = found[found != own]
        out[row] = kept[:k] if len(kept) >= k else np.pad(kept, (0, k - len(kept)), constant_values=-1)
    return out


def exact_neighbors(queries: np.ndarray, vectors: np.ndarray, metric: str, self_ids=None, k: int = K):
    """Exact top-k ids (brute force, BLAS), and the batch QPS that took."""
    extra = 0 if self_ids is None else 1
    start = time.perf_counter()
    _, ids = faiss.knn(np.ascontiguousarray(queries), vectors, k + extra, metric=faiss_metric(metric))
    qps = len(queries) / (time.perf_counter() - start)
    return drop_self(ids, self_ids, k), qps


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over queries of |found ∩ truth| / k (k = truth's width)."""
    k = truth.shape[1]
    return float(np.mean([len(set(f[f >= 0]) & set(t[t >= 0])) / k for f, t in zip(found, truth)]))


def measure(
    index, queries: np.ndarray, truth: np.ndarray, self_ids=None, k: int = K
) -> tuple[float, float, float]:
    """(recall@k, batch QPS, single-query QPS) of `index` at its current settings."""
    extra = 0 if self_ids is None else 1
    start = time.perf_counter()
    _, ids = index.search(queries, k + extra)
    qps_batch = len(queries) / (time.perf_counter() - start)
    # One query per call on one thread: a server answers concurrent single queries on separate threads,
    # and OpenMP inside a one-query call mostly waits on the other cores' load rather than speeding it up.
    singles = queries[:SINGLE_QUERIES]
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        start = time.perf_counter()
        for row in range(len(singles)):
            index.search(singles[row : row + 1], k + extra)
        qps_single = len(singles) / (time.perf_counter() - start)
    finally:
        faiss.omp_set_num_threads(threads)
    return recall_at_k(drop_self(ids, self_ids, k), truth), qps_batch, qps_single


def _plateaued(curve: list[Point], tolerance: float = 0.002) -> bool:
    """True when the last two steps together gained less than `tolerance` recall."""
    return len(curve) >= 3 and curve[-1].recall_at_10 - curve[-3].recall_at_10 < tolerance


def tune(index, queries: np.ndarray, truth: np.ndarray, target: float, self_ids=None, on_point=None):
    """Set the index's search parameter to the cheapest value whose recall@10 reaches `target`.

    Values are tried in increasing cost (so decreasing QPS) and the sweep stops at the first that reaches
    the target, or when recall stops improving (lossy codes such as PQ cap it); where no value reaches the
    target, the best-recall value is kept. Returns (params, chosen Point, curve).
    """
    name, values = search_parameter(index)
    if name is None:
        point = Point(None, *measure(index, queries, truth, self_ids))
        return {}, point, [asdict(point)]
    curve: list[Point] = []
    for value in values:
        set_search_params(index, {name: value})
        curve.append(Point(value, *measure(index, queries, truth, self_ids)))
        if on_point is not None:
            on_point(name, curve[-1])
        if curve[-1].recall_at_10 >= target or _plateaued(curve):
            break
    chosen = curve[-1] if curve[-1].recall_at_10 >= target else max(curve, key=lambda p: p.recall_at_10)
    set_search_params(index, {name: chosen.value})
    return {name: chosen.value}, chosen, [asdict(p) for p in curve]
