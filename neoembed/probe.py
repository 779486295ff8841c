"""The inference dtype of a loaded embedder, checked against fp32 on a fixed probe batch.

`to_inference_dtype(model, requested)` casts a model loaded in fp32 to the dtype `precision.resolve_precision`
picks (under `auto`: bf16 on GPUs and on CPUs where bf16 measured faster, fp32 elsewhere), after checking that the
lower precision embeds the probe texts within `MIN_COSINE` of fp32. When the check fails:

- under `auto` the model stays in fp32 and a warning is logged: `auto` promises the fastest *safe* choice;
- when the user named bf16/fp16, it is refused with an `InputError`: running a precision the user asked for
  but which changes the embeddings would be silent, and falling back would ignore the request.

Only the encoder is lowered (`lower_encoder`): its token embeddings are cast up to fp32 before pooling, any
dense layer and normalisation, so a normalised embedding has norm 1 to fp32 rounding in every dtype.

Encode, serve, index build/add and the mining teacher all go through here; mteb-eval keeps fp32 by default.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np
import torch

from neoembed.errors import InputError
from neoembed.precision import resolve_precision

log = logging.getLogger(__name__)

MIN_COSINE = 0.999
# Short and long, plain and technical, so the check sees several lengths and vocabularies in one padded batch.
PROBE_TEXTS = [
    "a dog",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "the act of moving something from one place to another by lifting and carrying it",
    "def add(a, b): return a + b",
    "In computing, a hash table is a data structure that maps keys to values using a hash function "
    "to compute an index into an array of buckets, from which the desired value can be found.",
    "réseau de neurones",
    "42",
]


def worst_cosine(reference: np.ndarray, candidate: np.ndarray) -> float:
    """The lowest row-wise cosine between two embedding matrices."""
    reference, candidate = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    dot = (reference * candidate).sum(1)
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1)
    return float((dot / np.maximum(norms, 1e-12)).min())


def probe_embeddings(model) -> np.ndarray:
    return model.encode(PROBE_TEXTS, batch_size=len(PROBE_TEXTS), convert_to_numpy=True).astype(np.float32)


def _features_to_fp32(module, args, features: dict[str, Any]) -> dict[str, Any]:
    return {
        name: value.float() if torch.is_tensor(value) and value.is_floating_point() else value
        for name, value in features.items()
    }


def lower_encoder(model, dtype: torch.dtype):
    """A copy of the sentence-transformers `model` whose encoder (its first module) runs in `dtype` and whose
    later modules (pooling, dense layers, normalisation) run in fp32 on the encoder's output cast up."""
    lowered = copy.deepcopy(model)
    lowered[0].to(dtype)
    lowered[0].register_forward_hook(_features_to_fp32)
    return lowered


def to_inference_dtype(model, requested: str = "auto"):
    """(model, dtype name): `model` (fp32, as loaded) in the checked inference dtype for `requested`."""
    dtype = resolve_precision(requested, model.device.type).weight_dtype
    if dtype == torch.float32:
        return model, "float32"
    name = str(dtype).removeprefix("torch.")
    lowered = lower_encoder(model, dtype)
    cosine = worst_cosine(probe_embeddings(model), probe_embeddings(lowered))
    if cosine >= MIN_COSINE:
        return lowered, name
    message = (
        f"{name} changes this model's embeddings too much: a probe text's cosine to fp32 is {cosine:.4f} "
        f"(< {MIN_COSINE})"
    )
    if requested != "auto":
        raise InputError(message + "; use --dtype float32 (or auto)", param="--dtype")
    log.warning("%s; --dtype auto keeps float32", message)
    return model, "float32"
