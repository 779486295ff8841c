"""Load an index's embedder once per process, with the fingerprint that ties it to the index."""

from __future__ import annotations

from functools import lru_cache

from neoembed.compilation import CompileSetting, compile_for_inference
from neoembed.embedder import load_embedder, model_fingerprint


@lru_cache(maxsize=4)
def load_model(name: str, dtype: str = "float32", compile: CompileSetting = "auto"):
    """(SentenceTransformer, fingerprint) for `name`, loaded once per process, in the checked inference dtype
    for `dtype` (`neoembed.probe`), compiled as `compile` says (`neoembed.compilation`). The fingerprint is of
    the weights as stored, before any cast."""
    from neoembed.probe import to_inference_dtype

    model = load_embedder(name)
    fingerprint = model_fingerprint(model)
    model = to_inference_dtype(model, dtype)[0]
    compile_for_inference(model, compile)
    return model, fingerprint


def dimension(model) -> int:
    return model.get_embedding_dimension()
