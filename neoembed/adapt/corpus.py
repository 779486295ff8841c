"""A user's documents, read from `.txt`, `.jsonl` or `.parquet`, cleaned, deduplicated, and split into the
documents adaptation trains on and the ones it selects on.

A `.txt` corpus is one document a line; a `.jsonl` corpus one JSON object a line with a `text` field (or the
field `corpus.field` names); a `.parquet` corpus a string column of that name.

The leakage guard, as adaptation needs it: a user adapts on the documents they will search, so documents may
be those of an evaluation's corpus (FOLDOC's held-out definitions among them), as in GPL's and TSDAE's own
evaluations; what may never enter training is an evaluation's queries, or a pair linking one to its answer.
Documents equal to a guarded query (FOLDOC's and the Jargon File's held-out terms, and the texts of
`corpus.eval_texts` files) are left out and counted, and no pair method reads anything but the documents. A
pseudo query can still come out equal to an evaluation's query (a one-word `terms` query is often a FOLDOC
term): `Corpus.guard` holds their keys, and the adaptation drops every pair carrying one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from neoembed.data import LeakGuard, clean, foldoc_retrieval, jargon_retrieval, read_eval_keys, text_key
from neoembed.errors import InputError

FORMATS = (".txt", ".jsonl", ".parquet")


class CorpusError(InputError):
    """A corpus that cannot be read or is too small to adapt on."""


@dataclass(frozen=True)
class CorpusCounts:
    """What reading a corpus kept and left out (`adapt.json`, the command's first line)."""

    rows: int  # rows read
    train: int  # documents pairs are made from
    selection: int  # documents held out for selection
    empty: int  # rows with no text
    short: int  # documents under the minimum words
    duplicates: int  # documents whose text key an earlier one had
    leaked: dict[str, int]  # guarded evaluation set -> documents left out because they are its queries


@dataclass(frozen=True)
class Corpus:
    """The documents adaptation uses, and what reading the file kept and left out."""

    train: list[str]  # documents pairs are made from
    selection: list[str]  # held-out documents whose pairs choose the WiSE-FT weight
    counts: CorpusCounts
    guard: LeakGuard  # the evaluation queries no document, and no pair, may carry


def read_texts(path: Path, field: str = "text") -> list[str]:
    """Every row's text of `path`, in file order; a row without the field is an error naming the row."""
    path = Path(path)
    if path.suffix not in FORMATS:
        raise CorpusError(
            f"{path}: a corpus is one of {', '.join(FORMATS)}, not {path.suffix or 'no suffix'!r}"
        )
    if not path.is_file():
        raise CorpusError(f"{path}: no such file")
    if path.suffix == ".parquet":
        return _parquet_texts(path, field)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path}: not UTF-8 text (byte {err.start})") from None
    if path.suffix == ".txt":
        return lines
    return [_jsonl_text(path, number, line, field) for number, line in enumerate(lines, 1) if line.strip()]


def _jsonl_text(path: Path, number: int, line: str, field: str) -> str:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path}:{number}: not a JSON object ({err.msg})") from None
    if not isinstance(row, dict) or not isinstance(row.get(field), str):
        raise CorpusError(f"{path}:{number}: no string field {field!r} (corpus.field names another)")
    return row[field]


def _parquet_texts(path: Path, field: str) -> list[str]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several unrelated types for a damaged file
        raise CorpusError(f"{path}: not a readable parquet file ({err})") from None
    if field not in table.column_names:
        raise CorpusError(f"{path}: no column {field!r}; it has {table.column_names}")
    texts = table.column(field).to_pylist()
    if bad := next((i for i, text in enumerate(texts) if not isinstance(text, str)), None):
        raise CorpusError(f"{path}: row {bad} of column {field!r} is not a string")
    return texts


def query_guard(eval_texts: tuple[Path, ...] = ()) -> LeakGuard:
    """The evaluation queries no document may be: the held-out terms of FOLDOC and of the Jargon File (the
    two dictionaries neoembed reports adaptation on: a user adapting on either, without naming its queries,
    must not train on term -> definition), then the `eval_texts` files'."""

    def terms(retrieval: tuple[dict, dict, dict]) -> frozenset[int]:
        return frozenset(text_key(clean(term)) for term in retrieval[0].values())

    return LeakGuard(
        {
            "foldoc": terms(foldoc_retrieval()),
            "jargon": terms(jargon_retrieval()),
            "eval_texts": frozenset(read_eval_keys(eval_texts)),
        }
    )


def read_corpus(
    path: Path,
    *,
    field: str = "text",
    min_words: int,
    min_documents: int,
    selection: int,
    evaluated: frozenset[int],
    eval_texts: tuple[Path, ...] = (),
) -> Corpus:
    """The documents of `path` with at least `min_words` words, once each and none a guarded evaluation
    query; `selection` of them (the last in a fixed pseudo-random order whose text key is not in `evaluated`,
    the texts a selection split may not hold; at most a fifth) held out for selection."""
    texts = read_texts(path, field)
    guard = query_guard(eval_texts)
    kept, seen, leaked = [], set(), dict.fromkeys(guard.sets, 0)
    empty = short = duplicates = 0
    for text in texts:
        text = clean(text)
        if not text:
            empty += 1
        elif len(text.split()) < min_words:
            short += 1
        elif (key := text_key(text)) in seen:
            duplicates += 1
        elif (guarded := guard.match(key)) is not None:
            leaked[guarded] += 1
        else:
            seen.add(key)
            kept.append((key, text))
    if len(kept) < min_documents:
        raise CorpusError(
            f"{path}: {len(kept)} usable documents of {len(texts)} rows ({empty} empty, {short} under "
            f"{min_words} words, {duplicates} duplicates, {sum(leaked.values())} evaluation texts); adapting "
            f"needs at least {min_documents}"
        )
    kept.sort(key=lambda item: item[0])  # the text key's order: fixed, and unrelated to the file's
    candidates = [i for i, (key, _) in enumerate(kept) if key not in evaluated]
    held = set(candidates[len(candidates) - min(selection, len(kept) // 5) :])
    train = [text for i, (_, text) in enumerate(kept) if i not in held]
    selected = [text for i, (_, text) in enumerate(kept) if i in held]
    leaked = {name: count for name, count in leaked.items() if count}
    counts = CorpusCounts(len(texts), len(train), len(selected), empty, short, duplicates, leaked)
    return Corpus(train, selected, counts, guard)
