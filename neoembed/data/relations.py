"""Relation keys: what rows have in common that makes one row's positive a plausible answer to another's query.

A manifest names relation columns (`mapping.relations`: a synset id, the lemmas, a question thread); each
value becomes a 64-bit key, and mining never takes a candidate whose rows share a key of any kind with the
query's rows. Keys of one kind are held as CSR arrays (row i's keys are `keys[offsets[i]:offsets[i + 1]]`),
so a part of 100k rows with a few keys each costs a few MB and is compared without Python loops.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


def relation_key(value) -> int:
    """The signed 64-bit key of one relation value (exact text: ids are not normalised like texts)."""
    return int.from_bytes(hashlib.blake2b(str(value).encode(), digest_size=8).digest(), "little", signed=True)


@dataclass(frozen=True)
class Keys:
    """One relation kind's keys per row, as CSR arrays."""

    offsets: np.ndarray  # int64, rows + 1
    keys: np.ndarray  # int64

    @classmethod
    def from_lists(cls, rows: list[list[int]]) -> Keys:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        keys = np.fromiter((k for r in rows for k in r), dtype=np.int64, count=int(lengths.sum()))
        return cls(np.concatenate([[0], np.cumsum(lengths)]), keys)

    @classmethod
    def from_arrow(cls, array) -> Keys:
        """From a pyarrow list<int64> array (nulls: no keys)."""
        import pyarrow.compute as pc

        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy().astype(np.int64)
        keys = pc.list_flatten(array).to_numpy(zero_copy_only=False).astype(np.int64)
        return cls(np.concatenate([[0], np.cumsum(lengths)]), keys)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def union(self, group: np.ndarray, count: int) -> Keys:
        """The keys of `count` groups, each the union over the rows `r` with `group[r]` equal to it."""
        owner = np.repeat(group, self.lengths)
        order = np.lexsort((self.keys, owner))
        owner, keys = owner[order], self.keys[order]
        fresh = np.ones(len(keys), dtype=bool)
        fresh[1:] = (owner[1:] != owner[:-1]) | (keys[1:] != keys[:-1])
        owner, keys = owner[fresh], keys[fresh]
        return Keys(np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=count))]), keys)


class Matcher:
    """Which (query, document) pairs share a key of one kind: queries and documents are groups of rows."""

    def __init__(self, queries: Keys, documents: Keys):
        # Dense ids for the keys, so (document, key) packs into one int64 that a sorted array can look up.
        vocabulary, dense = np.unique(np.concatenate([queries.keys, documents.keys]), return_inverse=True)
        self.size = max(len(vocabulary), 1)
        self.queries = queries
        self.query_ids = dense[: len(queries.keys)]
        document = np.repeat(np.arange(len(documents.lengths), dtype=np.int64), documents.lengths)
        self.document_codes = np.sort(document * self.size + dense[len(queries.keys) :])

    def shared(self, query: np.ndarray, document: np.ndarray) -> np.ndarray:
        """For each pair (query[i], document[i]): whether the two share a key. Cost: the query's keys per pair."""
        found = np.zeros(len(query), dtype=bool)
        if not len(self.document_codes):
            return found
        lengths = self.queries.lengths[query]
        pair = np.repeat(np.arange(len(query)), lengths)
        # The position of each of a pair's query keys in `keys`: its query's offset plus its rank in the pair.
        rank = np.arange(len(pair)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        codes = document[pair] * self.size + self.query_ids[self.queries.offsets[query][pair] + rank]
        at = np.searchsorted(self.document_codes, codes)
        hit = self.document_codes[np.minimum(at, len(self.document_codes) - 1)] == codes
        found[pair[hit]] = True
        return found
