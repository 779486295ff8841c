"""FAISS indexing and search: turn a corpus into a tuned, searchable index directory.

    from neoembed.index import build_index, load_index
    build_index(["docs.jsonl"], "my-index", model="minilm")      # auto factory, tuned to recall@10 0.95
    hits = load_index("my-index").search("how do magnets work", k=10)

Each function takes its settings (`BuildSettings`, `SearchSettings`, ...) or their fields as keyword
arguments; the `neoembed index` and `neoembed search` options are generated from the same settings.

faiss is imported through `neoembed.faiss_setup`, which sets the BLAS core type first.
"""

from neoembed.index.build import add_documents, build_index, rebuild_index
from neoembed.index.corpus import CorpusReader, Document
from neoembed.index.errors import CorpusError, IndexingError, IndexMismatchError
from neoembed.index.export import export_index
from neoembed.index.factory import choose_factory
from neoembed.index.manifest import Manifest
from neoembed.index.search import Hit, SearchIndex, load_index
from neoembed.index.settings import (
    AddSettings,
    BuildSettings,
    ExportSettings,
    RebuildSettings,
    SearchSettings,
)

__all__ = [
    "AddSettings",
    "BuildSettings",
    "CorpusError",
    "CorpusReader",
    "Document",
    "ExportSettings",
    "Hit",
    "IndexMismatchError",
    "IndexingError",
    "Manifest",
    "RebuildSettings",
    "SearchIndex",
    "SearchSettings",
    "add_documents",
    "build_index",
    "choose_factory",
    "export_index",
    "load_index",
    "rebuild_index",
]
