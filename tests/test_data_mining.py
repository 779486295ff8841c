"""Hard-negative mining with the packaged MiniLM teacher: the positive-aware rule and its exclusions."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from neoembed.data.build import BuildConfig, build
from neoembed.data.false_negatives import audit
from neoembed.data.mining import Miner, MiningConfig
from neoembed.data.normalize import clean, text_key
from neoembed.data.relations import Keys, relation_key
from neoembed.data.rescore import RescoreConfig
from neoembed.data.wordnet import load_synsets, split_of
from neoembed.vector_file import chunk_records

PAIRS = [
    ("how do I bake sourdough bread", "Sourdough bread is baked from a fermented starter, flour and water."),
    ("how long to boil an egg", "A soft-boiled egg takes about six minutes in boiling water."),
    ("best way to brew coffee", "Pour-over coffee brewing gives a clean cup with bright flavours."),
    ("how to make pizza dough", "Pizza dough needs flour, water, yeast and salt, kneaded and proofed."),
    ("what is a sourdough starter", "A starter is flour and water fermented by wild yeast and bacteria."),
    ("how to roast vegetables", "Roast vegetables in a hot oven with oil and salt until browned."),
    ("how to train for a marathon", "Marathon training builds weekly mileage with one long run a week."),
    ("how to improve running speed", "Interval sessions and tempo runs make runners faster."),
    ("what shoes for trail running", "Trail running shoes have lugged soles for grip on mud and rock."),
    ("how to stretch after a run", "Stretch calves, hamstrings and quads gently after running."),
    ("what is the capital of france", "Paris is the capital and largest city of France."),
    ("what is the capital of italy", "Rome is the capital city of Italy."),
    ("largest city in germany", "Berlin is the largest city in Germany by population."),
    ("how does photosynthesis work", "Plants use light to turn carbon dioxide and water into sugar."),
    ("why is the sky blue", "Air scatters blue sunlight more than red light."),
    ("how do vaccines work", "Vaccines train the immune system to recognise a pathogen."),
    ("what causes tides", "The moon's gravity pulls the oceans and causes tides."),
    ("how to fix a flat bike tyre", "Remove the tube, find the puncture, patch it and reinflate."),
    ("how to learn python", "Python is learned fastest by writing small programs every day."),
    ("what is a linked list", "A linked list stores elements in nodes that point to the next node."),
]
# A false negative for the first query: it answers it as well as its positive does, and belongs to another
# row, so it sits in the candidate pool; the margin rule must keep it out of that query's negatives.
PLANTED = ("sourdough bread baking", "To bake sourdough bread, mix a fermented starter with flour and water.")


@pytest.fixture(scope="module")
def miner():
    return Miner(MiningConfig(num_negatives=3, candidates=50, batch_size=32))


def keys(texts):
    return np.array([text_key(clean(t)) for t in texts], dtype=np.int64)


def mine(miner, pairs, tmp_path, relations=None):
    """`relations`: {kind: one list of values per row}."""
    queries, positives = [q for q, _ in pairs], [p for _, p in pairs]
    relations = {
        kind: Keys.from_lists([[relation_key(v) for v in row] for row in rows])
        for kind, rows in (relations or {}).items()
    }
    return miner.mine(queries, keys(queries), positives, keys(positives), relations, tmp_path)


def test_margin_rule_removes_the_planted_false_negative(miner, tmp_path):
    pairs = [*PAIRS, PLANTED]
    negatives, stats = mine(miner, pairs, tmp_path)
    model = miner.model
    query, positive = pairs[0]
    q, p, planted = model.encode([query, positive, PLANTED[1]], normalize_embeddings=True)
    assert planted @ q > 0.95 * (p @ q)  # the planted text would be the hardest "negative" without the rule
    assert PLANTED[1] not in negatives[0]
    assert stats.dropped_margin > 0
    texts = sorted({t for pair in pairs for t in pair})
    emb = dict(zip(texts, model.encode(texts, normalize_embeddings=True)))
    for (query, positive), mined in zip(pairs, negatives):
        assert positive not in mined and len(mined) <= 3
        scores = np.array([emb[n] @ emb[query] for n in mined])
        # Every kept negative obeys the rule (tolerance: the miner encoded in other batches).
        assert np.all(scores <= 0.95 * (emb[positive] @ emb[query]) + 1e-4)
        assert np.all(np.diff(scores) <= 1e-4)  # hardest first


def test_same_negatives_as_sentence_transformers_mine_hard_negatives(miner, tmp_path):
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    negatives, _ = mine(miner, PAIRS, tmp_path)
    reference = mine_hard_negatives(
        Dataset.from_dict({"query": [q for q, _ in PAIRS], "positive": [p for _, p in PAIRS]}),
        miner.model,
        relative_margin=0.05,
        num_negatives=3,
        range_max=50,
        output_format="n-tuple",
        use_faiss=True,
        verbose=False,
    )
    ours = {q: n for (q, _), n in zip(PAIRS, negatives)}
    assert len(reference) >= len(PAIRS) // 2
    for row in reference:
        assert ours[row["query"]] == [row[f"negative_{i}"] for i in (1, 2, 3)]


def test_positive_duplicates_other_positives_and_the_query_itself_are_never_negatives(miner, tmp_path):
    pairs = [
        *PAIRS,
        ("what is the capital of france", "The capital of France is the city of Paris."),  # second positive
        (
            "PARIS IS THE CAPITAL AND LARGEST CITY OF FRANCE!",
            "Paris, France's capital.",
        ),  # query = a positive
    ]
    negatives, stats = mine(miner, pairs, tmp_path)
    france = {pairs[10][1], pairs[-2][1]}
    assert not france & set(negatives[10]) and not france & set(negatives[-2])
    assert negatives[10] == negatives[-2]  # one query, mined once
    assert pairs[10][1] not in negatives[-1]  # near-duplicate of the query (case, punctuation)
    assert stats.dropped_positive >= len(pairs)


def test_rows_sharing_any_relation_are_never_negatives_for_each_other(miner, tmp_path):
    ungrouped, _ = mine(miner, PAIRS, tmp_path / "a")
    victim = ungrouped[0][0]  # the hardest negative of the first query, the positive of some row r
    r = next(i for i, (_, p) in enumerate(PAIRS) if p == victim)
    second = next(n for n in ungrouped[r] if n != PAIRS[0][1])  # a negative of row r, the positive of row s
    s = next(i for i, (_, p) in enumerate(PAIRS) if p == second)
    # Row 0 and row r share a value in a list ("bread"), r and s a thread id; other rows have other values.
    words = [["bread", "oven"] if i == 0 else ["bread"] if i == r else [f"w{i}"] for i in range(len(PAIRS))]
    thread = [["t1"] if i in (r, s) else [] for i in range(len(PAIRS))]
    related, stats = mine(miner, PAIRS, tmp_path / "b", {"words": words, "thread": thread})
    assert victim not in related[0] and PAIRS[0][1] not in related[r]
    assert second not in related[r] and PAIRS[r][1] not in related[s]
    assert related[0][: len(ungrouped[0]) - 1] == ungrouped[0][1:]  # the rest move up
    # Each removal is counted once, under its kind (every pool text is a candidate of every query here)
    assert stats.dropped_relation == {"words": 2, "thread": 2}


def test_encoding_resumes_after_the_last_complete_chunk(tmp_path):
    miner = Miner(MiningConfig(chunk_rows=8))
    texts = [p for _, p in PAIRS]
    full = np.array(miner.encode(texts, tmp_path / "a.f32"))
    row = full.shape[1] * 4
    # As if killed while writing the second chunk: one whole chunk on disk and recorded, then a torn write.
    (tmp_path / "b.f32").write_bytes(full[:8].tobytes() + full[8:11].tobytes()[: 2 * row + 5])
    first_record = chunk_records(tmp_path / "a.f32").read_text().splitlines()[0]
    chunk_records(tmp_path / "b.f32").write_text(first_record + "\n")
    resumed = np.array(miner.encode(texts, tmp_path / "b.f32"))
    encoded = [
        json.loads(line)["rows"] for line in chunk_records(tmp_path / "b.f32").read_text().splitlines()
    ]
    assert encoded == [[0, 8], [8, 16], [16, 20]]  # chunk one was not encoded again
    np.testing.assert_array_equal(resumed, full)  # same chunk boundaries: the same bytes
    assert (tmp_path / "b.f32").stat().st_size == len(texts) * row


def test_wordnet_build_mines_negatives_and_excludes_heldout_synsets(tmp_path):
    from pathlib import Path

    manifests = Path(__file__).resolve().parents[1] / "data_manifests"
    stats = build(
        BuildConfig(
            manifests=manifests,
            out=tmp_path,
            sources=("wordnet",),
            # Synsets come in a pseudo-random order: enough rows that the words of some share senses.
            max_rows=600,
            rows_per_shard=400,
            mining=MiningConfig(batch_size=64),
        )
    ).stats
    rows = [
        r for p in sorted((tmp_path / "wordnet").glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()
    ]
    assert (
        len(rows) == stats["sources"]["wordnet"]["rows_out"] > 400
        and stats["sources"]["wordnet"]["parts"] == 2
    )
    assert stats["sources"]["wordnet"]["negatives_per_row"] > 1
    train = set()
    for s in load_synsets():
        texts = {s.gloss, ", ".join(s.lemmas), *s.lemmas, *s.examples}
        if split_of(s.id) == "train":
            train.update(texts)
    for row in rows:
        assert row["query"] in train and row["positive"] in train
    # No lemma query got a gloss or word of another sense of its words, of a synonym's sense, or of a hypernym.
    relation = stats["sources"]["wordnet"]["mining"]["dropped_relation"]
    assert relation["synsets"] and relation["lemmas"]  # any relation kind: test_rows_sharing_any_relation_*
    report = audit(tmp_path)
    # A word whose senses the relations do not link (e.g. another lemma spelled alike) can slip through: on the
    # 20,000-row build 0.02% of lemma queries' negatives (docs/contrastive.md), 3.5% before the relations.
    lemma_queries = report["lemma_queries"]
    assert lemma_queries.negatives > 100 and lemma_queries.false <= 0.01 * lemma_queries.negatives


def test_the_audit_counts_other_senses_and_hypernyms_of_a_lemma_query_as_false(tmp_path):
    import json

    import pyarrow as pa

    dog = next(s for s in load_synsets() if s.lemmas[:2] == ("dog", "domestic dog"))
    negatives = [
        "metal supports for logs in a fireplace",  # andiron, firedog, dog: another sense of "dog"
        "any of various fissiped mammals with nonretractile claws and typically long muzzles",  # canine
        "a hinged catch that fits into a notch of a ratchet to move a wheel forward",  # not a gloss
    ]
    row = {"query": ", ".join(dog.lemmas), "positive": dog.gloss, "negatives": negatives, "source": "wordnet"}
    (tmp_path / "wordnet").mkdir()
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "wordnet" / "part-00000.parquet")
    (tmp_path / "stats.json").write_text(json.dumps({"sources": {"wordnet": {"rows_out": 1}}}))
    report = audit(tmp_path)["lemmas_gloss"]
    assert report.negatives == 3 and report.false == 2
    assert report.false_by_kind == {"other_sense": 1, "hypernym": 1, "same_synset": 0}


@pytest.mark.slow
@pytest.mark.faults
def test_killed_build_resumes_to_a_byte_identical_result(tmp_path):
    """A real SIGKILL while mining WordNet parts; the resumed build equals an uninterrupted one byte for byte."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    manifests = Path(__file__).resolve().parents[1] / "data_manifests"
    args = [
        "--manifests",
        str(manifests),
        "--max-rows",
        "400",
        "--rows-per-shard",
        "100",
        "--batch-size",
        "32",
    ]
    command = [sys.executable, "-c", "from neoembed.cli import main; main()", "build-data", *args]
    subprocess.run([*command, "--out", str(tmp_path / "reference")], check=True, capture_output=True)

    killed = subprocess.Popen([*command, "--out", str(tmp_path / "killed")], stderr=subprocess.DEVNULL)
    first_marker = tmp_path / "killed" / "wordnet" / "part-00000.json"
    while not first_marker.exists():
        assert killed.poll() is None, "the build finished before it could be killed"
        time.sleep(0.05)
    time.sleep(1.0)  # into the second part's encoding
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert not (tmp_path / "killed" / "stats.json").exists()
    subprocess.run([*command, "--out", str(tmp_path / "killed")], check=True, capture_output=True)

    files = sorted(
        p.relative_to(tmp_path / "reference")
        for p in (tmp_path / "reference").rglob("*")
        if p.is_file() and p.name != "build.jsonl"
    )
    assert len([f for f in files if f.suffix == ".parquet" and f.parts[0] == "wordnet"]) == 4
    for f in files:
        assert (tmp_path / "reference" / f).read_bytes() == (tmp_path / "killed" / f).read_bytes(), f
    assert not list((tmp_path / "killed" / "work").rglob("*.f32"))  # embeddings are removed once used


