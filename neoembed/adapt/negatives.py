"""Hard negatives for the adaptation's pairs, mined with the base model among the same method's positives.

In-batch negatives drawn from a whole corpus are mostly easy; a negative the base model ranks near a pair's
query teaches the domain's distinctions (the lever of GPL and of COCO-DR's hard-negative round, here without a
cross-encoder). The mining is `data.Miner`, the one `build-data` uses: exact search, and NV-Retriever's
positive-aware rule, which drops a candidate the base model scores above `margin` x the positive (on pseudo
pairs most such candidates are other true answers). Besides that rule, a candidate cut from the query's own
document is never its negative: a method that passes over the documents twice makes two pairs of one document.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from neoembed.adapt.pairs import Sourced
from neoembed.data import Keys, Miner, MiningConfig, text_key

DOCUMENT = "document"  # the relation a pair's query shares with every pair made from its document


def mine_negatives(
    pairs: dict[str, list[Sourced]], *, teacher: str, count: int, margin: float, workdir: Path
) -> tuple[dict[str, list[list[str]]], dict[str, dict[str, int]]]:
    """Up to `count` negatives per pair (hardest first), mined by `teacher` among the positives of the pair's
    own method, and per method what the miner counted: negatives mined, pairs that got fewer than `count`,
    candidates dropped by the margin rule and as cut from the query's own document."""
    miner = Miner(MiningConfig(teacher=teacher, num_negatives=count, margin=margin))
    negatives, counts = {}, {}
    # The embeddings are scratch: a resumed mining of other pairs must not read them back.
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        for method, sourced in pairs.items():
            queries = [query for _, (query, _) in sourced]
            positives = [positive for _, (_, positive) in sourced]
            documents = Keys.from_lists([[document] for document, _ in sourced])
            mined, stats = miner.mine(
                queries,
                _keys(queries),
                positives,
                _keys(positives),
                {DOCUMENT: documents},
                Path(scratch) / method,
            )
            negatives[method] = mined
            counts[method] = {
                "mined": stats.mined,
                "pairs_short": stats.rows_short,
                "dropped_margin": stats.dropped_margin,
                "dropped_same_document": stats.dropped_relation[DOCUMENT],
            }
    return negatives, counts


def _keys(texts: list[str]) -> np.ndarray:
    return np.fromiter((text_key(text) for text in texts), dtype=np.int64, count=len(texts))
