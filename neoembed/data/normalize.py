"""Text normalisation, the text key, and the per-row filters with their drop reasons."""

from __future__ import annotations

import functools
import hashlib
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import regex

# Bump when `text_key` changes: cached keys (the leakage guard's) and build fingerprints include it.
KEY_VERSION = "4"
_PAIR_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant: pair = q * mix + p (mod 2**64)
_MASK = (1 << 64) - 1

# Drop reasons, in the order the filters run; stats list them in this order.
REASONS = (
    "malformed",
    "missing_column",  # your pairs file: a row without a mapped column
    "empty",
    "too_short",
    "too_long",
    "same_as_query",
    "low_score",
    "held_out",  # your pairs file: the anchor is in the test split (`pairs_file.is_held_out`)
    "leakage",
    "duplicate",
)


def clean(text: str) -> str:
    """NFC, whitespace runs collapsed to one space, trimmed: what is stored."""
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


# Characters that draw nothing yet are neither Default_Ignorable nor Cf, so no Unicode property finds them.
DRAW_NOTHING = (
    "\u2d7f",  # TIFINAGH CONSONANT JOINER: a combining mark that joins two consonants, no glyph of its own
    "\U0001d159",  # MUSICAL SYMBOL NULL NOTEHEAD: a notehead with no glyph
)


@functools.cache
def _key_table() -> dict[int, str | None]:
    """Characters that draw nothing are dropped, so a word they sit inside stays one word: every
    Default_Ignorable_Code_Point (zero-width spaces and joiners, the combining grapheme joiner, variation
    selectors, Hangul fillers, tag characters, ...), every other format character (Unicode Cf: the
    byte-order mark, Arabic number signs, ...) and `DRAW_NOTHING`. Every other non-alphanumeric character up
    to the CJK symbols block becomes a space, blank look-alikes such as U+2800 BRAILLE PATTERN BLANK among them. One translate
    table: about 3x faster than the equivalent regex, which dominated stage-1 time.

    Python's unicodedata has no Default_Ignorable_Code_Point property; the `regex` package (a transformers
    dependency) does."""
    every_character = "".join(map(chr, range(sys.maxunicode + 1)))
    ignorable = regex.finditer(r"[\p{Default_Ignorable_Code_Point}\p{Cf}]", every_character)
    table: dict[int, str | None] = {cp: " " for cp in range(0x3040) if not chr(cp).isalnum()}
    table |= {ord(match.group()): None for match in ignorable}
    table |= {ord(character): None for character in DRAW_NOTHING}
    return table


def text_key(text: str) -> int:
    """neoembed's one definition of "the same text": a signed 64-bit hash of the text in NFKC (fullwidth
    letters, ligatures and other compatibility forms folded), casefolded, with characters that draw nothing dropped and
    punctuation and spacing removed (collisions: ~1 in 10^19 per pair).

    The build deduplicates by it and guards evaluation texts by it (the leakage guard), and stores it beside
    every text of the records; the contrastive sampler keeps texts with equal keys out of one batch and the
    loss counts them as one candidate. Signed so that it fits parquet, numpy and torch int64 as it is.
    """
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    canonical = " ".join(text.casefold().translate(_key_table()).split())
    return int.from_bytes(hashlib.blake2b(canonical.encode(), digest_size=8).digest(), "little", signed=True)


@functools.cache
def blank_key() -> int:
    """The key of a text that says nothing: only blanks, punctuation and characters that draw nothing."""
    return text_key("")


def pair_key(query_key: int, positive_key: int) -> int:
    """Order-sensitive key of a (query, positive) pair."""
    return (query_key * _PAIR_MIX + positive_key) & _MASK


def pair_keys(query_keys: np.ndarray, positive_keys: np.ndarray) -> np.ndarray:
    """`pair_key` vectorised over int64 key arrays (as uint64, numpy wraps modulo 2**64 like the mask)."""
    with np.errstate(over="ignore"):
        return query_keys.astype(np.uint64) * np.uint64(_PAIR_MIX) + positive_keys.astype(np.uint64)


@dataclass
class Limits:
    min_chars: int
    max_chars: int
    min_score: float | None


def check(
    query: str, positive: str, query_key: int, positive_key: int, score: float | None, limits: Limits
) -> str | None:
    """The first filter a cleaned (query, positive) fails, or None to keep the row. A text with the blank key
    (only blanks, punctuation or characters that draw nothing, e.g. U+2800 alone) is empty, though `clean`
    keeps it."""
    if blank_key() in (query_key, positive_key):
        return "empty"
    if min(len(query), len(positive)) < limits.min_chars:
        return "too_short"
    if max(len(query), len(positive)) > limits.max_chars:
        return "too_long"
    if query_key == positive_key:
        return "same_as_query"
    if limits.min_score is not None and (score is None or score < limits.min_score):
        return "low_score"
    return None


def clean_negatives(
    values,
    query_key: int,
    positive_key: int,
    limits: Limits,
    leak_keys: frozenset | set = frozenset(),
    truncate: Callable[[str], tuple[str, bool]] | None = None,
) -> tuple[list[str], int, int]:
    """Cleaned negatives in source order, without empties, out-of-range lengths, repeats, or copies of the pair;
    the number dropped because they are evaluation texts (`leak_keys`): a given negative can carry a test
    passage into training as surely as a positive can; and the number of kept ones `truncate` cut."""
    kept, seen, leaked, cut_count = [], {query_key, positive_key}, 0, 0
    for value in values:
        text = clean(value) if isinstance(value, str) else ""
        whole_key, cut = None, False
        if truncate is not None and text:
            short, cut = truncate(text)
            whole_key, text = (text_key(text), short) if cut else (None, text)
        if not text or not limits.min_chars <= len(text) <= limits.max_chars:
            continue
        key = text_key(text)
        if key == blank_key():
            continue
        if key in leak_keys or whole_key in leak_keys:
            leaked += 1
        elif key not in seen:
            seen.add(key)
            kept.append(text)
            cut_count += cut
    return kept, leaked, cut_count
