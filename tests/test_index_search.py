"""Index directories built with the packaged MiniLM: search, memory-mapped reload, mismatch, add, export, CLI.

Builds pin fp32 (`BUILD`), so vectors compare across builds, chunkings and resumes to 1e-5 on any CPU."""

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from neoembed import vector_file
from neoembed.index import (
    IndexingError,
    IndexMismatchError,
    Manifest,
    RebuildSettings,
    SearchSettings,
    add_documents,
    build as index_build,
    build_index,
    encode as index_encode,
    load_index,
    rebuild_index,
)
from neoembed.vector_file import read_vectors

TOPICS = {
    "astronomy": "the telescope showed the rings of saturn and the moons of jupiter",
    "cooking": "simmer the tomatoes with garlic and basil to make a pasta sauce",
    "cycling": "pump up the bicycle tyre and oil the chain before the ride",
    "finance": "the central bank raised interest rates to slow inflation",
    "music": "she practised the violin concerto every evening before the concert",
    "gardening": "plant the tulip bulbs in autumn and water the roses in summer",
}
FACTORIES = ["Flat", "IVF4,Flat", "HNSW8"]
BUILD = {"threads": 2, "tune_queries": 60, "dtype": "float32"}


def _write_corpus(path, topics, per_topic=12, prefix=""):
    with path.open("w") as f:
        for topic, sentence in topics.items():
            for i in range(per_topic):
                f.write(
                    json.dumps(
                        {"id": f"{prefix}{topic}-{i}", "text": f"{sentence} (part {i})", "topic": topic}
                    )
                    + "\n"
                )
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return _write_corpus(tmp_path_factory.mktemp("corpus") / "docs.jsonl", TOPICS)


@pytest.fixture(scope="module")
def built(tmp_path_factory, corpus):
    """One index directory per factory: the corpus embedded once, then rebuilt from the stored vectors."""
    root = tmp_path_factory.mktemp("indexes")
    manifests = {"Flat": build_index([corpus], root / "Flat", **BUILD)}  # auto: Flat
    for factory in FACTORIES[1:]:
        shutil.copytree(root / "Flat", _dir({"root": root}, factory))
        # settings and keyword fields together: both reach the manifest (tuning.queries, tuning.threads)
        settings = RebuildSettings(factory=factory, tune_queries=60)
        manifests[factory] = rebuild_index(_dir({"root": root}, factory), settings, threads=2)
    return manifests | {"root": root}


def _dir(built, factory):
    return built["root"] / factory.replace(",", "_")


def test_manifest_records_model_dimension_and_measurements(built):
    _, fingerprint = index_encode.load_model("minilm")
    for factory in FACTORIES:
        manifest = Manifest.load(_dir(built, factory))
        assert manifest == built[factory]
        assert (manifest.model, manifest.model_fingerprint, manifest.dimension) == (
            "minilm",
            fingerprint,
            384,
        )
        assert (manifest.metric, manifest.normalized, manifest.factory, manifest.ntotal) == (
            "cosine",
            True,
            factory,
            72,
        )
        t = manifest.tuning
        assert (
            t.queries == 60
            and t.threads == 2
            and t.qps_batch > 0
            and t.qps_single > 0
            and t.exact_qps_batch > 0
        )
        assert t.recall_at_10 >= 0.95 and t.curve[-1]["recall_at_10"] == t.recall_at_10
        vectors = read_vectors(_dir(built, factory) / "vectors.f32", 384)
        assert vectors.shape == (72, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)
    for factory in FACTORIES[1:]:  # rebuilt in place: the Flat index file it replaced is gone
        assert not (_dir(built, factory) / built["Flat"].index_file).exists()
    assert built["IVF4,Flat"].search_params.keys() == {"nprobe"}
    assert built["HNSW8"].search_params.keys() == {"efSearch"}
    assert built["Flat"].search_params == {} and built["Flat"].tuning.recall_at_10 == 1.0


