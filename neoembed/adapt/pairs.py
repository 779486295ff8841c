"""Training pairs made from bare documents, written as a build (`data.load_records` reads it like any
`neoembed build-data` output), so the contrastive trainer adapts on them unchanged.

Each method turns a document into a (query, positive) pair; none needs a label or a model:
- `crop`: two independent random spans of the document (Contriever, Izacard et al. 2022): the model learns
  what makes two parts of one text belong together in this domain.
- `lead`: the first sentence -> the rest of the document (a document's structure as its own label).
- `terms`: the document's rarest words (by document frequency over the corpus), in their order, -> the
  document: short keyword queries, the shape of a user's search for a term.
Hand-written: sentence-transformers ships TSDAE's noise and a GPL pipeline that needs a generative query
model from a hub, but no pair maker of these kinds.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import regex

from neoembed.run_files import file_checksum, write_json, write_parquet

WORD = regex.compile(r"[\p{L}\p{N}][\p{L}\p{N}+#._/-]*")
SENTENCE_END = regex.compile(r"(?<=[.!?])\s+(?=[\p{Lu}\p{N}(\"'])")
# Words too common in any English text to stand for a document, whatever the corpus's own frequencies say.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "which",
        "with",
        "not",
        "but",
        "also",
        "may",
        "used",
        "use",
        "using",
        "one",
        "two",
        "all",
        "any",
        "other",
        "such",
        "these",
        "those",
        "than",
        "then",
        "into",
        "only",
    ]
)
MIN_SPAN_WORDS = 4
Pair = tuple[str, str]
Sourced = tuple[int, Pair]  # a pair and the index of the document it was made from


def words_of(text: str) -> list[str]:
    return text.split()


def crop_pair(text: str, rng: random.Random, ratio: tuple[float, float], tries: int = 3) -> Pair | None:
    """Two different spans of `text`, each a random share in `ratio` of its words, placed independently
    (drawn again, up to `tries` times, where they coincide)."""
    words = words_of(text)

    def span() -> str | None:
        length = max(MIN_SPAN_WORDS, round(len(words) * rng.uniform(*ratio)))
        if length > len(words):
            return None
        start = rng.randrange(len(words) - length + 1)
        return " ".join(words[start : start + length])

    for _ in range(tries):
        first, second = span(), span()
        if first is None or second is None:
            return None
        if first != second:
            return first, second
    return None


def lead_pair(text: str) -> Pair | None:
    """The first sentence -> the rest, when both have words enough."""
    sentences = SENTENCE_END.split(text, maxsplit=1)
    if len(sentences) < 2:
        return None
    lead, rest = sentences
    if len(words_of(lead)) < MIN_SPAN_WORDS // 2 or len(words_of(rest)) < MIN_SPAN_WORDS:
        return None
    return lead, rest


def document_frequency(documents: Iterable[str]) -> Counter:
    frequency: Counter = Counter()
    for text in documents:
        frequency.update({word.casefold() for word in WORD.findall(text)})
    return frequency


def terms_pair(
    text: str, rng: random.Random, frequency: Counter, documents: int, words: int, hide: bool = False
) -> Pair | None:
    """`words` words drawn from the document's rarest (twice as many candidates as words, weighted by their
    inverse document frequency), in the order they first appear -> the document."""
    seen: dict[str, str] = {}
    for word in WORD.findall(text):
        folded = word.casefold()
        if len(folded) > 2 and folded not in STOPWORDS and not folded.isdigit():
            seen.setdefault(folded, word)
    if len(seen) < words:
        return None
    idf = {folded: math.log(documents / frequency[folded]) for folded in seen}
    candidates = sorted(seen, key=lambda folded: -idf[folded])[: 2 * words]
    chosen: set[str] = set()
    while len(chosen) < words:
        chosen.add(rng.choices(candidates, weights=[idf[c] + 1e-3 for c in candidates])[0])
    query = " ".join(original for folded, original in seen.items() if folded in chosen)
    if hide:  # the query's words taken out of the document: it must be found by what surrounds them
        text = " ".join(w for w in text.split() if not any(m.casefold() in chosen for m in WORD.findall(w)))
    return query, text


def sourced_pairs(
    documents: Sequence[str],
    methods: Sequence[str],
    *,
    rows: int | None = None,
    seed: int,
    crop_ratio: tuple[float, float] = (0.2, 0.6),
    term_words: int = 2,
    hide_terms: bool = False,
) -> dict[str, list[Sourced]]:
    """Method -> `rows` pairs (None: one per document), each with the index of the document it was made from,
    from the documents in a seeded random order, passing over them again, with new random draws, while more
    are needed; `lead`, which draws nothing, gives at most one per document. Documents a method cannot use are
    skipped."""
    rng = random.Random(seed)
    frequency = document_frequency(documents) if "terms" in methods else Counter()
    makers: dict[str, Callable[[str], Pair | None]] = {
        "crop": lambda text: crop_pair(text, rng, crop_ratio),
        "lead": lead_pair,
        "terms": lambda text: terms_pair(text, rng, frequency, len(documents), term_words, hide_terms),
    }
    wanted = len(documents) if rows is None else rows
    made: dict[str, list[Sourced]] = {}
    for method in methods:
        pairs: list[Sourced] = []
        passes = 1 if method == "lead" or rows is None else -(-wanted // max(len(documents), 1)) + 1
        for _ in range(passes):
            order = list(range(len(documents)))
            rng.shuffle(order)
            pairs += [(i, p) for i in order if (p := makers[method](documents[i])) is not None]
            if len(pairs) >= wanted:
                break
        made[method] = pairs[:wanted]
    return made


def make_pairs(documents: Sequence[str], methods: Sequence[str], **options: Any) -> dict[str, list[Pair]]:
    """`sourced_pairs`' pairs without their documents."""
    return unsourced(sourced_pairs(documents, methods, **options))


