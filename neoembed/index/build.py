"""Build an index directory from a corpus, and add documents to one.

build: stream the corpus into the document store -> choose the factory -> embed the stored texts
(resumable) -> train on a sample -> add -> tune the search parameter on held-out corpus queries -> write the
index and the manifest.
The manifest is written last and names the index file, so it is the commit point: a crash at any step
leaves either no manifest (the build can be rerun and resumes embedding) or the previous consistent state
(an add rerun with the same documents resumes its embedding the same way).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neoembed.faiss_setup import faiss, set_threads

import numpy as np

from neoembed.errors import free_space
from neoembed.finite import SHOWN_ROWS, NonFiniteVectors
from neoembed.index import encode
from neoembed.index.corpus import CorpusReader
from neoembed.index.errors import IndexingError, IndexMismatchError
from neoembed.index.factory import choose_factory, faiss_metric, nlist
from neoembed.index.manifest import (
    MANIFEST_FILE,
    STATE_FILE,
    STORE_FILE,
    VECTORS_FILE,
    Manifest,
    Tuning,
    append_log,
    record_files,
)
from neoembed.index.settings import AddSettings, BuildSettings, RebuildSettings, TuneSettings
from neoembed.index.store import DocStore
from neoembed.index.train import train_and_add
from neoembed.index.tune import exact_neighbors, tune
from neoembed.run_files import atomic_write, is_lock_file, one_writer
from neoembed.vector_file import embed_to_file, read_vectors, trim_vectors

log = logging.getLogger("neoembed.index")

GIVEN = "given by --factory"
EMBED_CHUNK = 2048  # documents embedded, then appended to the vector file, per step


def _report_skips(corpus: CorpusReader, directory: Path) -> None:
    if corpus.not_utf8.count:
        first = corpus.not_utf8.first
        log.warning(
            "%d rows hold bytes that are not UTF-8, read with U+FFFD in their place (first: %s)",
            corpus.not_utf8.count,
            first[0],
        )
        append_log(directory, {"step": "read", "not_utf8": corpus.not_utf8.count, "first_not_utf8": first})
    if corpus.skipped.count:
        shown = "; ".join(corpus.skipped.first[:5])
        log.warning("skipped %d unreadable rows (first: %s)", corpus.skipped.count, shown)
        append_log(
            directory,
            {"step": "read", "skipped": corpus.skipped.count, "first_skipped": corpus.skipped.first},
        )


def _write_index(index, path: Path) -> None:
    """Write through a temporary sibling (a full disk leaves no partial file). faiss writes from C++ and
    raises RuntimeError with the system's reason in its text, not OSError."""
    try:
        with atomic_write(path) as tmp:
            faiss.write_index(index, str(tmp))
    except RuntimeError as err:
        reason = str(err).strip().splitlines()[-1]
        raise IndexingError(f"cannot write {path}: {reason} ({free_space(path)} free there)") from err


def _open_out_dir(out: Path, model_state: dict[str, Any]) -> dict[str, Any] | None:
    """Create `out` (returns None), or return the state of the unfinished build there, which must be of the
    same model; the state file is written first, so a crash at any later point leaves a resumable build."""
    state_path = out / STATE_FILE
    if out.exists() and any(not is_lock_file(entry) for entry in out.iterdir()):
        if not state_path.exists():
            raise IndexingError(f"{out} is not empty and holds no unfinished build; choose another --out")
        previous = json.loads(state_path.read_text())
        if {key: previous.get(key) for key in model_state} != model_state:
            raise IndexingError(f"{out} holds an unfinished build with another model or metric")
        log.info("resuming an unfinished build")
        return previous
    out.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps(model_state))  # the corpus digest follows once it is read
    return None


