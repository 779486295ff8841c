"""Open a manifest's source as a `datasets.Dataset`: from the hub, a local copy, or Debian's packages.

A local copy (`--local-data DIR`, read from `DIR/<source>`) is a snapshot of the hub repository (README
configs and data files) or a plain folder of data files, optionally with one sub-folder per config, so the
same manifest builds offline.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from pathlib import Path

from neoembed.data.manifest import Manifest, ManifestError, Subset, check_columns
from neoembed.data.pairs_file import BATCH_ROWS, Batch, open_pairs
from neoembed.errors import InputError


class SourceError(InputError):
    """A source that cannot be opened; the message says which source, from where, and what to do."""


def open_source(manifest: Manifest, local_root: Path | None = None):
    """The source's rows as a `datasets.Dataset` whose columns the manifest's mapping reads."""
    local = Path(local_root) / manifest.name if local_root else None
    if local is not None and not local.exists():
        local = None
    if manifest.kind == "wordnet":
        return _wordnet(manifest, local)
    if manifest.kind == "manpages":
        return _manpages()
    if manifest.kind == "packages":
        return _packages()
    if manifest.kind == "retrieval":
        return _retrieval(manifest, local)
    return _load(manifest, Subset(config=manifest.config, split=manifest.split), local)


def source_batches(
    manifest: Manifest, local_root: Path | None, limit: int | None
) -> tuple[Iterator[Batch], int | None, int | None]:
    """A build's reading of a source: its rows in batches (at most `limit` rows), how many that will be
    (None where a stream does not say before it ends) and the size of the whole split (None where unknown).

    Your pairs file streams from disk batch by batch, so its size never bounds memory; the other kinds are
    read as a `datasets.Dataset` (`read_source`) and sliced."""
    if manifest.kind == "file":
        assert manifest.path is not None  # the manifest's validation: kind file has its path
        pairs = open_pairs(manifest.path, manifest.columns)
        return _first_rows(pairs.batches(BATCH_ROWS), limit), None, None
    dataset, available = read_source(manifest, local_root, limit)
    check_columns(manifest, dataset.features, where=f"{manifest.dataset or manifest.kind} {manifest.split}")
    total = len(dataset) if limit is None else min(len(dataset), limit)
    return _slices(dataset, total), total, available


def _slices(dataset, total: int) -> Iterator[Batch]:
    """A dataset's first `total` rows in batches, each row numbered by its index."""
    for start in range(0, total, BATCH_ROWS):
        stop = min(start + BATCH_ROWS, total)
        yield Batch(dataset[start:stop], list(range(start, stop)), None)


def _first_rows(batches: Iterator[Batch], limit: int | None) -> Iterator[Batch]:
    """The batches up to `limit` rows in all, the last one cut."""
    left = limit
    for batch in batches:
        if left is not None and len(batch) >= left:
            yield Batch(
                {name: values[:left] for name, values in batch.columns.items()},
                batch.lines[:left],
                batch.file,
            )
            return
        yield batch
        if left is not None:
            left -= len(batch)


def read_source(manifest: Manifest, local_root: Path | None, limit: int | None):
    """`open_source` for a build: the rows to read (at most `limit`), and the size of the whole split (None
    where a streamed source does not say).

    With a `limit` (the manifest's budget or `--max-rows`), a `rows` source is read with `datasets` streaming
    and only its first `limit` rows in streaming order are taken (and held in memory), so a capped source such
    as PAQ (64.4M rows in one 18.3 GB gzip) is never downloaded whole. Streaming order is the order of the
    data files and of the rows in them, the same order a full load gives, so the capped rows are the first
    `limit` rows of the pinned revision whichever way they are read. A seeded shuffle buffer was not used: a
    one-file source streams as one shard, so the buffer would only permute a window at its start (no more
    representative a sample) and would tie the rows to `datasets`' shuffling code. Retrieval sources (their
    qrels are joined whole) and WordNet are read whole and cut by the caller.
    """
    if limit is not None and manifest.kind == "rows":
        local = Path(local_root) / manifest.name if local_root else None
        return _stream(manifest, local if local is not None and local.exists() else None, limit)
    dataset = open_source(manifest, local_root)
    return dataset, len(dataset)


