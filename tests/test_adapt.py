"""`neoembed adapt`: documents in, pairs made from them alone, an adapted model out; bad input is one line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_contrastive import tiny_encoder_dir
from test_contrastive_run import tiny_neobert_dir
from typer.testing import CliRunner

from neoembed.adapt import CorpusError, make_pairs, read_corpus, read_texts
from neoembed.cli import app
from neoembed.contrastive import evaluated_texts
from neoembed.data import foldoc_retrieval, load_records

WORDS = [
    "kernel",
    "socket",
    "buffer",
    "thread",
    "process",
    "memory",
    "page",
    "cache",
    "driver",
    "device",
    "packet",
    "route",
    "table",
    "index",
    "query",
    "parser",
    "compiler",
    "linker",
    "symbol",
    "stack",
    "heap",
    "signal",
    "timer",
    "clock",
    "file",
    "inode",
    "mount",
    "block",
    "sector",
]


def documents(n: int, seed: int = 0) -> list[str]:
    """`n` distinct two-sentence documents over a small technical vocabulary."""
    rng = random.Random(seed)

    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 10))).capitalize() + "."

    return [f"Document {i}: {sentence()} {sentence()}" for i in range(n)]


def test_each_method_makes_pairs_from_the_document_alone():
    texts = documents(50)
    made = make_pairs(texts, ["crop", "lead", "terms"], seed=0, term_words=2)
    assert {m: len(p) for m, p in made.items()} == {"crop": 50, "lead": 50, "terms": 50}
    by_text = set(texts)
    for first, second in made["crop"]:  # two spans of one document
        assert any(first in t and second in t for t in texts)
    for lead, rest in made["lead"]:  # the first sentence, then the rest
        assert f"{lead} {rest}" in by_text and lead.endswith(".")
    for query, positive in made["terms"]:
        assert positive in by_text and len(query.split()) == 2
        assert all(word in positive for word in query.split())
    hidden = make_pairs(texts, ["terms"], seed=0, hide_terms=True)["terms"]
    assert all(not set(q.casefold().split()) & set(p.casefold().split()) for q, p in hidden)
    assert make_pairs(texts, ["crop"], seed=0) == make_pairs(texts, ["crop"], seed=0)


def test_a_row_budget_passes_over_the_documents_again_except_for_lead():
    made = make_pairs(documents(20), ["crop", "lead"], rows=50, seed=1)
    assert len(made["crop"]) == 50 and len(set(made["crop"])) > 20
    assert len(made["lead"]) == 20  # it draws nothing: a second pass would repeat the first


def write(path: Path, texts: list[str]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:
        path.write_text("".join(t + "\n" for t in texts))
    return path


def test_the_corpus_is_cleaned_deduplicated_and_guarded(tmp_path):
    _, definitions, _ = foldoc_retrieval()
    evaluated = list(definitions.values())[:40]  # an evaluation's documents: what a user searches
    query = "a held-out evaluation query long enough to be a document of its own"
    texts = [*documents(200), *evaluated, "", "too short", documents(1)[0].upper(), query]
    (tmp_path / "queries.txt").write_text(query + "\n")
    corpus = read_corpus(
        write(tmp_path / "docs.jsonl", texts),
        min_words=5,
        min_documents=100,
        selection=30,
        evaluated=evaluated_texts([]),
        eval_texts=(tmp_path / "queries.txt",),
    )
    counts = corpus.counts
    assert (counts.rows, counts.empty, counts.short, counts.duplicates) == (len(texts), 1, 1, 1)
    assert counts.leaked == {"eval_texts": 1}
    assert len(corpus.selection) == 30 and len(corpus.train) == 200 + 40 - 30
    assert set(evaluated) <= set(corpus.train)  # trained on, never selected on
    assert not set(evaluated) & set(corpus.selection)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("docs.csv", "a,b\n", "a corpus is one of .txt, .jsonl, .parquet"),
        ("docs.jsonl", '{"text": "fine"}\n{"text": \n', "docs.jsonl:2: not a JSON object"),
        ("docs.jsonl", '{"body": "no text field"}\n', "docs.jsonl:1: no string field 'text'"),
        ("docs.txt", b"caf\xe9\n", "not UTF-8 text"),
    ],
)
def test_an_unreadable_corpus_is_named_with_its_row(tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(CorpusError, match=expected):
        read_texts(path)


def test_a_parquet_corpus_names_a_missing_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "docs.parquet")
    with pytest.raises(CorpusError, match=r"no column 'text'; it has \['body'\]"):
        read_texts(tmp_path / "docs.parquet")
    assert read_texts(tmp_path / "docs.parquet", field="body") == ["x"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory, minilm_path) -> Path:
    return tiny_encoder_dir(tmp_path_factory.mktemp("adapt-base"), minilm_path)


def adapt_args(corpus: Path, out: Path, base: Path, *more: str) -> list[str]:
    return [
        "adapt", "--corpus", str(corpus), "--out", str(out), "--model", str(base), "--steps", "3",
        "--train.batch_size", "8", "--train.threads", "1", "--train.eval_steps", "3",
        "--train.save_steps", "3", "--train.log_steps", "1", "--corpus.min_documents", "50", "--corpus.selection", "40",
        "--model.max_length", "32", "--export.selection.general", "[]", *more,
    ]  # fmt: skip


def test_adapt_exports_a_model_and_resumes(tmp_path, encoder):
    from sentence_transformers import SentenceTransformer

    corpus, out = write(tmp_path / "docs.txt", documents(300)), tmp_path / "run"
    result = CliRunner().invoke(app, adapt_args(corpus, out, encoder))
    assert result.exit_code == 0, result.output
    assert "corpus: 300 rows -> 260 documents to adapt on, 40 to select on" in result.output
    assert "pairs: crop 8, lead 8, terms 8" in result.output
    recorded = json.loads((out / "adapt.json").read_text())
    assert recorded["pairs"] == {"crop": 8, "lead": 8, "terms": 8}
    selection = load_records(out / "selection")
    assert sorted(selection) == ["crop", "lead", "terms"] and len(selection["lead"]) == 40
    trained = {
        t for rows in load_records(out / "pairs").values() for t in [*rows["query"], *rows["positive"]]
    }
    held = {t for rows in selection.values() for t in [*rows["query"], *rows["positive"]]}
    assert not trained & held  # a short query recurring across documents leaves the selection split
    assert SentenceTransformer(str(out / "model")).encode(["a socket buffer"]).shape == (1, 32)
    again = CliRunner().invoke(app, adapt_args(corpus, out, encoder))
    assert again.exit_code == 0 and "steps: 3" in again.output
    other = CliRunner().invoke(app, adapt_args(corpus, out, encoder, "--pairs.methods", '["crop"]'))
    assert other.exit_code == 2
    assert "holds pairs made from another corpus or other settings" in other.output


def test_a_finished_adapt_rerun_with_every_checkpoint_chooses_among_them(tmp_path, encoder):
    """`--export.checkpoints all` on a finished run (an export change, so it resumes without training):
    checkpoints 2 and 4 each scanned over the base weights, the pick recorded and said."""
    corpus, out = write(tmp_path / "docs.txt", documents(300)), tmp_path / "run"
    every_two = ["--steps", "4", "--train.save_steps", "2", "--train.eval_steps", "2"]
    assert CliRunner().invoke(app, adapt_args(corpus, out, encoder, *every_two)).exit_code == 0
    result = CliRunner().invoke(
        app, adapt_args(corpus, out, encoder, *every_two, "--export.checkpoints", "all")
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "train" / "summary.json").read_text())
    assert summary["steps"] == 4 and {point["step"] for point in summary["selection"]} == {4, 2}
    said = "steps: 4; exported step 2's weights" if summary["exported_step"] == 2 else "steps: 4; base"
    assert said in result.output


def test_no_pair_carries_an_evaluation_query(tmp_path, encoder):
    """A pseudo query the documents happen to yield that equals an evaluation's query (here every two-word
    `terms` query the vocabulary can make) leaves training and the selection split alike."""
    guarded = {f"{a} {b}".casefold() for a in WORDS for b in WORDS if a != b}
    (tmp_path / "queries.txt").write_text("".join(q + "\n" for q in sorted(guarded)))
    corpus, out = write(tmp_path / "docs.txt", documents(300)), tmp_path / "run"
    args = adapt_args(corpus, out, encoder, "--corpus.eval_texts", f'["{tmp_path / "queries.txt"}"]')
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # every terms pair was an evaluation query
    assert json.loads((out / "adapt.json").read_text())["pairs"] == {"crop": 8, "lead": 8}
    for made in ("pairs", "selection"):
        queries = {q.casefold() for rows in load_records(out / made).values() for q in rows["query"]}
        assert queries and not queries & guarded
    # Pairs made under other guarded queries may carry one of the new ones: resuming on them is refused.
    (tmp_path / "queries.txt").write_text("socket buffer\n")
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "holds pairs made from another corpus or other settings" in again.output


def test_adapt_takes_a_neobert_encoder(tmp_path):
    """A bare NeoBERT checkpoint (as `neoembed pretrain` leaves it) adapts and exports as an embedder that
    sentence-transformers loads."""
    from sentence_transformers import SentenceTransformer

    from neoembed.pretrain.neobert import tiny_config

    corpus, out = write(tmp_path / "docs.txt", documents(300)), tmp_path / "run"
    result = CliRunner().invoke(app, adapt_args(corpus, out, tiny_neobert_dir(tmp_path)))
    assert result.exit_code == 0, result.output
    exported = SentenceTransformer(str(out / "model"))
    assert type(exported[0].auto_model).__name__ == "NeoBERTModel"
    assert exported.encode(["a socket buffer"]).shape == (1, tiny_config().hidden_size)


def test_bad_input_is_one_line(tmp_path, encoder):
    def refused(args: list[str]) -> str:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        line = result.output.strip().splitlines()[-1]
        assert line.startswith("neoembed adapt: ")
        return line

    out = tmp_path / "run"
    empty = write(tmp_path / "empty.txt", [])
    assert "0 usable documents of 0 rows" in refused(adapt_args(empty, out, encoder))
    short = write(tmp_path / "short.txt", [f"word {i}" for i in range(300)])
    assert "300 under 8 words" in refused(adapt_args(short, out, encoder))
    onnx = tmp_path / "onnx-only"
    (onnx / "onnx").mkdir(parents=True)
    (onnx / "onnx" / "model.onnx").write_bytes(b"")
    corpus = write(tmp_path / "docs.txt", documents(300))
    assert "holds an ONNX graph and no trainable weights" in refused(adapt_args(corpus, out, onnx))
    assert not (out / "pairs").exists()  # refused before any work


def test_a_corpus_quoting_the_held_out_sets_runs_to_the_end(tmp_path, encoder):
    """A dictionary that copies FOLDOC: documents opening with a held-out definition (whose `lead` query is that
    evaluation text), the definitions alone, and held-out terms inside longer text. The pairs carrying an
    evaluated text leave the selection split, counted; nothing stops on the built-in guard."""
    terms, definitions, _ = foldoc_retrieval()
    one_sentence = [
        d for d in definitions.values() if d.count(". ") == 0 and d.endswith(".") and len(d.split()) > 8
    ]
    quoted = one_sentence[:150]
    filler = documents(300, seed=1)
    texts = [
        *(f"{definition} {rest}" for definition, rest in zip(quoted, filler, strict=False)),
        *quoted[:30],  # the held-out documents themselves: trained on, never selected on
        *(
            f"The {term} is named here. {rest}"
            for term, rest in zip(list(terms.values())[:30], filler[150:], strict=False)
        ),
        *documents(150),
    ]
    corpus, out = write(tmp_path / "dictionary.jsonl", texts), tmp_path / "run"
    result = CliRunner().invoke(app, adapt_args(corpus, out, encoder))
    assert result.exit_code == 0, result.output
    dropped = json.loads((out / "adapt.json").read_text())["dropped"]
    assert dropped["selection"].get("lead", 0) > 0, dropped
    pairs_line = next(line for line in result.output.splitlines() if line.startswith("pairs: "))
    assert "(dropped for carrying an evaluation or selection text: " in pairs_line
    assert f"lead {dropped['selection']['lead']}" in pairs_line.split("selection ", 1)[1]
    evaluated = {text.casefold() for text in [*definitions.values(), *terms.values()]}
    held = load_records(out / "selection")
    assert (
        not {t.casefold() for rows in held.values() for t in [*rows["query"], *rows["positive"]]} & evaluated
    )


def test_a_corpus_of_the_general_selection_set_s_own_texts_keeps_every_pair_method(tmp_path, encoder):
    """A user adapting on the manual pages, the built-in general selection set: the set is left out of the
    selection (it is not general text for this run), said before training; no pair is lost to it."""
    from neoembed.data.manpages import load_pages

    corpus = write(tmp_path / "pages.txt", [page.description for page in load_pages()])
    out = tmp_path / "run"
    args = adapt_args(corpus, out, encoder)
    del args[args.index("--export.selection.general") : args.index("--export.selection.general") + 2]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    recorded = json.loads((out / "adapt.json").read_text())
    assert recorded["pairs"] == {"crop": 8, "lead": 8, "terms": 8} and not recorded["dropped"]["pairs"]
    assert recorded["general_left_out"]["manpages"] > 1000
    assert recorded["selection"]["general"] == []
    lines = result.output.splitlines()
    selection = next(line for line in lines if line.startswith("selection: "))
    assert "general text none (manpages left out, " in selection
    assert lines.index(selection) < next(i for i, line in enumerate(lines) if "steps: " in line)
    curve = json.loads((out / "train" / "summary.json").read_text())["selection"]
    assert curve and "general" not in curve[0]  # chosen on the held-out documents' pairs alone


def test_notes_in_a_jsonl_field_of_their_own_run_to_the_end(tmp_path, encoder):
    """A jsonl of notes under another field, some quoting FOLDOC and Jargon held-out terms and definitions,
    some repeated: the guard leaves out what it must and the run ends with a model."""
    from neoembed.data import jargon_retrieval

    foldoc_terms = foldoc_retrieval()[0]
    jargon_terms, jargon_definitions, _ = jargon_retrieval()
    notes = [
        *(f"Note {i}: remember that {term} came up again. {doc}" for i, (term, doc) in
          enumerate(zip(list(jargon_terms.values())[:40], documents(40, seed=2), strict=True))),
        *list(jargon_definitions.values())[:40],
        *list(foldoc_terms.values())[:20],  # a note that is just a held-out term
        *documents(200, seed=3),
        *documents(20, seed=3),  # repeated notes
    ]  # fmt: skip
    path = tmp_path / "notes.jsonl"
    path.write_text("".join(json.dumps({"id": i, "body": note}) + "\n" for i, note in enumerate(notes)))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, adapt_args(path, out, encoder, "--corpus.field", "body"))
    assert result.exit_code == 0, result.output
    recorded = json.loads((out / "adapt.json").read_text())
    assert recorded["corpus"]["duplicates"] >= 20
    assert (out / "model" / "modules.json").is_file()
    evaluated = {t.casefold() for t in [*foldoc_terms.values(), *jargon_terms.values()]}
    trained = {q.casefold() for rows in load_records(out / "pairs").values() for q in rows["query"]}
    assert not trained & evaluated


def test_no_cluster_source_is_smaller_than_two_batches():
    """A pool of small clusters holding one batch of rows but not two joins the smallest cluster: on
    package descriptions such a 67-row pool held 56 distinct texts, and training stopped at step 21 on
    "cannot fill a batch of 64 rows whose texts are all distinct"."""
    import numpy as np

    from neoembed.adapt.clusters import MIN_BATCHES, cluster_sources

    batch = 8

    def split(sizes: list[int]) -> dict[str, int]:
        clusters = np.repeat(np.arange(len(sizes)), sizes)  # document i's cluster
        sources = cluster_sources({"crop": list(range(len(clusters)))}, clusters, batch)
        assert sorted(row for _, rows in sources.values() for row in rows) == list(range(len(clusters)))
        return {name: len(rows) for name, (_, rows) in sources.items()}

    assert split([20, 18, 5, 6]) == {"crop.00": 20, "crop.01": 18 + 11}  # a pool of 11: 1 batch, not 2
    assert split([20, 18, 9, 9]) == {"crop.00": 20, "crop.01": 18, "crop.mixed": 18}
    assert split([5, 6]) == {"crop.mixed": 11}  # no cluster of its own: the method's pairs, unsplit
    assert all(rows >= MIN_BATCHES * batch for rows in split([30, 17, 3, 7, 12]).values())


def test_clustered_pairs_are_a_source_per_method_and_topic_cluster_of_the_documents(tmp_path, encoder):
    """pairs.clusters: the documents clustered once, each method's pairs split by their document's cluster,
    so a document's pairs are in the same cluster whatever the method; a method's prompts reach its splits."""
    texts = documents(300)
    corpus, out = write(tmp_path / "docs.txt", texts), tmp_path / "run"
    more = ["--steps", "24", "--pairs.clusters", "2", "--pairs.prompts", '{"lead": {"query": "lead: "}}']
    result = CliRunner().invoke(app, adapt_args(corpus, out, encoder, *more))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "adapt.json").read_text())
    assert report["pairs"] == {"crop": 64, "lead": 64, "terms": 64}
    stats = json.loads((out / "pairs" / "stats.json").read_text())["sources"]
    assert {s["method"] for s in stats.values()} == {"crop", "lead", "terms"}
    # the sources each method's batches are drawn from, counted in adapt.json and said before training
    per_method = {m: sum(s["method"] == m for s in stats.values()) for m in ("crop", "lead", "terms")}
    assert report["clusters"] == per_method
    said = ", ".join(f"{m} {n}" for m, n in per_method.items())
    assert f"batches: each from one topic cluster of the documents (k-means on the base model), {said}" in (
        result.output
    )
    assert all(name.split(".")[0] == s["method"] and s["rows_out"] >= 16 for name, s in stats.items())
    cluster_of: dict[str, str] = {}  # document -> the cluster suffix of the sources its pairs are in
    for name, rows in load_records(out / "pairs").items():
        if name.endswith(".mixed"):
            continue
        for positive in rows["positive"]:
            home = next(t for t in texts if positive in t)
            assert cluster_of.setdefault(home, name.split(".")[1]) == name.split(".")[1]
    assert len(set(cluster_of.values())) == 2
    from sentence_transformers import SentenceTransformer

    prompts = SentenceTransformer(str(out / "model")).prompts
    assert {name for name, text in prompts.items() if text == "lead: "} == {
        f"{name}_query" for name in stats if name.startswith("lead.")
    }
    again = CliRunner().invoke(app, adapt_args(corpus, out, encoder, *more))
    assert again.exit_code == 0 and "pairs: crop 64, lead 64, terms 64" in again.output


def test_hard_negatives_are_mined_among_the_method_s_positives_never_from_the_query_s_document(
    tmp_path, encoder
):
    """48 documents and 72 crop pairs: the method passes over the documents twice, so two pairs share a
    document, and neither may be the other's negative (one source: the recipe's clusters would split it)."""
    texts = documents(60)
    corpus, out = write(tmp_path / "docs.txt", texts), tmp_path / "run"
    more = ["--pairs.methods", '["crop"]', "--pairs.negatives", "2", "--steps", "9", "--pairs.clusters", "0"]
    args = adapt_args(corpus, out, encoder, *more, "--export.base_weight", "0.0")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = load_records(out / "pairs")["crop"]
    assert len(rows) == 72
    mined = json.loads((out / "adapt.json").read_text())["negatives"]["crop"]
    assert mined["mined"] == sum(map(len, rows["negatives"])) > 72  # most pairs got both
    assert mined["dropped_same_document"] > 0
    positives = set(rows["positive"])
    for query, negatives in zip(rows["query"], rows["negatives"], strict=True):
        assert set(negatives) <= positives
        home = {t for t in texts if query in t}
        assert not any(n in t for n in negatives for t in home)
    assert f"hard negatives: crop {mined['mined']}" in result.output
    assert not [p for p in out.iterdir() if p.name.startswith("tmp")]  # the miner's scratch is gone


def test_pairs_made_without_negatives_keep_the_digest_they_had_before_negatives_existed(tmp_path):
    """Runs made before `pairs.negatives` existed resume: its fields enter the pairs' digest only when set."""
    from neoembed.adapt.corpus import query_guard
    from neoembed.adapt.run import pair_config
    from neoembed.adapt.settings import AdaptSettings

    corpus = write(tmp_path / "docs.txt", documents(10))
    plain = pair_config(AdaptSettings(corpus={"path": str(corpus)}), query_guard())
    assert set(plain["pairs"]) == {"methods", "crop_ratio", "term_words"} and "miner" not in plain
    mined = pair_config(AdaptSettings(corpus={"path": str(corpus)}, pairs={"negatives": 1}), query_guard())
    assert mined["pairs"]["negatives"] == 1 and mined["miner"] == "minilm"