@pytest.mark.parametrize("factory", FACTORIES)
def test_search_ranks_the_matching_topic_first(built, factory):
    index = load_index(_dir(built, factory))
    hits = index.search("which planets have moons and rings", k=5)
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert all(h.metadata["topic"] == "astronomy" and h.id.startswith("astronomy-") for h in hits)
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    batch = index.search_batch(["raising interest rates", "garlic tomato sauce"], k=3)
    assert [b[0].metadata["topic"] for b in batch] == ["finance", "cooking"]


def test_search_returns_the_settings_k_unless_a_call_asks_another(built):
    assert len(load_index(_dir(built, "Flat")).search("violin")) == 10  # SearchSettings' default
    index = load_index(_dir(built, "Flat"), SearchSettings(k=3))
    assert len(index.search("violin")) == 3 and len(index.search("violin", k=5)) == 5
    assert [len(hits) for hits in index.search_batch(["violin", "saturn"])] == [3, 3]


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_ip_and_l2_indexes_score_and_rank_by_their_metric(tmp_path, metric):
    corpus = _write_corpus(tmp_path / "docs.jsonl", TOPICS, per_topic=3)
    manifest = build_index(
        [corpus], tmp_path / metric, metric=metric, factory="HNSW8", threads=2, tune_queries=18
    )
    assert (manifest.metric, manifest.normalized) == (metric, False) and manifest.tuning.recall_at_10 >= 0.95
    index = load_index(tmp_path / metric)
    query = "which planets have moons and rings"
    hits = index.search(query, k=6)
    # Scores are the metric itself, recomputed here from the stored vectors and the query's embedding.
    ids = [d.id for batch in index.store.iter_batches() for d in batch]
    vectors, q = read_vectors(tmp_path / metric / "vectors.f32", 384), index.encode([query])[0]
    exact = vectors @ q if metric == "ip" else ((vectors - q) ** 2).sum(axis=1)
    best_first = np.argsort(-exact if metric == "ip" else exact)[:6]
    assert [h.id for h in hits] == [ids[i] for i in best_first]
    assert np.allclose([h.score for h in hits], exact[best_first], atol=1e-4)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=metric == "ip")  # l2: smallest distance first
    assert all(h.metadata["topic"] == "astronomy" for h in hits[:3])


@pytest.mark.parametrize("factory", FACTORIES)
def test_memory_mapped_reload_returns_identical_results(built, factory):
    directory = _dir(built, factory)
    mapped, loaded = load_index(directory, mmap=True), load_index(directory, mmap=False)
    queries = mapped.encode(list(TOPICS.values()) + ["something unrelated entirely"])
    a, b = mapped.search_vectors(queries, k=10), loaded.search_vectors(queries, k=10)
    assert [[(h.id, h.score) for h in row] for row in a] == [[(h.id, h.score) for h in row] for row in b]
    index_file = str(directory / built[factory].index_file)
    with open("/proc/self/maps") as maps:
        assert index_file in maps.read()  # the index file is mapped, not read into memory


@pytest.fixture(scope="module")
def other_model(tmp_path_factory, minilm_path):
    """A fine-tuned variant of MiniLM: same architecture and dimension, other weights."""
    import torch
    from sentence_transformers import SentenceTransformer

    other = SentenceTransformer(str(minilm_path), device="cpu")
    with torch.no_grad():
        next(other.parameters())[0, 0] += 0.01
    path = tmp_path_factory.mktemp("other") / "other"
    other.save(str(path))
    return path


def test_a_different_model_or_dimension_is_refused(built, other_model):
    directory = _dir(built, "Flat")
    with pytest.raises(IndexMismatchError, match=r"is not the model the index .* was built with: 'minilm'"):
        load_index(directory, model=str(other_model)).search("saturn")
    with pytest.raises(IndexMismatchError, match="query vectors have dimension 128, the index .* has 384"):
        load_index(directory).search_vectors(np.zeros((1, 128), dtype="float32"))


def _new_corpus(tmp_path):
    chess = {"chess": "the grandmaster sacrificed her queen to checkmate the king"}
    return _write_corpus(tmp_path / "new.jsonl", chess, 5, "new-")