def test_mine_always_appends_mined_negatives_after_the_given_ones(tmp_path):
    from data_source_fixtures import MANIFESTS, write_manifests, write_sources

    manifest = MANIFESTS["allnli"] + "options: {mine: always}\n"
    config = BuildConfig(
        manifests=write_manifests(tmp_path / "m", ["allnli"], {"allnli": manifest}),
        out=tmp_path / "out",
        local_data=write_sources(tmp_path / "sources"),
        mining=MiningConfig(num_negatives=2, batch_size=16, margin=1.0),  # margin 1: any lower-scoring text
    )
    stats = build(config).stats
    rows = pq.read_table(tmp_path / "out" / "allnli" / "part-00000.parquet").to_pylist()
    assert rows[0]["negatives"][0] == "Nobody plays."  # the given negative stays first
    positives = {r["positive"] for r in rows}
    for row in rows:
        mined = [n for n in row["negatives"] if n in positives]
        assert mined and row["positive"] not in mined and len(mined) <= 2
    assert stats["sources"]["allnli"]["mining"]["mined"] > 0


def test_a_bi_encoder_rescorer_at_margin_m_drops_what_the_teacher_at_m_would(tmp_path):
    """Rescoring with the teacher itself at a stricter margin: the same negatives as that margin alone."""
    base = dict(num_negatives=3, candidates=50, batch_size=32)
    strict, strict_stats = mine(Miner(MiningConfig(**base, margin=0.5)), PAIRS, tmp_path / "a")
    rescore = RescoreConfig(model="minilm", kind="bi-encoder", margin=0.5, candidates=50, batch_size=32)
    rescored, stats = mine(Miner(MiningConfig(**base, rescore=rescore)), PAIRS, tmp_path / "b")
    assert rescored == strict
    assert stats.dropped_rescore > 0
    assert stats.dropped_margin + stats.dropped_rescore == strict_stats.dropped_margin


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised one-layer BERT cross-encoder with MiniLM's tokenizer (no hub access needed)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from neoembed.embedder import packaged_minilm_path

    path = tmp_path_factory.mktemp("tiny-ce")
    tokenizer = AutoTokenizer.from_pretrained(packaged_minilm_path())
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
        initializer_range=0.5,  # scores spread over (0, 1) rather than all near 0.5
    )
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_cross_encoder_rescorer_vetoes_the_teachers_first_candidates_it_scores_above_the_positive(
    tiny_cross_encoder, tmp_path
):
    from sentence_transformers import CrossEncoder

    base = dict(candidates=50, batch_size=32)
    # The teacher's first 5 surviving candidates per query, which the rescorer will see.
    window, _ = mine(Miner(MiningConfig(**base, num_negatives=5)), PAIRS, tmp_path / "a")
    rescore = RescoreConfig(model=str(tiny_cross_encoder), margin=1.0, candidates=5)
    negatives, stats = mine(
        Miner(MiningConfig(**base, num_negatives=3, rescore=rescore)), PAIRS, tmp_path / "b"
    )
    ce = CrossEncoder(str(tiny_cross_encoder))
    vetoed = 0
    for (query, positive), seen, kept in zip(PAIRS, window, negatives, strict=True):
        positive_score, *scores = ce.predict([(query, positive)] + [(query, n) for n in seen])
        allowed = [n for n, s in zip(seen, scores) if s <= positive_score]  # margin 1: not above the positive
        assert kept == allowed[:3]
        vetoed += len(seen) - len(allowed)
    assert stats.dropped_rescore == vetoed > 0


