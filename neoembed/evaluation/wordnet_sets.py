"""WordNet's held-out synsets and the example -> gloss retrieval set drawn from them, without mteb.

`local_tasks` wraps them as mteb tasks; contrastive training scores the same set through sentence-transformers'
evaluator, so a machine without mteb (the GPU machine of docs/benchmarks/gpu.md) still fine-tunes and
evaluates.
"""

from __future__ import annotations

import functools
import random

from neoembed.data import Synset, load_synsets, split_of

SEED = 0


@functools.cache  # every WordNet task and held-out set asks; the split hashes all 117k synset ids
def heldout_synsets() -> tuple[Synset, ...]:
    """The held-out synsets in a fixed pseudo-random order (same on every machine)."""
    synsets = sorted((s for s in load_synsets() if split_of(s.id) == "heldout"), key=lambda s: s.id)
    random.Random(SEED).shuffle(synsets)
    return tuple(synsets)


def wordnet_example_retrieval(n_queries: int = 500, n_corpus: int = 2000) -> tuple[dict, dict, dict]:
    """Held-out WordNet synsets: an example sentence -> the gloss of its synset among `n_corpus` glosses."""
    synsets = [s for s in heldout_synsets() if s.gloss]
    with_examples = [s for s in synsets if s.examples][:n_queries]
    query_ids = {s.id for s in with_examples}
    corpus_synsets = (
        with_examples + [s for s in synsets if s.id not in query_ids][: max(0, n_corpus - len(with_examples))]
    )
    queries = {f"q-{s.id}": s.examples[0] for s in with_examples}
    corpus = {s.id: s.gloss for s in corpus_synsets}
    relevant = {f"q-{s.id}": {s.id} for s in with_examples}
    return queries, corpus, relevant