@pytest.mark.parametrize("factory", FACTORIES)
def test_add_then_search_finds_the_new_documents(built, tmp_path, factory):
    directory = tmp_path / "index"
    shutil.copytree(_dir(built, factory), directory)
    new = _new_corpus(tmp_path)
    manifest = add_documents(directory, [new], threads=2, tune_queries=60)
    assert manifest.ntotal == 77 and manifest.index_file != built[factory].index_file
    assert not (directory / built[factory].index_file).exists()
    assert not (directory / "build_state.json").exists()
    assert (
        manifest.tuning.recall_at_10 >= 0.95
        and manifest.search_params.keys() == built[factory].search_params.keys()
    )
    hits = load_index(directory).search("a chess game ending in checkmate", k=5)
    assert {h.id for h in hits} == {f"new-chess-{i}" for i in range(5)}
    assert load_index(directory).search("saturn's rings", k=1)[0].metadata["topic"] == "astronomy"
    # The reason still holds at the new size: re-derived for an auto choice, kept for a given factory.
    expected = (
        "77 vectors <= 50000: exact search is fast enough" if factory == "Flat" else "given by --factory"
    )
    assert manifest.factory_reason == expected
    with pytest.raises(IndexingError, match=r"document id 'new-chess-0' at new.jsonl:1 is already in "):
        add_documents(directory, [new], threads=2)


def _index_state(directory):
    """Everything an index directory answers with: manifest figures, documents, vectors, search results."""
    index = load_index(directory)
    hits = index.search_batch(["checkmate with the queen", "saturn's rings", "pasta sauce"], k=10)
    m = index.manifest
    return {
        "manifest": (m.ntotal, m.factory, m.factory_reason, m.search_params, m.tuning.recall_at_10),
        "docs": [(d.id, d.text, d.metadata) for batch in index.store.iter_batches() for d in batch],
        "vectors": (directory / "vectors.f32").read_bytes(),
        "hits": [[(h.id, h.score) for h in row] for row in hits],
    }


@pytest.mark.parametrize("crash", ["embedding", "committing"])
@pytest.mark.faults
def test_interrupted_add_resumes_to_the_same_index(built, tmp_path, monkeypatch, crash):
    monkeypatch.setattr(index_build, "EMBED_CHUNK", 2)  # 5 new documents: chunks of 2, 2 and 1
    new = _new_corpus(tmp_path)
    armed = [True]  # the first add is interrupted, the second runs to the end
    for name in ("reference", "interrupted"):
        shutil.copytree(_dir(built, "HNSW8"), tmp_path / name)
    add_documents(tmp_path / "reference", [new], threads=2, tune_queries=60)

    real_embed, real_commit, embedded = vector_file.embed, index_build._tune_and_commit, []

    def embed_then_fail(model, texts, **kwargs):
        if crash == "embedding" and armed and len(embedded) == 2:
            raise KeyboardInterrupt  # stopped after the first chunk was written
        embedded.extend(texts)
        return real_embed(model, texts, **kwargs)

    def fail(*args, **kwargs):
        raise KeyboardInterrupt  # stopped after the store and vectors were written, before the manifest

    monkeypatch.setattr(vector_file, "embed", embed_then_fail)
    if crash == "committing":
        monkeypatch.setattr(index_build, "_tune_and_commit", fail)
    with pytest.raises(KeyboardInterrupt):
        add_documents(tmp_path / "interrupted", [new], threads=2, tune_queries=60)
    before = load_index(tmp_path / "interrupted")  # still the last committed state, and searchable
    assert before.manifest.ntotal == 72 and not any(
        h.id.startswith("new-") for h in before.search("checkmate")
    )
    monkeypatch.setattr(index_build, "_tune_and_commit", real_commit)
    embedded.clear()
    armed.clear()
    add_documents(tmp_path / "interrupted", [new], threads=2, tune_queries=60)
    assert len(embedded) == (3 if crash == "embedding" else 0)  # only what the first run had not written
    assert _index_state(tmp_path / "interrupted") == _index_state(tmp_path / "reference")


