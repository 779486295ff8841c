"""FOLDOC, the Free On-line Dictionary of Computing, from Debian's `dict-foldoc`: the cross-source held-out set.

Computing terms and their definitions: a domain WordNet barely covers, written by other people in another
style, so a model fine-tuned on WordNet pairs that merely fits WordNet scores no better here. No training
build reads it, and every build drops texts equal to its held-out queries and definitions (the leakage guard).

The package is a dictd database: `foldoc.index` lines are `headword<TAB>offset<TAB>length` (offset and
length in dictd's base64 digits) into the gzip-compressed `foldoc.dict.dz`. An entry's text is its
headword line(s), a blank line, then the body: `<domain>` tags, `{cross references}`, `[citations]` and a
final `(yyyy-mm-dd)` date. Several headwords (an acronym and its expansion) can point at one entry.
"""

from __future__ import annotations

import functools
import gzip
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from neoembed.data.debian import package_dir

PACKAGE_FILES = "usr/share/dictd"
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_TAG = re.compile(r"<[^<>]*>")
_URL_IN_REF = re.compile(r"\s*\((?:https?|ftp)://[^)]*\)")
_CITATION = re.compile(r"\[[^\]]*\]")
_DATE = re.compile(r"\(\d{4}-\d{2}-\d{2}\)")
MAX_WORDS = 64  # a definition is its first paragraph, cut to this many words (one screenful, ~100 tokens)
MIN_WORDS = 6  # shorter bodies are mostly cross-references ("See {dash}"), not definitions
# The held-out set: its term queries and definitions (FOLDOCDefinitionRetrieval's sizes). A smaller set is a
# prefix of it, so every build's leakage guard, which drops these texts, covers it too.
HELDOUT_QUERIES = 300
HELDOUT_CORPUS = 1500
SEED = 0


@dataclass(frozen=True)
class Entry:
    headwords: tuple[str, ...]
    definition: str


def _has_data(path: Path) -> bool:
    return (path / "foldoc.index").is_file() and (path / "foldoc.dict.dz").is_file()


def foldoc_dir() -> Path:
    """$NEOEMBED_FOLDOC_DIR, /usr/share/dictd, or ~/.cache/neoembed/foldoc filled from the Debian mirror."""
    return package_dir("dict-foldoc", PACKAGE_FILES, _has_data, "NEOEMBED_FOLDOC_DIR", "foldoc")


def _b64(digits: str) -> int:
    value = 0
    for digit in digits:
        value = value * 64 + _B64.index(digit)
    return value


def clean_definition(body: str) -> str:
    """The first paragraph of an entry's body as plain text: tags, citations, dates and reference braces
    removed, whitespace collapsed, cut to MAX_WORDS words."""
    paragraphs = [p for p in re.split(r"\n\s*\n", body.strip()) if p.strip()]
    first = paragraphs[0] if paragraphs else ""
    text = _DATE.sub("", _CITATION.sub("", _TAG.sub("", first)))
    text = _URL_IN_REF.sub("", text).replace("{", "").replace("}", "")
    words = text.split()
    return " ".join(words[:MAX_WORDS])


@functools.lru_cache(maxsize=2)
def _load(path: Path) -> tuple[Entry, ...]:
    data = gzip.decompress((path / "foldoc.dict.dz").read_bytes())
    spans = set()  # the index names an entry once per headword, lower-cased; the entry's own lines keep case
    for line in (path / "foldoc.index").read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and not fields[0].startswith("00"):  # 00-database-*: the database's own notes
            spans.add((_b64(fields[1]), _b64(fields[2])))
    entries = []
    for offset, length in sorted(spans):
        text = data[offset : offset + length].decode("utf-8", errors="replace")
        head, _, body = text.partition("\n\n")  # the headword line(s), a blank line, the body
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
        (e for e in load_entries() if len(e.definition.split()) >= MIN_WORDS), key=lambda e: e.headwords
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
