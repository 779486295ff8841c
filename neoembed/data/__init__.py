"""Contrastive data: manifests, source readers, normalisation, dedup, the leakage guard, hard-negative mining
and the dataset build, with WordNet and FOLDOC as the embedded sources."""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .build import (
        Build as Build,
        BuildConfig as BuildConfig,
        BuildResult as BuildResult,
        build as build,
    )
    from .foldoc import (
        HELDOUT_CORPUS as HELDOUT_CORPUS,
        HELDOUT_QUERIES as HELDOUT_QUERIES,
        foldoc_retrieval as foldoc_retrieval,
        load_entries as load_entries,
    )
    from .jargon import (
        HELDOUT_TERMS as HELDOUT_TERMS,
        jargon_retrieval as jargon_retrieval,
    )
    from .leakage import (
        GuardedTexts as GuardedTexts,
        LeakGuard as LeakGuard,
        read_eval_keys as read_eval_keys,
    )
    from .manifest import load_manifests as load_manifests
    from .manpages import manpages_retrieval as manpages_retrieval
    from .mining import (
        SEARCH_CHUNK as SEARCH_CHUNK,
        Miner as Miner,
        MiningConfig as MiningConfig,
        exact_searcher as exact_searcher,
    )
    from .normalize import (
        KEY_VERSION as KEY_VERSION,
        clean as clean,
        text_key as text_key,
    )
    from .packages import (
        load_descriptions as load_descriptions,
        packages_retrieval as packages_retrieval,
    )
    from .pairs_file import (
        ColumnMap as ColumnMap,
        PairsFileError as PairsFileError,
        is_pairs_path as is_pairs_path,
        open_pairs as open_pairs,
        set_name as set_name,
    )
    from .records import (
        RecordsError as RecordsError,
        load_records as load_records,
    )
    from .relations import Keys as Keys
    from .rescore import RescoreConfig as RescoreConfig
    from .retrieval_sets import RetrievalSet as RetrievalSet, read_test_set as read_test_set
    from .shards import (
        Share as Share,
        resolve_share as resolve_share,
        share_from_environment as share_from_environment,
    )
    from .sources import open_source as open_source
    from .stats import (
        leakage_summary as leakage_summary,
        mining_summary as mining_summary,
        pairs_summary as pairs_summary,
    )
    from .wordnet import (
        Synset as Synset,
        load_synsets as load_synsets,
        sample_order as sample_order,
        split_of as split_of,
    )

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
