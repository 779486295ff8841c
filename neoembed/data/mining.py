"""Hard-negative mining with a teacher embedder and FAISS, using the positive-aware rule (NV-Retriever).

sentence-transformers' `mine_hard_negatives(relative_margin=1 - margin)` implements the same rule, and a test
checks that both pick the same negatives. It is not called here because a build needs what it does not offer:
embeddings written to files chunk by chunk (bounded memory, and a killed build resumes mid-encoding; the
loop is `neoembed.vector_file`, shared with index builds), rows kept in their input order (it regroups rows
by query), positives and their near-duplicates recognised by the normalised text key rather than by exact
string, exclusion of rows that share a relation (`neoembed.data.relations`), and encode/search times and
per-rule counts for the stats.

A candidate is removed by the first rule it meets, in this order, and counted under it: `positive` (the
positive, a near-duplicate, another positive of the query, the query's own text), `relation` (per kind:
its rows share a relation key with the query's rows), `margin` (the teacher's positive-aware rule),
`rescore` (the optional second model's rule, `neoembed.data.rescore`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field

from neoembed.data.relations import Keys, Matcher
from neoembed.data.rescore import RescoreConfig, load_rescorer
from neoembed.recipes import StrictSettings
from neoembed.vector_file import embed_to_file

SEARCH_CHUNK = 8192  # rows per einsum / FAISS add / search-and-select step
POOL_CHUNK = 65_536  # pool rows in RAM at a time during a CPU search (96 MiB at 384 dimensions)


class MiningConfig(StrictSettings):
    """How `build-data` mines hard negatives; each field is the CLI option of the same name."""

    model_config = ConfigDict(frozen=True)

    teacher: str = "minilm"
    """Mining teacher: any sentence-transformers model."""
    num_negatives: int = Field(3, ge=1)
    """Mined negatives per row (top k)."""
    margin: float = Field(0.95, ge=0.0, le=1.0)
    """Drop candidates scoring above margin x the positive's score."""
    batch_size: int = Field(128, ge=1)
    """Teacher encoding batch size."""
    chunk_rows: int = Field(16384, ge=1)
    """Texts encoded between two appends to the embedding file."""
    # The rule drops the top of the list, so this must reach well past k; sentence-transformers' default
    # would be 10 * k + 1.
    candidates: int = Field(100, ge=1)
    """Neighbours searched per query, before the margin rule and the top-k cut."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Teacher dtype: auto is bfloat16 where it has hardware (about 1.8x faster on CPUs with bf16 units), else
    float32; a lower precision is checked against float32 on probe texts (`neoembed.probe`)."""
    rescore: RescoreConfig = RescoreConfig()  # the optional second model; off unless rescore.model is set


@dataclass
class MiningStats:
    queries: int = 0
    pool: int = 0
    candidates: int = 0
    # the positive or a near-duplicate, another positive of the same query, the query's own text
    dropped_positive: int = 0
    dropped_relation: dict = field(default_factory=dict)  # relation kind -> candidates sharing it
    dropped_margin: int = 0
    dropped_rescore: int = 0
    mined: int = 0
    rows_short: int = 0  # rows that got fewer than num_negatives
    seconds: dict = field(
        default_factory=lambda: {"encode": 0.0, "search": 0.0, "select": 0.0, "rescore": 0.0}
    )


