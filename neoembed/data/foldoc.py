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
import re
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
