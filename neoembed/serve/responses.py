"""Embedding post-processing and response bodies, written from the float32 array without a Python float per
value.

base64 rows are the array's own little-endian float32 bytes. Float rows are numpy's shortest decimal of each
float32 value (formatted in C by `astype(str)`), which reads back as the same float32: what OpenAI sends, and
about half the bytes of `json.dumps(row.tolist())`, which prints the 17 digits of each value's float64.
Bodies are assembled row by row and built on a worker thread by the routes: a large float response then never
holds the event loop, or the GIL, for long.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np


def shape(vectors: np.ndarray, *, dimensions: int | None, normalize: bool) -> np.ndarray:
    """Keep the first `dimensions` components (Matryoshka truncation) and L2-normalise if asked."""
    if dimensions is not None:
        vectors = vectors[:, :dimensions]
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, 1e-12)
    # Little-endian float32: what the openai client's base64 decoder (numpy frombuffer "float32") expects.
    return np.ascontiguousarray(vectors, dtype="<f4")


def openai_body(
    vectors: np.ndarray, *, encoding_format: str, model: str, prompt_tokens: int, truncated: list[int]
) -> bytes:
    if encoding_format == "base64":
        encoded = ['"' + base64.b64encode(row).decode() + '"' for row in vectors]
    else:
        encoded = float_rows(vectors)
    data = ",".join(
        f'{{"object":"embedding","index":{i},"embedding":{embedding}}}' for i, embedding in enumerate(encoded)
    )
    tail: dict[str, Any] = {
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    if truncated:  # not part of OpenAI's schema; clients ignore unknown fields
        tail["truncated_inputs"] = truncated
    return f'{{"object":"list","data":[{data}],{json.dumps(tail)[1:]}'.encode()


def float_rows(vectors: np.ndarray) -> list[str]:
    """Each row as a JSON array of its values' shortest float32 decimals."""
    return ["[" + ",".join(row) + "]" for row in vectors.astype(str).tolist()]


def rows_body(vectors: np.ndarray) -> bytes:
    """A JSON list of float lists: the TEI /embed response."""
    return ("[" + ",".join(float_rows(vectors)) + "]").encode()