@pytest.mark.faults
def test_a_resumed_add_embeds_again_a_row_it_wrote_that_was_damaged(built, tmp_path, monkeypatch):
    """An add stopped once its own rows are on disk (before its commit), one of those rows overwritten, then
    resumed: the damaged chunk and the ones after it are embedded again (their checksums, recorded as each
    chunk was written, no longer match), the intact chunk before it is kept, and the index equals an
    uninterrupted add's: the damaged document finds itself."""
    monkeypatch.setattr(index_build, "EMBED_CHUNK", 2)  # 5 new documents: chunks of 2, 2 and 1
    new = _new_corpus(tmp_path)
    for name in ("reference", "interrupted"):
        shutil.copytree(_dir(built, "HNSW8"), tmp_path / name)
    add_documents(tmp_path / "reference", [new], threads=2, tune_queries=60)

    def fail(*args, **kwargs):
        raise KeyboardInterrupt  # stopped after every row was written, before the manifest

    real_commit = index_build._tune_and_commit
    monkeypatch.setattr(index_build, "_tune_and_commit", fail)
    with pytest.raises(KeyboardInterrupt):
        add_documents(tmp_path / "interrupted", [new], threads=2, tune_queries=60)
    monkeypatch.setattr(index_build, "_tune_and_commit", real_commit)
    vectors_file = tmp_path / "interrupted" / "vectors.f32"
    with vectors_file.open("r+b") as vectors:  # row 74: the new documents' third, in their second chunk
        vectors.seek(74 * 384 * 4)
        vectors.write(np.zeros(384, np.float32).tobytes())
    real_embed, embedded = vector_file.embed, []

    def counting_embed(model, texts, **kwargs):
        embedded.extend(texts)
        return real_embed(model, texts, **kwargs)

    monkeypatch.setattr(vector_file, "embed", counting_embed)
    add_documents(tmp_path / "interrupted", [new], threads=2, tune_queries=60)
    assert len(embedded) == 3  # the damaged chunk (2) and the one after it (1); the first chunk was intact
    assert _index_state(tmp_path / "interrupted") == _index_state(tmp_path / "reference")
    third = load_index(tmp_path / "interrupted").store.get([74])[0]
    assert load_index(tmp_path / "interrupted").search(third.text, k=1)[0].id == third.id


def test_add_with_another_model_is_refused_and_changes_nothing(built, tmp_path, other_model):
    from neoembed.cli import app

    directory = tmp_path / "index"
    shutil.copytree(_dir(built, "Flat"), directory)
    new = _new_corpus(tmp_path)
    with pytest.raises(IndexMismatchError, match=r"'.*other' \(fingerprint \w+\) is not the model the index"):
        add_documents(directory, [new], model=str(other_model), threads=2)
    result = CliRunner().invoke(
        app, ["index", "add", str(directory), "--corpus", str(new), "--model", str(other_model)]
    )
    assert (
        result.exit_code == 2
        and "is not the model the index" in result.output
        and "Traceback" not in result.output
    )
    assert Manifest.load(directory) == built["Flat"] and sorted(
        p.name for p in directory.iterdir()
    ) == sorted(p.name for p in _dir(built, "Flat").iterdir())


def test_export_writes_ids_texts_metadata_and_vectors(built, tmp_path):
    directory = _dir(built, "HNSW8")
    out = tmp_path / "export.parquet"
    from neoembed.index import export_index

    export_index(directory, out)
    table = pq.read_table(out)
    assert table.num_rows == 72 and table.column_names == ["id", "text", "metadata", "vector"]
    assert table["id"][0].as_py() == "astronomy-0" and json.loads(table["metadata"][0].as_py()) == {
        "topic": "astronomy"
    }
    vectors = np.stack(table["vector"].to_numpy(zero_copy_only=False))
    assert np.array_equal(vectors, read_vectors(directory / "vectors.f32", 384))
    fresh = load_index(directory).encode([table["text"][7].as_py()])[0]
    assert float(fresh @ vectors[7]) > 0.999
    assert json.loads(pq.read_schema(out).metadata[b"neoembed.manifest"])["factory"] == "HNSW8"