def _store_corpus(out: Path, corpus: CorpusReader, previous: dict | None, model_state: dict) -> int:
    """Stream the corpus into a new document store; an unfinished build's vectors are kept only when they
    were made from the same documents. Returns the number of documents."""
    staging = out / (STORE_FILE + ".tmp")  # the store replaced only once the corpus read without error
    staging.unlink(missing_ok=True)
    store = DocStore(staging)
    try:
        n, digest = store.add_corpus(corpus, 0)
    finally:
        store.close()
    if previous is not None and previous.get("corpus") not in (None, digest):
        staging.unlink()
        raise IndexingError(
            f"{out} holds an unfinished build of another corpus: rerun that, or choose another --out"
        )
    os.replace(staging, out / STORE_FILE)
    (out / STATE_FILE).write_text(json.dumps(model_state | {"corpus": digest}))
    return n


def _embed(
    embedder, store: DocStore, start: int, stop: int, out: Path, *, normalize: bool, batch_size: int
) -> None:
    """Embed the documents at positions start .. stop - 1 into the vector file's rows of the same numbers,
    resuming after its last complete chunk. A document the model gives a non-finite vector stops the run
    before that chunk is written, naming the documents by id."""

    def on_chunk(done: int, size: int, seconds: float) -> None:
        append_log(out, {"step": "embed", "rows": start + done, "docs_per_s": size / seconds})

    try:
        embed_to_file(embedder, store.texts(start, stop), out / VECTORS_FILE, chunk_rows=EMBED_CHUNK,
                      batch_size=batch_size, normalize=normalize, offset=start, on_chunk=on_chunk)  # fmt: skip
    except NonFiniteVectors as err:
        ids = ", ".join(repr(doc.id) for doc in store.get(err.rows[:SHOWN_ROWS]))
        raise NonFiniteVectors(err.rows, f"documents {ids}") from None


def _empty_index(factory: str, dim: int, metric: str, n: int | None = None):
    """The untrained index for `factory`, checked before any corpus or embedding work is spent on it:
    the factory string, and where `n` is given, that `n` vectors are enough to train it."""
    try:
        index = faiss.index_factory(dim, factory, faiss_metric(metric))
    except RuntimeError as err:
        raise IndexingError(f"invalid --factory {factory!r}: {str(err).strip().splitlines()[-1]}") from err
    lists = nlist(index) or 0
    if n is not None and n < lists:
        raise IndexingError(
            f"factory {factory!r} needs at least {lists} vectors to train, the corpus has {n}"
        )
    return index


def _tune_and_commit(
    index, vectors, out: Path, manifest_fields: dict, target: float, threads: int, settings: TuneSettings
):
    """Tune on held-out corpus queries, write the index under a new name, then the manifest (the commit)."""
    n = len(vectors)
    rng = np.random.default_rng(settings.seed + 1)
    rows = np.sort(rng.choice(n, min(settings.tune_queries, n), replace=False))
    xq = np.ascontiguousarray(vectors[rows])
    truth, exact_qps = exact_neighbors(xq, vectors, manifest_fields["metric"], self_ids=rows)

    def on_point(name, point):
        log.info("%s=%s recall@10=%.4f qps=%.0f", name, point.value, point.recall_at_10, point.qps_batch)
        append_log(out, {"step": "tune", name: point.value, **vars(point)})

    params, chosen, curve = tune(index, xq, truth, target, self_ids=rows, on_point=on_point)
    if chosen.recall_at_10 < target:
        log.warning(
            "recall@10 %.3f stays below the target %.3f at every setting tried", chosen.recall_at_10, target
        )
    index_file = f"index-{n}-{int(time.time() * 1000)}.faiss"  # a new name on every write
    _write_index(index, out / index_file)
    tuning = Tuning(
        target_recall=target, queries=len(rows), recall_at_10=chosen.recall_at_10, qps_batch=chosen.qps_batch,
        qps_single=chosen.qps_single, exact_qps_batch=exact_qps, threads=threads, curve=curve,
    )  # fmt: skip
    previous = manifest_fields.pop("previous_index_file", None)
    manifest = Manifest(
        **manifest_fields,
        index_file=index_file,
        search_params=params,
        ntotal=n,
        tuning=tuning,
        faiss_version=faiss.__version__,
        files=record_files(out, [index_file, STORE_FILE, VECTORS_FILE]),
    )
    manifest.save(out)
    if previous and previous != index_file:
        (out / previous).unlink(missing_ok=True)
    append_log(
        out,
        {
            "step": "done",
            "ntotal": n,
            "factory": manifest.factory,
            **params,
            "recall_at_10": chosen.recall_at_10,
        },
    )
    return manifest


