"""How many mined negatives of a WordNet build are false negatives: plausible answers to their query.

For a row of synset S whose query is a lemma or a lemma list (pairs `synonyms` and `lemmas_gloss`), a negative
is counted false when it is the gloss or a lemma of another synset T that shares a lemma with S (another
sense of one of the query's lemmas, or a synonym's synset) or that is a hypernym of S. Example-sentence rows
are reported too, for comparison. A record is matched to its synset as the build made it: the first WordNet
row with the same (query, positive) keys.

    python -m neoembed.data.false_negatives runs/data      # a build-data output holding the wordnet source
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from neoembed.data.normalize import clean, text_key

LEMMA_PAIRS = ("lemmas_gloss", "synonyms")
FALSE_KINDS = ("other_sense", "hypernym", "same_synset")


@dataclass(frozen=True)
class FalseNegatives:
    """The audit of one pair kind's rows."""

    rows: int
    negatives: int
    negatives_per_row: float
    rows_without_negatives: int
    false: int  # negatives that answer their query
    false_rate: float  # false / negatives
    false_by_kind: dict[str, int]  # FALSE_KINDS -> false negatives


def audit(out: Path | str) -> dict[str, FalseNegatives]:
    """Per pair kind (and `lemma_queries`, their sum): rows, negatives, false ones by kind, and the rate."""
    from neoembed.data.records import load_records
    from neoembed.data.wordnet import load_synsets, training_pairs

    synsets = {s.id: s for s in load_synsets()}
    lemmas = {sid: {lemma.casefold() for lemma in s.lemmas} for sid, s in synsets.items()}
    texts: dict[int, set[str]] = {}  # text key -> synsets whose gloss or lemma it is
    for sid, s in synsets.items():
        for text in (s.gloss, *s.lemmas):
            texts.setdefault(text_key(clean(text)), set()).add(sid)

    origin: dict[tuple[int, int], tuple[str, str]] = {}
    for query, positive, pair, s in training_pairs(list(synsets.values())):
        origin.setdefault((text_key(clean(query)), text_key(clean(positive))), (s.id, pair))

    counts: dict[str, Counter] = {}
    records = load_records(out, ["wordnet"])["wordnet"]
    for query, positive, negatives in zip(records["query"], records["positive"], records["negatives"]):
        sid, pair = origin[(text_key(query), text_key(positive))]
        c = counts.setdefault(pair, Counter())
        c["rows"] += 1
        c["negatives"] += len(negatives)
        c["rows_without_negatives"] += not negatives
        for negative in negatives:
            kind = _false_kind(sid, texts.get(text_key(negative), set()), synsets, lemmas)
            if kind:
                c[kind] += 1
                c["false"] += 1
    counts["lemma_queries"] = sum((counts.get(p, Counter()) for p in LEMMA_PAIRS), Counter())
    return {pair: _report(c) for pair, c in sorted(counts.items())}


def _false_kind(sid: str, owners: set[str], synsets: dict, lemmas: dict) -> str | None:
    """Why a negative owned by `owners` answers a query about synset `sid`: same synset, sense, hypernym."""
    if sid in owners:
        return "same_synset"  # the build's own-synset exclusion makes this 0; counted to check it
    if any(lemmas[sid] & lemmas[t] for t in owners):
        return "other_sense"
    if owners & set(synsets[sid].hypernyms):
        return "hypernym"
    return None


def _report(c: Counter) -> FalseNegatives:
    return FalseNegatives(
        rows=c["rows"],
        negatives=c["negatives"],
        negatives_per_row=round(c["negatives"] / c["rows"], 3) if c["rows"] else 0.0,
        rows_without_negatives=c["rows_without_negatives"],
        false=c["false"],
        false_rate=round(c["false"] / c["negatives"], 4) if c["negatives"] else 0.0,
        false_by_kind={k: c[k] for k in FALSE_KINDS},
    )


if __name__ == "__main__":
    report = audit(Path(sys.argv[1]))
    print(json.dumps({pair: asdict(kind) for pair, kind in report.items()}, indent=2))
