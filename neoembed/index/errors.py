"""Errors of the index package: each message names the file, field, row or setting at fault."""

from neoembed.errors import InputError


class IndexingError(InputError):
    """Base class: bad input or an index directory that cannot be used as asked."""


class CorpusError(IndexingError):
    """A corpus that cannot be indexed: missing or unknown file, empty corpus, duplicate ids."""


class IndexMismatchError(IndexingError):
    """A query model or vector that does not match the index (fingerprint, dimension)."""