class Miner:
    def __init__(self, config: MiningConfig):
        from neoembed.embedder import load_embedder
        from neoembed.precision import local_device
        from neoembed.probe import to_inference_dtype

        self.config = config
        # Each rank of a launch encodes on its own device.
        self.model, _ = to_inference_dtype(load_embedder(config.teacher, device=local_device()), config.dtype)
        self.rescorer = load_rescorer(config.rescore, config.chunk_rows)

    def encode(self, texts: list[str], path: Path) -> np.ndarray:
        """Normalised float32 embeddings in a memory-mapped file; resumes after the last complete chunk."""
        return embed_to_file(
            self.model,
            texts,
            path,
            chunk_rows=self.config.chunk_rows,
            batch_size=self.config.batch_size,
            normalize=True,
            progress=len(texts) > self.config.chunk_rows // 4,
        )

    def mine(
        self,
        queries: list[str],
        query_keys: np.ndarray,
        positives: list[str],
        positive_keys: np.ndarray,
        relations: dict[str, Keys],
        workdir: Path,
    ) -> tuple[list[list[str]], MiningStats]:
        """Up to `num_negatives` mined negatives per row, hardest first, from the pool of the rows' positives.

        `relations` holds, per relation kind, each row's keys (empty: no relations)."""
        cfg, stats = self.config, MiningStats(dropped_relation=dict.fromkeys(relations, 0))
        workdir.mkdir(parents=True, exist_ok=True)
        # Unique queries and pool documents by normalised key, in first-seen order (deterministic).
        query_index, unique_queries = _unique(query_keys)
        pool_index, unique_pool = _unique(positive_keys)
        pool_keys = positive_keys[unique_pool]
        stats.queries, stats.pool = len(unique_queries), len(unique_pool)
        query_texts = [queries[i] for i in unique_queries]
        pool_texts = [positives[i] for i in unique_pool]

        started = time.perf_counter()
        q_emb = self.encode(query_texts, workdir / "queries.f32")
        p_emb = self.encode(pool_texts, workdir / "pool.f32")
        stats.seconds["encode"] += time.perf_counter() - started

        if self.rescorer is not None:
            started = time.perf_counter()
            self.rescorer.begin(query_texts, pool_texts, workdir)
            rescore_threshold = _thresholds(self.rescorer.scores, query_index, pool_index, cfg.rescore.margin)
            stats.seconds["rescore"] += time.perf_counter() - started

        started = time.perf_counter()
        # The hardest (lowest-scoring) positive of a query sets its threshold, as in sentence-transformers.
        threshold = _thresholds(
            lambda q, p: np.einsum("ij,ij->i", q_emb[q], p_emb[p]), query_index, pool_index, cfg.margin
        )
        # Excluded besides the positive itself: other positives of the same query and the query's own text.
        # Near-duplicates of the positive are the positive: the pool is deduplicated by normalised key.
        extra: dict[int, list[int]] = {}
        for q, p in _extra_positives(query_index, pool_index, unique_queries):
            extra.setdefault(int(q), []).append(int(p))
        first_positive = pool_index[unique_queries]
        own_keys = query_keys[unique_queries]
        # A query's relations are those of all its rows, a pool text's those of all rows it is the positive of.
        matchers = {
            kind: Matcher(
                keys.union(query_index, len(unique_queries)), keys.union(pool_index, len(unique_pool))
            )
            for kind, keys in relations.items()
        }
        stats.seconds["select"] += time.perf_counter() - started

        started = time.perf_counter()
        search = exact_searcher(p_emb)
        stats.seconds["search"] += time.perf_counter() - started
        k = min(len(unique_pool), cfg.candidates + 1)
        chosen = np.full((len(unique_queries), cfg.num_negatives), -1, dtype=np.int64)
        # Search and select a chunk of queries at a time: memory stays bounded by the chunk, not the part.
        for lo in range(0, len(unique_queries), SEARCH_CHUNK):
            hi = min(lo + SEARCH_CHUNK, len(unique_queries))
            started = time.perf_counter()
            scores, ids = search(np.ascontiguousarray(q_emb[lo:hi]), k)
            stats.seconds["search"] += time.perf_counter() - started

            started = time.perf_counter()
            valid = ids >= 0
            candidate = np.maximum(ids, 0)
            is_positive = (ids == first_positive[lo:hi, None]) | (
                pool_keys[candidate] == own_keys[lo:hi, None]
            )
            for q in range(lo, hi):
                for p in extra.get(q, ()):
                    is_positive[q - lo] |= ids[q - lo] == p
            is_positive &= valid
            keep = valid & ~is_positive
            query_of = np.broadcast_to(np.arange(lo, hi)[:, None], ids.shape)
            for kind, matcher in matchers.items():
                row, col = np.nonzero(keep)
                related = matcher.shared(query_of[row, col], candidate[row, col])
                keep[row[related], col[related]] = False
                stats.dropped_relation[kind] += int(related.sum())
            too_close = keep & (scores > threshold[lo:hi, None])
            keep &= ~too_close
            stats.seconds["select"] += time.perf_counter() - started
            if self.rescorer is not None:
                started = time.perf_counter()
                # Only the first `candidates` survivors of a query are rescored; the negatives come from them.
                keep &= np.cumsum(keep, axis=1) <= cfg.rescore.candidates
                row, col = np.nonzero(keep)
                vetoed = self.rescorer.scores(row + lo, ids[row, col]) > rescore_threshold[row + lo]
                keep[row[vetoed], col[vetoed]] = False
                stats.dropped_rescore += int(vetoed.sum())
                stats.seconds["rescore"] += time.perf_counter() - started

            started = time.perf_counter()
            keep &= np.cumsum(keep, axis=1) <= cfg.num_negatives
            for query in range(hi - lo):
                picked = ids[query][keep[query]]
                chosen[lo + query, : len(picked)] = picked
            stats.candidates += int(valid.sum())
            stats.dropped_positive += int(is_positive.sum())
            stats.dropped_margin += int(too_close.sum())
            stats.seconds["select"] += time.perf_counter() - started

        started = time.perf_counter()
        mined_per_query = [[pool_texts[i] for i in row if i >= 0] for row in chosen]
        negatives = [mined_per_query[q] for q in query_index]
        stats.mined = sum(len(n) for n in negatives)
        stats.rows_short = sum(len(n) < cfg.num_negatives for n in negatives)
        stats.seconds["select"] += time.perf_counter() - started
        return negatives, stats


