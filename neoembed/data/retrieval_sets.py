"""Your own retrieval test set: a BEIR folder, or the held-out split of a pairs file.

Either is scored by `neoembed mteb-eval -t PATH` (an mteb retrieval task named after the folder or file), as a
held-out set of `neoembed contrastive` (`eval.sets: [PATH]`) and of `neoembed adapt`.

- A BEIR folder holds `corpus.jsonl` (`_id`, `text`, optional `title`), `queries.jsonl` (`_id`, `text`) and
  `qrels/test.tsv` (a header, then `query-id`, `corpus-id`, `score` a line; a score above 0 is relevant, its
  value the grade nDCG weighs). A document's title, where it has one, is read before its text.
- A pairs file (`pairs_file`): its held-out anchors (`pairs_file.is_held_out`, the rows every build of the
  file leaves out) are the queries, each relevant to its positives; every distinct positive of the file is
  the corpus, so the training rows' positives are the distractors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from neoembed.data.normalize import clean, text_key
from neoembed.data.pairs_file import (
    HOLDOUT_EVERY,
    MISSING,
    PairsFileError,
    is_held_out,
    open_pairs,
    read_rows,
    set_name,
)
from neoembed.errors import InputError

BEIR_FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")


@dataclass(frozen=True)
class RetrievalSet:
    """Queries and documents by id, each query's relevant documents with their grades, and what it is."""

    name: str  # the folder's or file's name: the task's name
    queries: dict[str, str]
    corpus: dict[str, str]
    relevant: dict[str, dict[str, int]]
    revision: str  # changes with the data: cached scores of other data are not reused
    description: str

    def as_tuple(self) -> tuple[dict, dict, dict]:
        """(queries, corpus, relevant ids) as the other held-out sets give them."""
        return self.queries, self.corpus, {q: set(docs) for q, docs in self.relevant.items()}


def is_beir_folder(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "corpus.jsonl").is_file()


def read_test_set(
    path: Path | str, columns: Mapping[str, tuple[str, ...]] | None = None, option: str = "--columns"
) -> RetrievalSet:
    """The test set at `path`: a BEIR folder, else a pairs file's held-out split (`columns` maps its columns;
    `option` is the flag that does, for the error naming it)."""
    path = Path(path)
    if is_beir_folder(path):
        return beir_folder(path)
    return pairs_test_split(path, columns, option)


def beir_folder(folder: Path) -> RetrievalSet:
    """A BEIR-layout folder; a missing file, row field or id is an error naming the file and line."""
    import xxhash

    missing = [name for name in BEIR_FILES if not (folder / name).is_file()]
    if missing:
        raise InputError(
            f"{folder}: no {missing[0]}; a BEIR test folder holds {', '.join(BEIR_FILES)}", param=str(folder)
        )
    corpus = {}
    for where, row in read_rows(folder / "corpus.jsonl"):
        doc_id, text = _field(row, "_id", folder, where), _field(row, "text", folder, where)
        title = row.get("title")
        corpus[str(doc_id)] = clean(f"{title} {text}" if isinstance(title, str) and title.strip() else text)
    queries = {
        str(_field(row, "_id", folder, where)): clean(_field(row, "text", folder, where))
        for where, row in read_rows(folder / "queries.jsonl")
    }
    relevant: dict[str, dict[str, int]] = {}
    qrels = folder / "qrels" / "test.tsv"
    for where, row in read_rows(qrels):
        query, doc, score = (_field(row, name, folder, where) for name in ("query-id", "corpus-id", "score"))
        for given, known, file in ((query, queries, "queries.jsonl"), (doc, corpus, "corpus.jsonl")):
            if given not in known:
                raise InputError(
                    f"{qrels.parent}/{where}: {given!r} is not an _id of {file}", param=str(qrels)
                )
        try:
            grade = int(float(score))
        except ValueError:
            raise InputError(
                f"{qrels.parent}/{where}: score {score!r} is not a number", param=str(qrels)
            ) from None
        if grade > 0:
            relevant.setdefault(query, {})[doc] = grade
    if not relevant:
        raise InputError(f"{qrels}: no query-document pair with a score above 0", param=str(qrels))
    digest = xxhash.xxh3_128()
    for name in BEIR_FILES:
        digest.update((folder / name).read_bytes())
    return RetrievalSet(
        name=set_name(folder),
        queries={q: queries[q] for q in relevant},  # a query without a relevant document scores nothing
        corpus=corpus,
        relevant=relevant,
        revision=digest.hexdigest()[:16],
        description=f"your test set {folder}: {len(relevant):,} queries, {len(corpus):,} documents",
    )


def _field(row: dict, name: str, folder: Path, where: str) -> str:
    value = row.get(name, MISSING)
    if value is MISSING or value is None or not str(value).strip():
        raise InputError(f"{folder}/{where}: no {name!r}", param=str(folder))
    return str(value)


def pairs_test_split(
    path: Path, columns: Mapping[str, tuple[str, ...]] | None = None, option: str = "--columns"
) -> RetrievalSet:
    """The held-out anchors of a pairs file as queries, among all its positives."""
    pairs = open_pairs(path, columns, option)
    doc_ids: dict[int, str] = {}  # a positive's text key -> its document id
    corpus: dict[str, str] = {}
    query_ids: dict[int, str] = {}
    queries: dict[str, str] = {}
    relevant: dict[str, dict[str, int]] = {}
    for query, positive in pairs.texts():
        query_key, positive_key = text_key(query), text_key(positive)
        if not query or not positive or query_key == positive_key:
            continue  # as a build drops it
        if positive_key not in doc_ids:
            doc_ids[positive_key] = f"d{len(doc_ids)}"
            corpus[doc_ids[positive_key]] = positive
        if is_held_out(query_key):
            if query_key not in query_ids:
                query_ids[query_key] = f"q{len(query_ids)}"
                queries[query_ids[query_key]] = query
            relevant.setdefault(query_ids[query_key], {})[doc_ids[positive_key]] = 1
    if not queries:
        raise PairsFileError(
            f"{path}: no anchor falls in the held-out split (one in {HOLDOUT_EVERY} by text key) of its "
            f"{len(corpus):,} pairs; test on a BEIR folder instead",
            param=str(path),
        )
    return RetrievalSet(
        name=pairs.name,
        queries=queries,
        corpus=corpus,
        relevant=relevant,
        revision=pairs.digest[:16],
        description=f"the held-out anchors of your pairs {path} (one in {HOLDOUT_EVERY}, by text key, never "
        f"trained on): {len(queries):,} queries among its {len(corpus):,} positives",
    )