def test_a_manifest_relation_column_excludes_and_the_build_counts_each_rule(tmp_path):
    """A forum-like source whose rows name their threads: answers in one thread are never each other's
    negatives; stats.json and the command's summary say what each rule removed."""
    import json

    import pyarrow as pa
    from typer.testing import CliRunner

    from neoembed.cli import app

    geo = {10, 11, 12}  # the capital and largest-city rows: one thread, also tagged like their neighbours
    rows = {
        "question": [q for q, _ in PAIRS],
        "answer": [p for _, p in PAIRS],
        "threads": [["geo"] if i in geo else [f"t{i}"] for i in range(len(PAIRS))],
    }
    (tmp_path / "data" / "forum").mkdir(parents=True)
    pq.write_table(pa.table(rows), tmp_path / "data" / "forum" / "train.parquet")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "forum.yaml").write_text(
        "name: forum\ndescription: d\ndataset: local/forum\nlicence: l\nlicence_source: s\npaper: release\n"
        "mapping: {query: question, positive: answer, relations: [threads]}\n"
    )
    args = [
        "build-data",
        "--manifests",
        str(tmp_path / "m"),
        "--sources",
        "forum",
        "--out",
        str(tmp_path / "out"),
    ]
    args += ["--local-data", str(tmp_path / "data"), "--batch-size", "32", "--margin", "1.0"]
    args += ["--rescore-model", "minilm", "--rescore-kind", "bi-encoder", "--rescore-margin", "0.5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output

    records = pq.read_table(tmp_path / "out" / "forum" / "part-00000.parquet").to_pylist()
    for i in geo:
        assert not {PAIRS[j][1] for j in geo} & set(records[i]["negatives"])
    mining = json.loads((tmp_path / "out" / "stats.json").read_text())["sources"]["forum"]["mining"]
    assert mining["dropped_relation"] == {"threads": 6}  # 3 rows x 2 others, every pool text a candidate
    assert mining["dropped_rescore"] > 0  # margin 0.5 under the rescorer is stricter than the teacher's 1.0
    summary = next(line for line in result.output.splitlines() if line.startswith("mining forum:"))
    rules = f"shared relation 6 (threads 6), margin {mining['dropped_margin']}, rescore {mining['dropped_rescore']}"
    assert rules in summary


def test_a_pool_streamed_in_slices_gives_the_negatives_of_a_whole_pool(miner, tmp_path, monkeypatch):
    import neoembed.data.mining

    whole, _ = mine(miner, [*PAIRS, PLANTED], tmp_path / "whole")
    monkeypatch.setattr(neoembed.data.mining, "POOL_CHUNK", 4)  # 21 pool texts: six slices, the last short
    sliced, stats = mine(miner, [*PAIRS, PLANTED], tmp_path / "sliced")
    assert sliced == whole and stats.mined > 0
