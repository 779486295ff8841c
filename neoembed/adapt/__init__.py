"""Unsupervised domain adaptation: a better embedder from a user's documents alone. Pairs are made from the
documents (`pairs`), a held-out share of them is the selection split, and the contrastive trainer adapts the
model on the pairs (`run`)."""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .corpus import (
        Corpus as Corpus,
        CorpusError as CorpusError,
        read_corpus as read_corpus,
        read_texts as read_texts,
    )
    from .pairs import make_pairs as make_pairs
    from .run import (
        PAIRS as PAIRS,
        AdaptResult as AdaptResult,
        Prepared as Prepared,
        run_adapt as run_adapt,
    )
    from .settings import AdaptSettings as AdaptSettings

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
