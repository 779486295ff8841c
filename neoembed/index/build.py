"""Build an index directory from a corpus, and add documents to one.

build: read the corpus -> store documents -> embed (resumable) -> choose the factory -> train on a sample
-> add -> tune the search parameter on held-out corpus queries -> write index and manifest.
The manifest is written last and names the index file, so it is the commit point: a crash at any step
leaves either no manifest (the build can be rerun and resumes embedding) or the previous consistent state
(an add rerun with the same documents resumes its embedding the same way).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from neoembed.embedding_file import embed_to_file, read_vectors, trim_vectors
from neoembed.faiss_setup import faiss, set_threads
from neoembed.index import encode
from neoembed.index.corpus import Corpus, Document, read_corpus
from neoembed.index.errors import IndexingError, IndexMismatchError
from neoembed.index.factory import choose_factory, faiss_metric
from neoembed.index.manifest import (
    MANIFEST_FILE,
    METRICS,
    STORE_FILE,
    VECTORS_FILE,
    Manifest,
    Tuning,
    append_log,
)
from neoembed.index.store import DocStore
from neoembed.index.tune import exact_neighbors, tune

log = logging.getLogger("neoembed.index")

STATE_FILE = "build_state.json"  # present only while a build or add is unfinished: what its vectors are
GIVEN = "given by --factory"
ADD_CHUNK = 100_000
EMBED_CHUNK = 2048  # documents embedded, then appended to the vector file, per step
MIN_TRAIN = 100_000


def _report_skips(corpus: Corpus, directory: Path) -> None:
    if corpus.skipped:
        shown = "; ".join(corpus.skipped[:5])
        log.warning("skipped %d unreadable rows (first: %s)", len(corpus.skipped), shown)
        append_log(
            directory, {"step": "read", "skipped": len(corpus.skipped), "first_skipped": corpus.skipped[:20]}
        )


def _corpus_digest(documents: list[Document]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for doc in documents:
        digest.update(doc.id.encode() + b"\0" + doc.text.encode() + b"\0")
    return digest.hexdigest()


def _prepare_out_dir(out: Path, state: dict) -> None:
    """Create `out`, or find the unfinished build of the same corpus and model there (its vectors resume)."""
    if out.exists() and any(out.iterdir()):
        state_path = out / STATE_FILE
        if not state_path.exists() or json.loads(state_path.read_text()) != state:
            raise IndexingError(f"{out} is not empty and holds no unfinished build of this corpus and model")
        (out / STORE_FILE).unlink(missing_ok=True)
        log.info("resuming an unfinished build")
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / STATE_FILE).write_text(json.dumps(state))


def _embed(embedder, texts, out: Path, *, normalize: bool, batch_size: int, offset: int = 0) -> None:
    """Embed into the vector file after `offset` rows, resuming after its last complete chunk."""

    def on_chunk(done: int, size: int, seconds: float) -> None:
        append_log(out, {"step": "embed", "rows": offset + done, "docs_per_s": size / seconds})

    embed_to_file(embedder, texts, out / VECTORS_FILE, chunk_rows=EMBED_CHUNK, batch_size=batch_size,
                  normalize=normalize, offset=offset, on_chunk=on_chunk)  # fmt: skip


def _empty_index(factory: str, dim: int, metric: str, n: int):
    """The untrained index for `factory`, checked before any embedding work is spent on it."""
    try:
        index = faiss.index_factory(dim, factory, faiss_metric(metric))
    except RuntimeError as err:
        raise IndexingError(f"invalid --factory {factory!r}: {str(err).strip().splitlines()[-1]}") from err
    nlist = _nlist(index)
    if n < nlist:
        raise IndexingError(
            f"factory {factory!r} needs at least {nlist} vectors to train, the corpus has {n}"
        )
    return index


def _nlist(index) -> int:
    try:
        return faiss.extract_index_ivf(index).nlist
    except RuntimeError:  # not an IVF index
        return 0


def _train_and_fill(index, factory: str, vectors: np.ndarray, seed: int):
    n = len(vectors)
    if not index.is_trained:
        size = min(n, max(MIN_TRAIN, 64 * _nlist(index)))
        rows = np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
        log.info("training %s on %d of %d vectors", factory, size, n)
        index.train(np.ascontiguousarray(vectors[rows]))
    for begin in tqdm(range(0, n, ADD_CHUNK), desc="adding to index", unit="chunk", disable=n <= ADD_CHUNK):
        index.add(np.ascontiguousarray(vectors[begin : begin + ADD_CHUNK]))
    return index


def _tune_and_commit(
    index, vectors, out: Path, manifest_fields: dict, target: float, queries: int, threads: int, seed: int
):
    """Tune on held-out corpus queries, write the index under a new name, then the manifest (the commit)."""
    n = len(vectors)
    rows = np.sort(np.random.default_rng(seed + 1).choice(n, min(queries, n), replace=False))
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
    faiss.write_index(index, str(out / index_file))
    tuning = Tuning(
        target, len(rows), chosen.recall_at_10, chosen.qps_batch, chosen.qps_single, exact_qps, threads, curve
    )
    previous = manifest_fields.pop("previous_index_file", None)
    manifest = Manifest(
        **manifest_fields,
        index_file=index_file,
        search_params=params,
        ntotal=n,
        tuning=tuning,
        faiss_version=faiss.__version__,
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
    sources: list[str | Path],
    out: str | Path,
    *,
    model: str = "minilm",
    factory: str = "auto",
    target_recall: float = 0.95,
    metric: str = "cosine",
    batch_size: int = 64,
    threads: int | None = None,
    memory_bytes: int | None = None,
    tune_queries: int = 1000,
    id_field: str = "id",
    text_field: str = "text",
    seed: int = 0,
) -> Manifest:
    """Embed the documents of `sources` with `model` and write a tuned index directory at `out`."""
    if metric not in METRICS:
        raise IndexingError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    if not 0 < target_recall <= 1:
        raise IndexingError(f"target recall must be in (0, 1], got {target_recall}")
    out = Path(out)
    if (out / MANIFEST_FILE).exists():
        raise IndexingError(f"{out} already holds an index: use `neoembed index add` or choose another --out")
    threads = set_threads(threads)
    corpus = read_corpus(sources, id_field=id_field, text_field=text_field)
    docs = corpus.documents
    embedder, fingerprint = encode.load_model(model)
    dim = encode.dimension(embedder)
    reason = GIVEN
    if factory == "auto":
        factory, reason = choose_factory(len(docs), dim, memory_bytes)
    index = _empty_index(factory, dim, metric, len(docs))
    normalized = metric == "cosine"
    state = {"model_fingerprint": fingerprint, "dimension": dim, "normalized": normalized,
             "corpus": _corpus_digest(docs)}  # fmt: skip
    _prepare_out_dir(out, state)
    _report_skips(corpus, out)
    _embed(embedder, [d.text for d in docs], out, normalize=normalized, batch_size=batch_size)
    store = DocStore(out / STORE_FILE)
    store.append(docs, 0)
    store.close()

    vectors = read_vectors(out / VECTORS_FILE, dim, len(docs))
    log.info("index %s: %s", factory, reason)
    _train_and_fill(index, factory, vectors, seed)
    fields = dict(model=model, model_fingerprint=fingerprint, dimension=dim, metric=metric, normalized=normalized,
                  factory=factory, factory_reason=reason)  # fmt: skip
    manifest = _tune_and_commit(index, vectors, out, fields, target_recall, tune_queries, threads, seed)
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
    index_dir: str | Path,
    sources: list[str | Path],
    *,
    model: str | None = None,
    batch_size: int = 64,
    threads: int | None = None,
    tune_queries: int = 1000,
    id_field: str = "id",
    text_field: str = "text",
    seed: int = 0,
) -> Manifest:
    """Embed and append new documents to an index directory, then re-tune and re-measure it.

    `model` (default: the index's) must have the fingerprint the index was built with. An add interrupted
    at any point is resumed by the same call: the documents it had embedded are not embedded again.
    """
    out = Path(index_dir)
    threads = set_threads(threads)
    manifest = Manifest.load(out)
    name = model or manifest.model
    embedder, fingerprint = encode.load_model(name)
    if fingerprint != manifest.model_fingerprint:
        raise IndexMismatchError(
            f"model {name!r} (fingerprint {fingerprint}) is not the model the index in {out} was built with: "
            f"{manifest.model!r} (fingerprint {manifest.model_fingerprint}); its vectors would not be comparable"
        )
    corpus = read_corpus(sources, id_field=id_field, text_field=text_field)
    _report_skips(corpus, out)
    docs, n, dim = corpus.documents, manifest.ntotal, manifest.dimension
    store = DocStore(out / STORE_FILE)
    try:
        store.truncate(n)  # rows of an add that crashed before its manifest was written
        present = store.existing_ids(d.id for d in docs)
        if present:
            raise IndexingError(f"{len(present)} document ids are already in {out}: {', '.join(present[:5])}")
        state = {"add_to": n, "model_fingerprint": fingerprint, "corpus": _corpus_digest(docs)}
        _resume_add(out, state, dim, n)
        _embed(embedder, [d.text for d in docs], out, normalize=manifest.normalized, batch_size=batch_size,
               offset=n)  # fmt: skip
        store.append(docs, n)
    finally:
        store.close()
    vectors = read_vectors(out / VECTORS_FILE, dim, n + len(docs))
    index = faiss.read_index(str(out / manifest.index_file))
    _train_and_fill(index, manifest.factory, vectors[n:], seed)  # trained already: adds only
    fields = dict(model=manifest.model, model_fingerprint=fingerprint, dimension=dim, metric=manifest.metric,
                  normalized=manifest.normalized, factory=manifest.factory,
                  factory_reason=_grown_reason(manifest, n + len(docs)),
                  previous_index_file=manifest.index_file)  # fmt: skip
    committed = _tune_and_commit(
        index, vectors, out, fields, manifest.tuning.target_recall, tune_queries, threads, seed
    )
    (out / STATE_FILE).unlink(missing_ok=True)
    return committed


def rebuild_index(
    index_dir: str | Path,
    *,
    factory: str = "auto",
    target_recall: float | None = None,
    threads: int | None = None,
    memory_bytes: int | None = None,
    tune_queries: int = 1000,
    seed: int = 0,
) -> Manifest:
    """Rebuild an index directory's FAISS index from its stored vectors with another factory (or target),
    without re-embedding; the model is not loaded."""
    out = Path(index_dir)
    threads = set_threads(threads)
    manifest = Manifest.load(out)
    vectors = read_vectors(out / VECTORS_FILE, manifest.dimension, manifest.ntotal)
    reason = GIVEN
    if factory == "auto":
        factory, reason = choose_factory(manifest.ntotal, manifest.dimension, memory_bytes)
    index = _train_and_fill(
        _empty_index(factory, manifest.dimension, manifest.metric, manifest.ntotal), factory, vectors, seed
    )
    fields = dict(model=manifest.model, model_fingerprint=manifest.model_fingerprint, dimension=manifest.dimension,
                  metric=manifest.metric, normalized=manifest.normalized, factory=factory, factory_reason=reason,
                  previous_index_file=manifest.index_file)  # fmt: skip
    target = manifest.tuning.target_recall if target_recall is None else target_recall
    return _tune_and_commit(index, vectors, out, fields, target, tune_queries, threads, seed)
