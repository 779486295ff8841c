"""An index directory served next to its model: query vectors come from the server's batcher.

The index package owns the format and the search; this module checks, once at start-up, that the served
model is the one the index was built with (same fingerprint, computed by the inference process from the
weights as stored), so /search never compares vectors from two different embedding spaces.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from neoembed.errors import InputError
from neoembed.index import load_index
from neoembed.serve.schemas import IndexInfo


class ServedIndex:
    def __init__(self, directory: Path, fingerprint: str, *, threads: int | None) -> None:
        self._index = load_index(directory, threads=threads)
        manifest = self._index.manifest
        if fingerprint != manifest.model_fingerprint:
            self._index.close()
            raise InputError(
                f"--index {directory} was built with {manifest.model!r} (fingerprint "
                f"{manifest.model_fingerprint}), not with the served model (fingerprint {fingerprint}); "
                "its vectors are not comparable with this model's queries. Serve that model, or rebuild "
                "the index with this one",
                param="--index",
            )
        self.info = IndexInfo(
            directory=str(directory),
            documents=manifest.ntotal,
            metric=manifest.metric,
            factory=manifest.factory,
            search_params=manifest.search_params,
        )

    def search(self, vectors: np.ndarray, k: int) -> list[list[dict]]:
        """Top-k hits per query vector (raw model output; the index normalises where it expects to)."""
        return [[asdict(hit) for hit in hits] for hits in self._index.search_vectors(vectors, k)]

    def close(self) -> None:
        self._index.close()