def test_interrupted_build_resumes_without_re_embedding(corpus, tmp_path, monkeypatch, built):
    monkeypatch.setattr(index_build, "EMBED_CHUNK", 25)
    real_embed, embedded = vector_file.embed, []

    def embed_then_fail(model, texts, **kwargs):
        if len(embedded) == 50:
            raise KeyboardInterrupt  # the user stops the build after the first chunk
        embedded.extend(texts)
        return real_embed(model, texts, **kwargs)

    monkeypatch.setattr(vector_file, "embed", embed_then_fail)
    with pytest.raises(KeyboardInterrupt):
        build_index([corpus], tmp_path / "index", **BUILD)
    assert not (tmp_path / "index" / "manifest.json").exists()
    other = _write_corpus(tmp_path / "other.jsonl", {"music": TOPICS["music"]}, 3)
    with pytest.raises(IndexingError, match="holds an unfinished build of another corpus"):
        build_index([other], tmp_path / "index", threads=2)  # refused, and the unfinished build kept
    embedded.clear()
    monkeypatch.setattr(
        vector_file,
        "embed",
        lambda model, texts, **kw: embedded.extend(texts) or real_embed(model, texts, **kw),
    )
    manifest = build_index([corpus], tmp_path / "index", **BUILD)
    assert len(embedded) == 22  # only the chunks the first run did not finish
    assert manifest.ntotal == 72 and not (tmp_path / "index" / "build_state.json").exists()
    resumed = read_vectors(tmp_path / "index" / "vectors.f32", 384)
    assert np.allclose(resumed, read_vectors(_dir(built, "Flat") / "vectors.f32", 384), atol=1e-5)


def test_cli_build_search_export_and_clear_errors(corpus, tmp_path):
    from neoembed.cli import app

    runner = CliRunner()
    out = tmp_path / "index"
    result = runner.invoke(app, ["index", "build", "--corpus", str(corpus), "--out", str(out), "--threads", "2",
                                 "--tune-queries", "50"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "72 documents, Flat (exact), recall@10 1.000 on 50 held-out queries" in result.output
    result = runner.invoke(app, ["search", "--index", str(out), "violin practice", "-k", "2", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output.strip().splitlines()[-1])
    assert answer["query"] == "violin practice" and [h["rank"] for h in answer["hits"]] == [1, 2]
    assert answer["hits"][0]["metadata"]["topic"] == "music"
    result = runner.invoke(app, ["search", "--index", str(out), "violin practice", "-k", "1"])
    assert "  1  0." in result.output and "music-" in result.output
    result = runner.invoke(app, ["index", "export", str(out), "--out", str(tmp_path / "e.parquet")])
    assert result.exit_code == 0 and pq.read_metadata(tmp_path / "e.parquet").num_rows == 72

    failures = {
        ("search", "--index", str(tmp_path / "nowhere"), "q"): "is not an index directory",
        ("index", "build", "--corpus", str(corpus), "--out", str(out)): "already holds an index",
        ("index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "x"), "--factory", "IVF4096,Flat"):
            "needs at least 4096 vectors to train, the corpus has 72",
        ("index", "build", "--corpus", str(corpus), "--out", str(tmp_path / "y"), "--factory", "Bogus"):
            "invalid --factory 'Bogus'",
        ("index", "build", "--corpus", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "z")): "corpus file not found",
        ("index", "export", str(out), "--out", str(tmp_path / "e.csv"), "--format", "csv"): "--format must be one of 'parquet', got 'csv'",
    }  # fmt: skip
    for args, message in failures.items():
        result = runner.invoke(app, list(args))
        assert result.exit_code == 2 and message in result.output, (args, result.output)
        assert "Traceback" not in result.output


def test_a_short_vector_file_is_an_error_not_zero_vectors(tmp_path):
    from neoembed.vector_file import VectorFileError, trim_vectors

    path = tmp_path / "vectors.f32"
    path.write_bytes(np.ones((3, 4), dtype="float32").tobytes())
    trim_vectors(path, dim=4, rows=2)
    assert path.stat().st_size == 2 * 4 * 4
    with pytest.raises(VectorFileError, match="holds 2 vectors, fewer than the 5"):
        trim_vectors(path, dim=4, rows=5)
    assert path.stat().st_size == 2 * 4 * 4, "the file is left as it was"
