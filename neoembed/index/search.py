"""Load an index directory (memory-mapped) and search it with text or vectors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from neoembed.faiss_setup import faiss, set_threads

import numpy as np

from neoembed.index import encode
from neoembed.index.errors import IndexingError, IndexMismatchError
from neoembed.index.factory import set_search_params
from neoembed.index.manifest import STORE_FILE, Manifest
from neoembed.index.settings import SearchSettings
from neoembed.index.store import DocStore
from neoembed.vector_file import embed


@dataclass(frozen=True)
class Hit:
    rank: int  # 1 = best
    id: str
    score: float  # inner product (cosine for normalised vectors), or squared L2 distance for metric l2
    text: str
    metadata: dict


def _mmap_flags(factory: str) -> int:
    # IVF indexes map their inverted lists; Flat and HNSW indexes map their code arrays (IndexFlatCodes).
    return faiss.IO_FLAG_MMAP if factory.startswith("IVF") else faiss.IO_FLAG_MMAP_IFC


class SearchIndex:
    """A loaded index directory. The embedder (default: the one named in the manifest) is loaded on the
    first text query and must have the fingerprint the index was built with; `settings` or `fields` as in
    `SearchSettings`, whose `k` is the number of results a search returns unless it is given another."""

    def __init__(self, directory: str | Path, settings: SearchSettings | None = None, /, **fields):
        self.settings = SearchSettings.of(settings, **fields)
        self.directory = Path(directory)
        self.manifest = Manifest.load(self.directory)
        self.manifest.verify(self.directory, checksums=self.settings.verify_checksums)
        self.model_name = self.settings.model or self.manifest.model
        self.threads = set_threads(self.settings.threads)
        path = self.directory / self.manifest.index_file
        if not path.is_file():
            raise IndexingError(
                f"{self.directory}: index file {self.manifest.index_file} named by the manifest is missing"
            )
        flags = _mmap_flags(self.manifest.factory) if self.settings.mmap else 0
        self.index = faiss.read_index(str(path), flags)
        if self.index.ntotal != self.manifest.ntotal or self.index.d != self.manifest.dimension:
            raise IndexingError(
                f"{path}: holds {self.index.ntotal} vectors of dimension {self.index.d}, the manifest says "
                f"{self.manifest.ntotal} of dimension {self.manifest.dimension}"
            )
        set_search_params(self.index, self.manifest.search_params)
        self.store = DocStore(self.directory / STORE_FILE, readonly=True)
        self._model = None

    def _embedder(self):
        if self._model is None:
            model, fingerprint = encode.load_model(self.model_name, compile=self.settings.compile)
            if fingerprint != self.manifest.model_fingerprint:
                raise IndexMismatchError(
                    f"model {self.model_name!r} (fingerprint {fingerprint}) is not the model the index in "
                    f"{self.directory} was built with: {self.manifest.model!r} (fingerprint "
                    f"{self.manifest.model_fingerprint}); query vectors would not be comparable"
                )
            self._model = model
        return self._model

    def encode(self, queries: list[str]) -> np.ndarray:
        return embed(self._embedder(), queries, normalize=self.manifest.normalized)

    def search(self, query: str, k: int | None = None) -> list[Hit]:
        """The top-k documents for one text query, best first."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: list[str], k: int | None = None) -> list[list[Hit]]:
        return self.search_vectors(self.encode(queries), k)

    def search_vectors(self, vectors: np.ndarray, k: int | None = None) -> list[list[Hit]]:
        """Search with query vectors made by the index's model; they are normalised here where the index
        expects it (cosine), so raw model outputs give cosine scores."""
        k = self.settings.k if k is None else k
        vectors = np.array(np.atleast_2d(vectors), dtype="float32", order="C")  # a copy: normalised in place
        if vectors.shape[1] != self.manifest.dimension:
            raise IndexMismatchError(
                f"query vectors have dimension {vectors.shape[1]}, the index in {self.directory} has "
                f"{self.manifest.dimension} ({self.manifest.model})"
            )
        if self.manifest.normalized:
            faiss.normalize_L2(vectors)
        if k < 1:
            raise IndexingError(f"k must be >= 1, got {k}")
        scores, ids = self.index.search(vectors, k)
        results = []
        for row_scores, row_ids in zip(scores, ids):
            kept = [(float(s), int(i)) for s, i in zip(row_scores, row_ids) if i >= 0]
            docs = self.store.get([i for _, i in kept])
            results.append(
                [Hit(r, d.id, s, d.text, d.metadata) for r, ((s, _), d) in enumerate(zip(kept, docs), 1)]
            )
        return results

    def close(self) -> None:
        self.store.close()


def load_index(directory: str | Path, settings: SearchSettings | None = None, /, **fields) -> SearchIndex:
    return SearchIndex(directory, settings, **fields)
