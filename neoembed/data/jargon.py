"""The Jargon File (version 4.4.7), from Debian's `dict-jargon`: the third held-out corpus of `bench adapt`.

Hacker slang and its lore, defined in a voice of its own, unlike FOLDOC's or the package maintainers'. No
training build reads it, and `neoembed adapt` always guards its held-out term queries (`jargon_retrieval`), as it
guards FOLDOC's.

The package is a dictd database (`dictd`, which reads its entries' text). An entry's text is its headword,
header lines of pronunciation and part of speech (` /dee·rez'/, n.`), a blank line, then the body's
paragraphs: numbered senses (`1. `), each opening with usage or etymology notes in brackets (`[common]`,
`[from the movie Tron]`) and perhaps a part of speech again (`vt.`); `{cross references}`; and variant forms
in a paragraph of their own (`(also derez)`, `alt.: NOP /nop/`). Each headword heads one entry.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from neoembed.data import dictd

HELDOUT_TERMS = 300  # JargonDefinitionRetrieval's queries: the terms `neoembed adapt` always guards
# What a sense opens with before its text: a sense number (`1. `; once `1, `), a part of speech (those of the
# header lines, as `n.` or `v.,n.`, with `obs.`; alone, a paragraph of its own), a pronunciation (`/kluhj/`),
# the punctuation a note leaves behind (`[...]. Not knowing ...`), or a sentence of variant forms.
_PARTS_OF_SPEECH = r"n|v|vt|vi|adj|adv|interj|excl|pref|suff|infix|prov|imp|quant|abbrev|prep|conj|cav|pl|obs"
_OPENING = re.compile(
    rf"\d+[.,]\s|(?:(?:{_PARTS_OF_SPEECH})\.,?\s*)+(?=\W|[A-Z]|$)|/[^/]+/(?=\s)\s*|[.,;:]\s*"
    r"|(?:alt|var)\.: [^.]*\.\s"  # `alt.: marketing slime, marketdroid. A member ...`
)
# A paragraph of variant forms only, perhaps with a note after them (`(also mail bomb) [Usenet]`)
_VARIANTS = re.compile(r"(?:\([^()]*\)\.?|(?:alt|var)\.: [^.]*)(?:\s*\[[^\[\]]*\])*")


@dataclass(frozen=True)
class Entry:
    term: str
    definition: str


def jargon_dir() -> Path:
    """$NEOEMBED_JARGON_DIR, /usr/share/dictd, or ~/.cache/neoembed/jargon filled from the Debian mirror."""
    return dictd.database_dir("dict-jargon", "jargon", "NEOEMBED_JARGON_DIR")


def _note_end(text: str) -> int:
    """Where the bracketed note `text` opens with ends (brackets nest: `[for ‘[paper] Tape’]`); one left open
    by a slip of the source ends at a parenthesis closing it instead (`[abbreviation, “Basic ...”) A
    programming language`), else at its first sentence (`[portmanteau of ‘spam’. Massive floods ...`)."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            return i + 1
    ends = [end + 1 for end in (_unopened_parenthesis(text), text.find(". ")) if end > 0]
    return min(ends, default=len(text))


def _unopened_parenthesis(text: str) -> int:
    """The index of the first `)` in `text` that no `(` before it opens, or -1."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return i
    return -1


def _strip_opening(text: str) -> str:
    """`text` without the sense numbers, notes and parts of speech it opens with, in any order."""
    while text:
        if text.startswith("["):
            text = text[_note_end(text) :].lstrip()
        elif opening := _OPENING.match(text):
            text = text[opening.end() :]
        else:
            break
    return text


def clean_definition(body: str) -> str:
    """The first paragraph of an entry's body that defines (not only variant forms), as plain text: its
    opening sense number, notes and part of speech removed, reference braces removed, whitespace collapsed,
    cut to `dictd.MAX_WORDS` words."""
    for paragraph in dictd.paragraphs(body):
        text = _strip_opening(" ".join(paragraph.split()))
        if text and not _VARIANTS.fullmatch(text):
            return dictd.cut(text.replace("{", "").replace("}", "").replace("\xad", ""))
    return ""


@functools.lru_cache(maxsize=2)
def _load(path: Path) -> tuple[Entry, ...]:
    entries = []
    for text in dictd.entry_texts(path, "jargon"):
        head, _, body = text.partition("\n\n")  # the headword, its header lines, a blank line, the body
        term, definition = head.split("\n", 1)[0].strip(), clean_definition(body)
        if term and len(definition.split()) >= dictd.MIN_WORDS:
            entries.append(Entry(term, definition))
    return tuple(entries)


def load_entries(path: Path | str | None = None) -> list[Entry]:
    """Every Jargon File entry with a definition (`dictd.MIN_WORDS` words or more: the shorter are mostly
    "See {foo}." or "Syn. {foo}."), in file order."""
    return list(_load(Path(path) if path is not None else jargon_dir()))


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def jargon_retrieval(n_queries: int = HELDOUT_TERMS, n_corpus: int | None = None) -> tuple[dict, dict, dict]:
    """A term -> its definition, among every distinct definition (the first `n_corpus` of them, if given).

    Entries are taken in a fixed pseudo-random order (a hash of the term, the same on every machine), so a
    smaller set is a prefix of a larger one and the first `n_queries` terms are a sample of the whole file.
    A definition two entries share is one document, relevant to both their terms; a term two entries have
    (in any letter case) is one query, both its definitions relevant: no query has a relevant document that
    the corpus repeats under another id."""
    entries = sorted(
        load_entries(), key=lambda e: (hashlib.sha256(_key(e.term).encode()).digest(), e.definition)
    )
    ids: dict[str, str] = {}  # definition key -> document id
    corpus: dict[str, str] = {}
    heads: defaultdict[str, set[str]] = defaultdict(set)  # term key -> ids of the documents it heads
    terms: dict[str, str] = {}  # term key -> the term as first met
    for entry in entries:
        key = _key(entry.definition)
        if key not in ids:
            if n_corpus is not None and len(ids) == n_corpus:
                continue
            ids[key] = f"j{len(ids)}"
            corpus[ids[key]] = entry.definition
        heads[_key(entry.term)].add(ids[key])
        terms.setdefault(_key(entry.term), entry.term)
    held_out = list(terms.items())[:n_queries]
    queries = {f"q{i}": term for i, (_, term) in enumerate(held_out)}
    relevant = {f"q{i}": heads[key] for i, (key, _) in enumerate(held_out)}
    return queries, corpus, relevant