def _stream(manifest: Manifest, local: Path | None, limit: int):
    """The first `limit` rows of a streamed `rows` source, as a Dataset, and the split's size if known."""
    from datasets import Dataset, concatenate_datasets

    iterable = _load(manifest, Subset(config=manifest.config, split=manifest.split), local, streaming=True)
    splits = iterable.info.splits or {}
    available = splits[manifest.split].num_examples if manifest.split in splits else None
    features = iterable.features
    # islice pulls exactly `limit` rows from the stream (`IterableDataset.take` pulls one more to see it is done)
    rows = itertools.islice(_read(manifest, iterable), limit)
    parts = []
    while batch := list(itertools.islice(rows, 10_000)):
        parts.append(Dataset.from_list(batch, features=features))
    dataset = concatenate_datasets(parts) if parts else Dataset.from_list([], features=features)
    if available is None and len(dataset) < limit:  # the stream ran out first: it was read whole
        available = len(dataset)
    return dataset, available


def _read(manifest: Manifest, iterable):
    """A streamed source's rows; a read error names the source (a stream fails while read, not on open)."""
    from datasets.exceptions import DatasetsError

    try:
        yield from iterable
    except (OSError, ValueError, DatasetsError) as err:
        raise SourceError(f"source {manifest.name}: reading the streamed dataset failed: {err}") from None


def _load(manifest: Manifest, subset: Subset, local: Path | None, streaming: bool = False):
    from datasets import load_dataset
    from datasets.exceptions import DatasetsError

    if local is not None:
        kwargs: dict = {}
        if subset.config and (local / "README.md").exists():
            kwargs["name"] = subset.config
        elif subset.config and (local / subset.config).is_dir():
            kwargs["data_dir"] = subset.config
        where = f"local copy {local}"
        call = lambda: load_dataset(str(local), split=subset.split, streaming=streaming, **kwargs)  # noqa: E731
    else:
        where = f"hub dataset {manifest.dataset} (config {subset.config}, split {subset.split})"
        call = lambda: load_dataset(  # noqa: E731
            manifest.dataset,
            subset.config,
            split=subset.split,
            revision=manifest.revision,
            streaming=streaming,
        )
    try:
        return call()
    except (OSError, ValueError, DatasetsError) as err:
        raise SourceError(
            f"source {manifest.name}: cannot load {where}: {err}. "
            f"Without hub access, pass --local-data DIR with a copy in DIR/{manifest.name}."
        ) from None


def _retrieval(manifest: Manifest, local: Path | None):
    """Join qrels (positive score) with queries and corpus into rows {query, title, text, score}.

    Only the documents named by the qrels are kept in memory, so MS MARCO's 8.8M-passage corpus streams by.
    """
    from datasets import Dataset

    spec = manifest.retrieval
    assert spec is not None  # the manifest's validation: kind "retrieval" has its section
    qrels = _load(manifest, spec.qrels, local)
    queries = _load(manifest, spec.queries, local)
    corpus = _load(manifest, spec.corpus, local)
    for name, ds, needed in (
        ("qrels", qrels, ("query-id", "corpus-id", "score")),
        ("queries", queries, ("_id", "text")),
        ("corpus", corpus, ("_id", "text")),
    ):
        missing = [c for c in needed if c not in ds.column_names]
        if missing:
            raise ManifestError(
                f"manifest {manifest.name}: field retrieval.{name}: columns {missing} missing "
                f"(has {ds.column_names})"
            )
    pairs = [
        (str(q), str(d), s)
        for q, d, s in zip(qrels["query-id"][:], qrels["corpus-id"][:], qrels["score"][:])
        if s is not None and s > 0
    ]
    wanted_queries = {q for q, _, _ in pairs}
    wanted_docs = {d for _, d, _ in pairs}
    query_text = {
        str(i): t for i, t in zip(queries["_id"][:], queries["text"][:]) if str(i) in wanted_queries
    }
    docs = {}
    for batch in corpus.iter(batch_size=50_000):  # streamed: only documents named by a qrel are kept
        titles = batch.get("title") or [""] * len(batch["_id"])
        for i, title, text in zip(batch["_id"], titles, batch["text"]):
            if str(i) in wanted_docs:
                docs[str(i)] = (title or "", text)
    rows: dict[str, list] = {"query": [], "title": [], "text": [], "score": []}
    for q, d, s in pairs:
        if q in query_text and d in docs:  # dangling ids are counted by the caller as rows not read
            title, text = docs[d]
            rows["query"].append(query_text[q])
            rows["title"].append(title)
            rows["text"].append(f"{title} {text}" if spec.title_in_positive and title else text)
            rows["score"].append(float(s))
    return Dataset.from_dict(rows)


