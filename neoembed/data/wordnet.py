"""Read WordNet 3.0 synsets from Debian's `wordnet-base` files, installing them without root where missing.

WordNet is the project's embedded real-English source: the contrastive builder turns it into pairs and the
evaluation uses its held-out synsets. Only the four `data.*` files are read; their line format is
`offset lex_filenum ss_type w_cnt word lex_id [word lex_id ...] p_cnt [pointers ...] [frames ...] | gloss`,
where the gloss part holds the definition followed by quoted example sentences.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from neoembed.data.debian import PackageDataError, package_dir
from neoembed.errors import RunError

SYSTEM_DIR = "usr/share/wordnet"  # in the package, and under / when installed
POS_FILES = ("noun", "verb", "adj", "adv")
HELDOUT_PERCENT = 10

# Adjective position markers such as "galore(ip)" or "elect(p)" are syntax, not part of the lemma.
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")
_QUOTED = re.compile(r'"([^"]+)"')


class WordNetError(RunError):
    """WordNet data missing or unreadable; the message says where it looked and what to do."""


@dataclass(frozen=True)
class Synset:
    id: str  # "<offset>-<ss_type>", e.g. "00001740-a": unique across the four data files
    pos: str  # n, v, a, s (adjective satellite) or r
    lemmas: tuple[str, ...]
    gloss: str
    examples: tuple[str, ...]


def _has_data(path: Path) -> bool:
    return all((path / f"data.{pos}").is_file() for pos in POS_FILES)


def wordnet_dir() -> Path:
    """Directory holding WordNet's data files: $NEOEMBED_WORDNET_DIR, /usr/share/wordnet, or the cache dir
    (~/.cache/neoembed/wordnet), filled from Debian's wordnet-base package when nothing else has the data."""
    try:
        return package_dir("wordnet-base", SYSTEM_DIR, _has_data, "NEOEMBED_WORDNET_DIR", "wordnet")
    except PackageDataError as err:
        raise WordNetError(f"{err} (WordNet needs data.noun, data.verb, data.adj and data.adv)") from err


def _parse_line(line: str, where: str) -> Synset:
    head, sep, tail = line.partition("|")
    fields = head.split()
    try:
        offset, ss_type, w_cnt = fields[0], fields[2], int(fields[3], 16)
        words = fields[4 : 4 + 2 * w_cnt : 2]
    except (IndexError, ValueError) as err:
        raise WordNetError(f"{where}: malformed synset line: {line[:80]!r}") from err
    if not sep or len(words) != w_cnt:
        raise WordNetError(f"{where}: malformed synset line: {line[:80]!r}")
    lemmas = tuple(_ADJ_MARKER.sub("", w).replace("_", " ") for w in words)
    quote = tail.find('"')
    gloss = (tail if quote < 0 else tail[:quote]).strip().rstrip(";").strip()
    examples = tuple(e.strip() for e in _QUOTED.findall(tail[quote:]) if e.strip()) if quote >= 0 else ()
    return Synset(id=f"{offset}-{ss_type}", pos=ss_type, lemmas=lemmas, gloss=gloss, examples=examples)


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> tuple[Synset, ...]:
    synsets = []
    for pos in POS_FILES:
        file = path / f"data.{pos}"
        with file.open(encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.startswith("  "):  # licence header
                    continue
                synsets.append(_parse_line(line, f"{file}:{lineno}"))
    return tuple(synsets)


def load_synsets(path: Path | str | None = None) -> list[Synset]:
    """All synsets of the WordNet data in `path` (default `wordnet_dir()`), in file order."""
    return list(_load(Path(path) if path is not None else wordnet_dir()))


def _hash(synset_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(synset_id.encode(), digest_size=8).digest(), "big")


def sample_order(synsets: list[Synset]) -> list[Synset]:
    """`synsets` in a fixed pseudo-random order (a hash of the id, the same on every machine): any prefix of it
    is a sample of every part of speech and of the whole hierarchy."""
    return sorted(synsets, key=lambda s: _hash(s.id))


def split_of(synset_id: str) -> str:
    """ "train" or "heldout": a stable hash of the synset id puts about 10% of synsets in "heldout"."""
    bucket = _hash(synset_id) % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"
