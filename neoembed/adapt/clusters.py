"""Topic-clustered batches for the adaptation (`pairs.clusters`): every training batch drawn from one cluster of
the documents, so its in-batch negatives are texts of the same topic.

Across a whole corpus most in-batch negatives are easy: a definition of a network protocol against one of a
programming language. Drawn from one topic, they teach the domain's distinctions at no cost per step (mined
hard negatives cost one more text per pair in every step). This is TAS-B's topic-aware sampling (Hofstätter
et al. 2021) on COCO-DR's clusters of the target corpus (Yu et al. 2022). The documents are clustered once,
with the base model, by k-means over their normalised embeddings (scikit-learn's); each (method, cluster) is
then a training source of its own, and the trainer's one-source-per-step sampler does the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MIN_BATCHES = (
    2  # batches of distinct texts a cluster's pairs of one method must fill to be a source of its own
)


def cluster_count(setting: int | str, rows: int, batch_size: int, batches: int = 4) -> int:
    """How many clusters `pairs.clusters` asks for: auto gives each cluster about `batches` batches of a
    method's `rows` pairs; 0 or 1: no clustering."""
    return max(1, rows // (batches * batch_size)) if setting == "auto" else max(1, int(setting))


def document_clusters(
    documents: Sequence[str], model: str, count: int, *, seed: int, max_length: int, batch_size: int = 64
) -> np.ndarray:
    """Each document's cluster (0..count-1): k-means over `model`'s normalised embeddings of them."""
    from sklearn.cluster import KMeans

    from neoembed.embedder import load_embedder
    from neoembed.precision import local_device
    from neoembed.probe import to_inference_dtype

    encoder, _ = to_inference_dtype(load_embedder(model, device=local_device(), max_seq_length=max_length))
    vectors = encoder.encode(
        list(documents), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=True
    )
    kmeans = KMeans(n_clusters=count, n_init=1, random_state=seed)
    return kmeans.fit_predict(np.asarray(vectors, dtype=np.float32))


def cluster_sources(
    documents: dict[str, list[int]], clusters: np.ndarray, batch_size: int
) -> dict[str, tuple[str, list[int]]]:
    """Source name -> (method, positions in the method's pairs): each method's pairs split by the cluster of
    the document each was made from (`documents`: method -> each pair's document), a source `method.NN` per
    cluster. Clusters whose pairs fill fewer than MIN_BATCHES batches are pooled into `method.mixed`; a pool
    too small for MIN_BATCHES batches itself joins the method's smallest cluster. No source is smaller than
    that: one batch's worth of rows may not hold one batch of distinct texts (a corpus's boilerplate repeats),
    and the trainer's sampler stops on a source that cannot fill a batch."""
    sources: dict[str, tuple[str, list[int]]] = {}
    for method, made_from in documents.items():
        by_cluster: dict[int, list[int]] = {}
        for position, document in enumerate(made_from):
            by_cluster.setdefault(int(clusters[document]), []).append(position)
        own = {c: rows for c, rows in sorted(by_cluster.items()) if len(rows) >= MIN_BATCHES * batch_size}
        pooled = [row for c, rows in sorted(by_cluster.items()) if c not in own for row in rows]
        if own and 0 < len(pooled) < MIN_BATCHES * batch_size:
            smallest = min(own, key=lambda c: len(own[c]))
            own[smallest] = sorted(own[smallest] + pooled)
            pooled = []
        sources |= {f"{method}.{c:02d}": (method, rows) for c, rows in own.items()}
        if pooled:
            sources[f"{method}.mixed"] = (method, pooled)
    return sources
