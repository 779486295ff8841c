"""Load an index's embedder once per process, with the fingerprint that ties it to the index."""

from __future__ import annotations

from functools import lru_cache

from neoembed.embedder import load_embedder, model_fingerprint


@lru_cache(maxsize=4)
def load_model(name: str):
    """(SentenceTransformer, fingerprint) for `name`, loaded once per process."""
    model = load_embedder(name)
    return model, model_fingerprint(model)


def dimension(model) -> int:
    return model.get_embedding_dimension()
