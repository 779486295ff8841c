"""Contrastive data: manifests, source readers, normalisation, dedup, the leakage guard, hard-negative mining
and the dataset build, with WordNet and FOLDOC as the embedded sources."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "build": ["Build", "BuildConfig", "BuildResult", "build"],
        "foldoc": ["HELDOUT_CORPUS", "HELDOUT_QUERIES", "foldoc_retrieval"],
        "leakage": ["GuardedTexts"],
        "manifest": ["load_manifests"],
        "manpages": ["manpages_retrieval"],
        "mining": ["MiningConfig", "SEARCH_CHUNK", "exact_searcher"],
        "normalize": ["KEY_VERSION", "clean", "text_key"],
        "packages": ["packages_retrieval"],
        "records": ["RecordsError", "load_records"],
        "rescore": ["RescoreConfig"],
        "shards": ["Share", "resolve_share", "share_from_environment"],
        "sources": ["open_source"],
        "stats": ["leakage_summary", "mining_summary"],
        "wordnet": ["Synset", "load_synsets", "sample_order", "split_of"],
    },
)