def _thresholds(score, query_index: np.ndarray, pool_index: np.ndarray, margin: float) -> np.ndarray:
    """Per unique query: its lowest positive score under `score(queries, pool ids)` less the relative margin."""
    row_scores = np.concatenate(
        [
            score(query_index[s : s + SEARCH_CHUNK], pool_index[s : s + SEARCH_CHUNK])
            for s in range(0, len(query_index), SEARCH_CHUNK)
        ]
    )
    positive_score = np.full(int(query_index.max()) + 1, np.inf, dtype=np.float32)
    np.minimum.at(positive_score, query_index, row_scores.astype(np.float32))
    return positive_score - np.abs(positive_score) * (1.0 - margin)


def _extra_positives(query_index: np.ndarray, pool_index: np.ndarray, unique_queries: np.ndarray):
    """(query, pool id) for positives of a query other than the one in its first row."""
    first_positive = pool_index[unique_queries]
    for row in np.flatnonzero(pool_index != first_positive[query_index]):
        yield query_index[row], pool_index[row]


def _unique(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each element's group, first position of each group), groups in first-seen order."""
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], first[order]


def exact_searcher(pool: np.ndarray):
    """`search(queries, k)` -> (scores, ids) of the exact inner-product top k (embeddings are normalised:
    cosine) over the memory-mapped `pool`.

    On a GPU, faiss's flat index holds the part's pool in GPU memory (every GPU faiss sees). On a CPU the pool
    streams through faiss a slice of `POOL_CHUNK` rows at a time (`faiss.knn` per slice, merged by
    `faiss.ResultHeap`, faiss's tool for sliced datasets), so RAM holds one slice and the heap of a query
    chunk, whatever the pool size; an `IndexFlatIP` would copy the whole pool into RAM.
    """
    from neoembed.faiss_setup import faiss  # sets the BLAS core type before faiss loads

    if getattr(faiss, "get_num_gpus", lambda: 0)() > 0:
        index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatIP(pool.shape[1]))
        for start in range(0, len(pool), SEARCH_CHUNK):
            index.add(np.ascontiguousarray(pool[start : start + SEARCH_CHUNK]))
        return index.search

    def search(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        heap = faiss.ResultHeap(len(queries), k, keep_max=True)
        for start in range(0, len(pool), POOL_CHUNK):
            block = np.ascontiguousarray(pool[start : start + POOL_CHUNK])
            scores, ids = faiss.knn(queries, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
            heap.add_result(scores, ids + start)
        heap.finalize()
        return heap.D, heap.I

    return search
