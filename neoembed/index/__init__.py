"""FAISS indexing and search: turn a corpus into a tuned, searchable index directory.

    from neoembed.index import build_index, load_index
    build_index(["docs.jsonl"], "my-index", model="minilm")      # auto factory, tuned to recall@10 0.95
    hits = load_index("my-index").search("how do magnets work", k=10)

Each function takes its settings (`BuildSettings`, `SearchSettings`, ...) or their fields as keyword
arguments; the `neoembed index` and `neoembed search` options are generated from the same settings.

faiss is imported through `neoembed.faiss_setup`, which sets the BLAS core type first.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "build": ["add_documents", "build_index", "rebuild_index"],
        "corpus": ["CorpusReader", "Document", "wordnet_documents"],
        "errors": ["CorpusError", "IndexMismatchError", "IndexingError"],
        "export": ["export_index"],
        "factory": ["choose_factory", "ivf_lists", "pq_subquantizers"],
        "manifest": ["MANIFEST_FILE", "VECTORS_FILE", "Manifest"],
        "search": ["Hit", "SearchIndex", "load_index"],
        "settings": ["AddSettings", "BuildSettings", "ExportSettings", "RebuildSettings", "SearchSettings"],
        "train": ["train_and_add"],
        "tune": ["exact_neighbors", "measure", "tune"],
    },
)
