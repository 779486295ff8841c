"""Read WordNet 3.0 synsets from Debian's `wordnet-base` files, installing them without root where missing.

WordNet is the project's embedded real-English source: the contrastive builder turns it into pairs and the
evaluation uses its held-out synsets. Only the four `data.*` files are read; their line format is
`offset lex_filenum ss_type w_cnt word lex_id [word lex_id ...] p_cnt [pointers ...] [frames ...] | gloss`,
where each pointer is `symbol offset pos source/target` and the gloss part holds the definition followed by
quoted example sentences.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from neoembed.data.debian import PackageDataError, package_dir
from neoembed.errors import RunError

SYSTEM_DIR = "usr/share/wordnet"  # in the package, and under / when installed
POS_FILES = ("noun", "verb", "adj", "adv")
HELDOUT_PERCENT = 10
PAIR_KINDS = ("example_gloss", "lemmas_gloss", "synonyms")

# Adjective position markers such as "galore(ip)" or "elect(p)" are syntax, not part of the lemma.
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")
_QUOTED = re.compile(r'"([^"]+)"')
# Pointer symbols kept: hypernym and instance hypernym (nouns, verbs), similar-to (adjective heads <->
# satellites). Their targets are whole synsets, so the plausible answers to a query about one synset.
_HYPERNYM = ("@", "@i")
_SIMILAR = "&"


class WordNetError(RunError):
    """WordNet data missing or unreadable; the message says where it looked and what to do."""


@dataclass(frozen=True)
class Synset:
    id: str  # "<offset>-<ss_type>", e.g. "00001740-a": unique across the four data files
    pos: str  # n, v, a, s (adjective satellite) or r
    lemmas: tuple[str, ...]
    gloss: str
    examples: tuple[str, ...]
    hypernyms: tuple[str, ...] = ()  # ids of its hypernym and instance-hypernym synsets
    similar: tuple[str, ...] = ()  # ids of its similar-to synsets (adjectives)


def _has_data(path: Path) -> bool:
    return all((path / f"data.{pos}").is_file() for pos in POS_FILES)


def wordnet_dir() -> Path:
    """Directory holding WordNet's data files: $NEOEMBED_WORDNET_DIR, /usr/share/wordnet, or the cache dir
    (~/.cache/neoembed/wordnet), filled from Debian's wordnet-base package when nothing else has the data."""
    try:
        return package_dir("wordnet-base", SYSTEM_DIR, _has_data, "NEOEMBED_WORDNET_DIR", "wordnet")
    except PackageDataError as err:
        raise WordNetError(f"{err} (WordNet needs data.noun, data.verb, data.adj and data.adv)") from err


def _parse_line(line: str, where: str) -> tuple[Synset, list[tuple[str, str, str]]]:
    """The synset of one data line, and its kept pointers as (symbol, target offset, target pos)."""
    head, sep, tail = line.partition("|")
    fields = head.split()
    try:
        offset, ss_type, w_cnt = fields[0], fields[2], int(fields[3], 16)
        words = fields[4 : 4 + 2 * w_cnt : 2]
        p_at = 4 + 2 * w_cnt
        p_cnt = int(fields[p_at])
        pointers = [tuple(fields[i : i + 3]) for i in range(p_at + 1, p_at + 1 + 4 * p_cnt, 4)]
    except (IndexError, ValueError) as err:
        raise WordNetError(f"{where}: malformed synset line: {line[:80]!r}") from err
    if not sep or len(words) != w_cnt or any(len(p) != 3 for p in pointers):
        raise WordNetError(f"{where}: malformed synset line: {line[:80]!r}")
    lemmas = tuple(_ADJ_MARKER.sub("", w).replace("_", " ") for w in words)
    quote = tail.find('"')
    gloss = (tail if quote < 0 else tail[:quote]).strip().rstrip(";").strip()
    examples = tuple(e.strip() for e in _QUOTED.findall(tail[quote:]) if e.strip()) if quote >= 0 else ()
    synset = Synset(id=f"{offset}-{ss_type}", pos=ss_type, lemmas=lemmas, gloss=gloss, examples=examples)
    return synset, [(p[0], p[1], p[2]) for p in pointers if p[0] in _HYPERNYM or p[0] == _SIMILAR]


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> tuple[Synset, ...]:
    parsed = []
    for pos in POS_FILES:
        file = path / f"data.{pos}"
        with file.open(encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.startswith("  "):  # licence header
                    continue
                parsed.append(_parse_line(line, f"{file}:{lineno}"))
    # A pointer names its target by (offset, pos) with pos "a" for satellites too ("s" in their id); offsets
    # are unique within a pos's data file, so that pair finds the id.
    ids = {(s.id.split("-")[0], "a" if s.pos == "s" else s.pos): s.id for s, _ in parsed}
    synsets = []
    for synset, pointers in parsed:
        targets: dict[str, list[str]] = {"hypernyms": [], "similar": []}
        for symbol, offset, pos in pointers:
            target = ids.get((offset, pos))
            if target is not None:  # every pointer of WordNet 3.0 resolves; a trimmed copy may lack some
                targets["similar" if symbol == _SIMILAR else "hypernyms"].append(target)
        synsets.append(
            dataclasses.replace(
                synset, hypernyms=tuple(targets["hypernyms"]), similar=tuple(targets["similar"])
            )
        )
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


def training_pairs(synsets: list[Synset], kinds: Iterable[str] = PAIR_KINDS) -> Iterator[tuple]:
    """(query, positive, pair kind, synset) for each training-split synset: its example -> gloss, lemma list ->
    gloss and synonym pairs, those of one synset together, synsets in `sample_order`."""
    kinds = set(kinds)
    for s in sample_order(synsets):
        if split_of(s.id) != "train":
            continue
        if "example_gloss" in kinds:
            for example in s.examples:
                yield example, s.gloss, "example_gloss", s
        if "lemmas_gloss" in kinds:
            yield ", ".join(s.lemmas), s.gloss, "lemmas_gloss", s
        if "synonyms" in kinds:
            for i, a in enumerate(s.lemmas):
                for b in s.lemmas[i + 1 :]:
                    yield a, b, "synonyms", s


def split_of(synset_id: str) -> str:
    """ "train" or "heldout": a stable hash of the synset id puts about 10% of synsets in "heldout"."""
    bucket = _hash(synset_id) % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"