def _manpages():
    """One row per manual page of Debian's manpages and manpages-dev: its NAME summary -> the opening of its
    DESCRIPTION (`data.manpages`); `page` names it ("open(2)")."""
    from datasets import Dataset

    from neoembed.data.manpages import load_pages

    pages = load_pages()
    return Dataset.from_dict(
        {
            "query": [p.summary for p in pages],
            "positive": [p.description for p in pages],
            "page": [p.name for p in pages],
        }
    )


def _packages():
    """One row per distinct description in Debian's package descriptions: a package's synopsis -> the opening
    of its long description (`data.packages`); `package` names it ("0ad")."""
    from datasets import Dataset

    from neoembed.data.packages import load_descriptions

    descriptions = load_descriptions()
    return Dataset.from_dict(
        {
            "query": [d.synopsis for d in descriptions],
            "positive": [d.description for d in descriptions],
            "package": [d.package for d in descriptions],
        }
    )


def _wordnet(manifest: Manifest, local: Path | None):
    """Pairs from training-split synsets: example -> gloss, lemma list -> gloss, synonym pairs.

    Records of one synset stay together, so `--max-rows` keeps a mix of all three kinds; synsets come in a
    fixed pseudo-random order (`wordnet.sample_order`), so it also keeps every part of speech and every part of
    the hierarchy (in file order the first 20,000 rows are the top of the noun hierarchy alone). `synset` and `pair`
    say where a row comes from; the other columns are the relations that make another row's positive a
    plausible answer to its query, for mining to exclude (the manifest's `mapping.relations`):
    - `synsets`: the row's synset;
    - on rows whose query is a lemma or a lemma list also `lemmas` (the synset's lemmas, case-folded: other
      senses of the query's words and synonyms' synsets share one), `hypernymy` (one value per hypernym link,
      "hyponym>hypernym", on the rows of both ends: a synset and its hypernyms never mine each other, while
      two hyponyms of one hypernym, the best hard negatives, still do) and `similar` (similar-to links
      between adjectives, "a~b" with a < b).
    A synonym pair's positive is a bare word, which is each of its senses: its row carries all four for every
    sense of that word. An example sentence uses its word in one sense, so the glosses of the word's other
    senses and of its hypernyms stay hard negatives for it.
    """
    from datasets import Dataset

    from neoembed.data.wordnet import load_synsets, training_pairs

    synsets = load_synsets(local)
    links: dict[str, list[str]] = {}
    senses: dict[str, list] = {}  # case-folded lemma -> the synsets holding it
    for s in synsets:
        for hypernym in s.hypernyms:
            link = f"{s.id}>{hypernym}"
            links.setdefault(s.id, []).append(link)
            links.setdefault(hypernym, []).append(link)
        for lemma in {lemma.casefold() for lemma in s.lemmas}:
            senses.setdefault(lemma, []).append(s)

    def word(synsets) -> tuple[list[str], list[str], list[str], list[str]]:
        """The ids, lemmas, hypernym links and similar-to links of `synsets` (their union)."""
        return (
            sorted(s.id for s in synsets),
            sorted({lemma.casefold() for s in synsets for lemma in s.lemmas}),
            sorted({link for s in synsets for link in links.get(s.id, ())}),
            sorted({"~".join(sorted((s.id, other))) for s in synsets for other in s.similar}),
        )

    every_sense = functools.cache(lambda lemma: word(senses[lemma]))
    columns = ("query", "positive", "pair", "synset", "synsets", "lemmas", "hypernymy", "similar")
    rows: dict[str, list] = {name: [] for name in columns}
    for query, positive, pair, s in training_pairs(synsets, manifest.options.wordnet_pairs):
        if pair == "example_gloss":
            related: tuple[list[str], ...] = ([s.id], [], [], [])
        elif pair == "lemmas_gloss":
            related = word([s])
        else:  # the positive is a bare word, so it is every sense of that word (this synset's among them)
            related = every_sense(positive.casefold())
        for name, value in zip(rows, (query, positive, pair, s.id, *related), strict=True):
            rows[name].append(value)
    return Dataset.from_dict(rows)