def build_index(
    sources: Sequence[str | Path], out: str | Path, settings: BuildSettings | None = None, /, **fields
) -> Manifest:
    """Embed the documents of `sources` and write a tuned index directory at `out`; `settings` or
    `fields` (`model="minilm"`, `threads=2`, ...) as in `BuildSettings`."""
    settings = BuildSettings.of(settings, **fields)
    out = Path(out)
    with one_writer(out, "index", param="--out"):  # a second writer stops here, before any work
        if (out / MANIFEST_FILE).exists():
            raise IndexingError(
                f"{out} already holds an index: use `neoembed index add` or choose another --out"
            )
        threads = set_threads(settings.threads)
        # the reader checks that every file exists before a model is loaded
        corpus = CorpusReader(sources, id_field=settings.id_field, text_field=settings.text_field)
        embedder, fingerprint = encode.load_model(settings.model, settings.dtype, settings.compile)
        dim = encode.dimension(embedder)
        factory, metric = settings.factory, settings.metric
        if factory != "auto":
            _empty_index(factory, dim, metric)
        normalized = metric == "cosine"
        model_state = {"model_fingerprint": fingerprint, "dimension": dim, "normalized": normalized}
        previous = _open_out_dir(out, model_state)
        n = _store_corpus(out, corpus, previous, model_state)
        _report_skips(corpus, out)
        reason = GIVEN
        if factory == "auto":
            factory, reason = choose_factory(n, dim, settings.memory_bytes)
        index = _empty_index(factory, dim, metric, n)
        store = DocStore(out / STORE_FILE, readonly=True)
        try:
            _embed(embedder, store, 0, n, out, normalize=normalized, batch_size=settings.batch_size)
        finally:
            store.close()

        vectors = read_vectors(out / VECTORS_FILE, dim, n)
        log.info("index %s: %s", factory, reason)
        train_and_add(index, vectors, seed=settings.seed)
        manifest_fields = dict(model=settings.model, model_fingerprint=fingerprint, dimension=dim, metric=metric,
                               normalized=normalized, factory=factory, factory_reason=reason)  # fmt: skip
        manifest = _tune_and_commit(
            index, vectors, out, manifest_fields, settings.target_recall, threads, settings
        )
        (out / STATE_FILE).unlink(missing_ok=True)
        return manifest


def _grown_reason(manifest: Manifest, ntotal: int) -> str:
    """Why the index has its factory once `index add` grew it to `ntotal` documents."""
    if manifest.factory_reason == GIVEN:
        return GIVEN
    auto, reason = choose_factory(ntotal, manifest.dimension)
    if auto == manifest.factory:
        return reason  # still the auto choice at the new size
    return (
        f"the auto choice when the index was smaller; grown to {ntotal} documents, auto would now choose "
        f"{auto} ({reason}): `neoembed index rebuild` switches"
    )


def _resume_add(out: Path, state: dict, dim: int, n: int) -> None:
    """Keep the vectors an interrupted add of the same documents left past row `n`; otherwise drop them."""
    state_path = out / STATE_FILE
    if state_path.exists() and json.loads(state_path.read_text()) == state:
        log.info("resuming an unfinished add")
        return
    trim_vectors(out / VECTORS_FILE, dim, n)
    state_path.write_text(json.dumps(state))


