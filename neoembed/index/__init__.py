"""FAISS indexing and search: turn a corpus into a tuned, searchable index directory.

    from neoembed.index import build_index, load_index
    build_index(["docs.jsonl"], "my-index", model="minilm")      # auto factory, tuned to recall@10 0.95
    hits = load_index("my-index").search("how do magnets work", k=10)

Each function takes its settings (`BuildSettings`, `SearchSettings`, ...) or their fields as keyword
arguments; the `neoembed index` and `neoembed search` options are generated from the same settings.

faiss is imported through `neoembed.faiss_setup`, which sets the BLAS core type first.
"""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .build import (
        add_documents as add_documents,
        build_index as build_index,
        rebuild_index as rebuild_index,
    )
    from .corpus import (
        CorpusReader as CorpusReader,
        Document as Document,
        wordnet_documents as wordnet_documents,
    )
    from .errors import (
        CorpusError as CorpusError,
        IndexingError as IndexingError,
        IndexMismatchError as IndexMismatchError,
    )
    from .export import export_index as export_index
    from .factory import (
        choose_factory as choose_factory,
        ivf_lists as ivf_lists,
        pq_subquantizers as pq_subquantizers,
    )
    from .manifest import (
        MANIFEST_FILE as MANIFEST_FILE,
        VECTORS_FILE as VECTORS_FILE,
        Manifest as Manifest,
    )
    from .search import (
        Hit as Hit,
        SearchIndex as SearchIndex,
        load_index as load_index,
    )
    from .settings import (
        AddSettings as AddSettings,
        BuildSettings as BuildSettings,
        ExportSettings as ExportSettings,
        RebuildSettings as RebuildSettings,
        SearchSettings as SearchSettings,
    )
    from .train import train_and_add as train_and_add
    from .tune import (
        exact_neighbors as exact_neighbors,
        measure as measure,
        tune as tune,
    )

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
