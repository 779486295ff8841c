"""FOLDOC, the Free On-line Dictionary of Computing, from Debian's `dict-foldoc`: the cross-source held-out set.

Computing terms and their definitions: a domain WordNet barely covers, written by other people in another
style, so a model fine-tuned on WordNet pairs that merely fits WordNet scores no better here. No training
build reads it, and every build drops texts equal to its held-out queries and definitions (the leakage guard).

The package is a dictd database (`dictd`, which reads its entries' text). An entry's text is its
headword line(s), a blank line, then the body: `<domain>` tags, `{cross references}`, `[citations]` and a
final `(yyyy-mm-dd)` date. Several headwords (an acronym and its expansion) can point at one entry.
"""

from __future__ import annotations

import functools
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from neoembed.data import dictd

_TAG = re.compile(r"<[^<>]*>")
_URL_IN_REF = re.compile(r"\s*\((?:https?|ftp)://[^)]*\)")
_CITATION = re.compile(r"\[[^\]]*\]")
_DATE = re.compile(r"\(\d{4}-\d{2}-\d{2}\)")
# The held-out set: its term queries and definitions (FOLDOCDefinitionRetrieval's sizes). A smaller set is a
# prefix of it, so every build's leakage guard, which drops these texts, covers it too.
HELDOUT_QUERIES = 300
HELDOUT_CORPUS = 1500
SEED = 0


@dataclass(frozen=True)
class Entry:
    headwords: tuple[str, ...]
    definition: str


def foldoc_dir() -> Path:
    """$NEOEMBED_FOLDOC_DIR, /usr/share/dictd, or ~/.cache/neoembed/foldoc filled from the Debian mirror."""
    return dictd.database_dir("dict-foldoc", "foldoc", "NEOEMBED_FOLDOC_DIR")


def clean_definition(body: str) -> str:
    """The first paragraph of an entry's body as plain text: tags, citations, dates and reference braces
    removed, whitespace collapsed, cut to `dictd.MAX_WORDS` words."""
    first = next(iter(dictd.paragraphs(body)), "")
    text = _DATE.sub("", _CITATION.sub("", _TAG.sub("", first)))
    return dictd.cut(_URL_IN_REF.sub("", text).replace("{", "").replace("}", ""))


@functools.lru_cache(maxsize=2)
def _load(path: Path) -> tuple[Entry, ...]:
    entries = []
    for text in dictd.entry_texts(path, "foldoc"):
        head, _, body = text.partition("\n\n")  # the headword line(s), a blank line, the body
        # from the entry's own lines, which keep their case (the index lower-cases them)
        headwords = tuple(dict.fromkeys(w.strip() for w in head.splitlines() if w.strip()))
        definition = clean_definition(body)
        if headwords and definition:
            entries.append(Entry(headwords, definition))
    return tuple(entries)


def load_entries(path: Path | str | None = None) -> list[Entry]:
    """Every FOLDOC entry with a definition, in file order."""
    return list(_load(Path(path) if path is not None else foldoc_dir()))


def foldoc_retrieval(
    n_queries: int = HELDOUT_QUERIES, n_corpus: int = HELDOUT_CORPUS
) -> tuple[dict, dict, dict]:
    """A term -> its FOLDOC definition, among `n_corpus` definitions; every entry defining the term (in any
    letter case) is relevant. Entries in a fixed pseudo-random order, the same on every machine, so smaller
    sets are prefixes of larger ones."""
    entries = sorted(
        (e for e in load_entries() if len(e.definition.split()) >= dictd.MIN_WORDS), key=lambda e: e.headwords
    )
    random.Random(SEED).shuffle(entries)
    corpus = entries[:n_corpus]
    defines = defaultdict(set)  # lower-cased term -> ids of the corpus entries it heads
    for i, entry in enumerate(corpus):
        for word in entry.headwords:
            defines[word.lower()].add(f"f{i}")
    queries = {f"q{i}": entry.headwords[0] for i, entry in enumerate(corpus[:n_queries])}
    relevant = {q: defines[term.lower()] for q, term in queries.items()}
    return queries, {f"f{i}": entry.definition for i, entry in enumerate(corpus)}, relevant


def heldout_texts() -> list[str]:
    """The texts of the full held-out set, its terms and its definitions: what every build keeps out of
    training (the leakage guard)."""
    queries, corpus, _ = foldoc_retrieval()
    return [*queries.values(), *corpus.values()]