def add_documents(
    index_dir: str | Path, sources: Sequence[str | Path], settings: AddSettings | None = None, /, **fields
) -> Manifest:
    """Embed and append new documents to an index directory, then re-tune and re-measure it; `settings`
    or `fields` as in `AddSettings`.

    The model (default: the index's) must have the fingerprint the index was built with. An add interrupted
    at any point is resumed by the same call: the documents it had embedded are not embedded again.
    """
    settings = AddSettings.of(settings, **fields)
    out = Path(index_dir)
    with one_writer(out, "index", param="INDEX_DIR", create=False):  # one writer at a time
        threads = set_threads(settings.threads)
        manifest = Manifest.load(out)
        manifest.verify(out)
        name = settings.model or manifest.model
        embedder, fingerprint = encode.load_model(name, settings.dtype, settings.compile)
        if fingerprint != manifest.model_fingerprint:
            raise IndexMismatchError(
                f"model {name!r} (fingerprint {fingerprint}) is not the model the index in {out} was built with: "
                f"{manifest.model!r} (fingerprint {manifest.model_fingerprint}); its vectors would not be comparable"
            )
        corpus = CorpusReader(sources, id_field=settings.id_field, text_field=settings.text_field)
        n, dim = manifest.ntotal, manifest.dimension
        store = DocStore(out / STORE_FILE)
        try:
            store.truncate(n)  # rows of an add that crashed before its manifest was written
            added, digest = store.add_corpus(corpus, n)
            _report_skips(corpus, out)
            _resume_add(out, {"add_to": n, "model_fingerprint": fingerprint, "corpus": digest}, dim, n)
            _embed(embedder, store, n, n + added, out, normalize=manifest.normalized,
                   batch_size=settings.batch_size)  # fmt: skip
        finally:
            store.close()
        vectors = read_vectors(out / VECTORS_FILE, dim, n + added)
        index = faiss.read_index(str(out / manifest.index_file))
        train_and_add(index, vectors[n:])  # trained already: adds only
        manifest_fields = dict(model=manifest.model, model_fingerprint=fingerprint, dimension=dim,
                               metric=manifest.metric, normalized=manifest.normalized, factory=manifest.factory,
                               factory_reason=_grown_reason(manifest, n + added),
                               previous_index_file=manifest.index_file)  # fmt: skip
        committed = _tune_and_commit(
            index, vectors, out, manifest_fields, manifest.tuning.target_recall, threads, settings
        )
        (out / STATE_FILE).unlink(missing_ok=True)
        return committed


def rebuild_index(index_dir: str | Path, settings: RebuildSettings | None = None, /, **fields) -> Manifest:
    """Rebuild an index directory's FAISS index from its stored vectors with another factory (or target),
    without re-embedding; the model is not loaded. The documents and vectors are verified by their checksums;
    the index file is not read, so a damaged one is replaced. `settings` or `fields` as in
    `RebuildSettings`."""
    settings = RebuildSettings.of(settings, **fields)
    out = Path(index_dir)
    with one_writer(out, "index", param="INDEX_DIR", create=False):  # one writer at a time
        threads = set_threads(settings.threads)
        manifest = Manifest.load(out)
        manifest.verify(out, without_index=True)  # the index is what is replaced: the rest must be intact
        vectors = read_vectors(out / VECTORS_FILE, manifest.dimension, manifest.ntotal)
        factory, reason = settings.factory, GIVEN
        if factory == "auto":
            factory, reason = choose_factory(manifest.ntotal, manifest.dimension, settings.memory_bytes)
        index = _empty_index(factory, manifest.dimension, manifest.metric, manifest.ntotal)
        train_and_add(index, vectors, seed=settings.seed)
        manifest_fields = dict(model=manifest.model, model_fingerprint=manifest.model_fingerprint,
                               dimension=manifest.dimension, metric=manifest.metric,
                               normalized=manifest.normalized, factory=factory, factory_reason=reason,
                               previous_index_file=manifest.index_file)  # fmt: skip
        target = manifest.tuning.target_recall if settings.target_recall is None else settings.target_recall
        return _tune_and_commit(index, vectors, out, manifest_fields, target, threads, settings)
