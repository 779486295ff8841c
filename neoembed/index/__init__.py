"""FAISS indexing and search: turn a corpus into a tuned, searchable index directory.

    from neoembed.index import build_index, load_index
    build_index(["docs.jsonl"], "my-index", model="minilm")      # auto factory, tuned to recall@10 0.95
    hits = load_index("my-index").search("how do magnets work", k=10)

faiss is imported through `neoembed.faiss_setup`, which sets the BLAS core type first.
"""

from neoembed.index.build import add_documents, build_index, rebuild_index
from neoembed.index.corpus import CorpusReader, Document
from neoembed.index.errors import CorpusError, IndexingError, IndexMismatchError
from neoembed.index.export import export_index
from neoembed.index.factory import choose_factory
from neoembed.index.manifest import Manifest
from neoembed.index.search import Hit, SearchIndex, load_index

__all__ = [
    "CorpusError",
    "CorpusReader",
    "Document",
    "Hit",
    "IndexMismatchError",
    "IndexingError",
    "Manifest",
    "SearchIndex",
    "add_documents",
    "build_index",
    "choose_factory",
    "export_index",
    "load_index",
    "rebuild_index",
]