def unsourced(made: dict[str, list[Sourced]]) -> dict[str, list[Pair]]:
    """Each method's pairs without the documents they were made from."""
    return {method: [pair for _, pair in sourced] for method, sourced in made.items()}


def write_pairs(
    out: Path,
    pairs: dict[str, list[Pair]],
    *,
    config: dict,
    leaked: dict[str, int],
    dropped: dict[str, int],
    negatives: dict[str, list[list[str]]] | None = None,
    mined: dict[str, dict[str, int]] | None = None,
    methods: dict[str, str] | None = None,
) -> None:
    """`pairs` as a build in `out`: `<out>/<source>/part-00000.parquet` (query, positive, negatives, source)
    per source, then `stats.json`, last, as the builder writes it (its presence marks the build complete).
    `methods`: the pair method of each source, where sources split methods further (by topic cluster,
    `adapt.clusters`); each source is its own method where absent. `leaked`: documents left out as evaluation
    queries; `dropped`: pairs per method left out for carrying a text they may not (`adapt.run.without_texts`);
    `negatives`: each pair's mined negatives per source (none where absent), and `mined` the miner's counts
    per method (`adapt.negatives`)."""
    import pyarrow as pa

    sources = {}
    for source, rows in pairs.items():
        part = Path(out) / source / "part-00000.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table(
            {
                "query": [q for q, _ in rows],
                "positive": [p for _, p in rows],
                "negatives": pa.array(
                    (negatives or {}).get(source) or [[] for _ in rows], pa.list_(pa.string())
                ),
                "source": [source] * len(rows),
            }
        )
        write_parquet(part, table)
        sources[source] = {
            "method": (methods or {}).get(source, source),
            "rows_out": len(rows),
            "dataset": None,
            "part_checksums": {part.name: file_checksum(part)},
        }
    stats = {
        "sources": sources,
        "config": {**config, "guarded_texts": dict(leaked)},
        "total": {
            "rows_out": sum(len(rows) for rows in pairs.values()),
            "rows_dropped_for_leakage": dict(leaked),
            "pairs_dropped_for_guarded_text": dict(dropped),
            "negatives_mined": dict(mined or {}),
        },
    }
    Path(out).mkdir(parents=True, exist_ok=True)  # a selection split too small for any method writes no part
    write_json(Path(out) / "stats.json", stats)
