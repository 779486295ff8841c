"""Your own test set in: a BEIR folder or a pairs file scored by `mteb-eval -t PATH`, as a held-out set of
`neoembed contrastive`, and refused with one line where it is malformed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.data import read_test_set
from neoembed.data.normalize import text_key
from neoembed.data.pairs_file import is_held_out

runner = CliRunner()

DOCS = {
    "d1": "The cat sat on the warm mat by the fire.",
    "d2": "Dogs are loyal companions and guard the house.",
    "d3": "Python is a programming language with dynamic types.",
    "d4": "The stock market fell sharply today after the report.",
    "d5": "Cats like to sleep in the afternoon sun.",
    "d6": "A compiler translates source code into machine code.",
    "d7": "Interest rates rose and bond prices dropped.",
}
QUERIES = {"q1": "where do cats sleep", "q2": "software that turns code into programs", "q3": "finance news"}
QRELS = [("q1", "d5", 2), ("q1", "d1", 1), ("q2", "d6", 2), ("q2", "d3", 1), ("q3", "d4", 1), ("q3", "d7", 1)]


def write_beir(folder, docs=DOCS, queries=QUERIES, qrels=QRELS):
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w") as f:
        f.writelines(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in docs.items())
    with (folder / "queries.jsonl").open("w") as f:
        f.writelines(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items())
    with (folder / "qrels" / "test.tsv").open("w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    return folder


def ndcg_at_10(ranked: list[str], grades: dict[str, int]) -> float:
    """trec_eval's nDCG@10 (the measure mteb reports): linear gains, log2(rank + 1) discounts."""
    dcg = sum(grades.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:10]))
    ideal = sorted(grades.values(), reverse=True)
    return dcg / sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal[:10]))


def test_mteb_eval_scores_a_beir_folder_as_nDCG_at_10_computed_by_hand(tmp_path, minilm_path):
    from sentence_transformers import SentenceTransformer

    folder = write_beir(tmp_path / "toy-set")
    out = tmp_path / "mteb"
    result = runner.invoke(
        app, ["mteb-eval", "-m", "minilm", "-m", "bm25", "-t", str(folder), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("| toy-set | Retrieval |"))
    (path,) = out.glob("results/*all-MiniLM*/**/toy-set.json")
    reported = json.loads(path.read_text())["scores"]["test"][0]["ndcg_at_10"]

    model = SentenceTransformer(str(minilm_path), device="cpu")
    ids = list(DOCS)
    docs = model.encode([DOCS[i] for i in ids], normalize_embeddings=True)
    by_hand = []
    for query, text in QUERIES.items():
        scores = docs @ model.encode(text, normalize_embeddings=True)
        ranked = [ids[i] for i in np.argsort(-scores)]
        by_hand.append(ndcg_at_10(ranked, {d: s for q, d, s in QRELS if q == query}))
    assert reported == pytest.approx(np.mean(by_hand), abs=1e-4)
    assert f"{100 * reported:.2f}" in row  # the table shows it beside bm25
    assert "Paired differences" in result.output

    # Changed data is scored again, not read from the cache of the old.
    write_beir(folder, qrels=[(q, d, s) for q, d, s in QRELS if d != "d5"])
    again = runner.invoke(app, ["mteb-eval", "-m", "minilm", "-t", str(folder), "-o", str(out)])
    assert again.exit_code == 0 and "1 done, 0 cached" in again.output


def test_a_pairs_file_is_a_task_of_its_held_out_anchors_among_all_its_positives(tmp_path):
    rows = [
        {"anchor": f"term number {i}", "positive": f"the meaning of term {i} in the trade"} for i in range(60)
    ]
    path = tmp_path / "glossary.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = read_test_set(path)
    held = [r for r in rows if is_held_out(text_key(r["anchor"]))]
    assert found.name == "glossary"
    assert sorted(found.queries.values()) == sorted(r["anchor"] for r in held)
    assert len(found.corpus) == 60  # every positive: the trained rows' are the distractors
    for query_id, docs in found.relevant.items():
        (doc,) = docs
        anchor = found.queries[query_id]
        assert found.corpus[doc] == next(r["positive"] for r in rows if r["anchor"] == anchor)


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (lambda f: (f / "qrels" / "test.tsv").unlink(), "no qrels/test.tsv; a BEIR test folder holds"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td9\t1\n"),
         "qrels/test.tsv:2: 'd9' is not an _id of corpus.jsonl"),
        (lambda f: (f / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n{"_id": "q2" "text": "b"}\n'),
         "queries.jsonl:2: not a JSON object"),
        (lambda f: (f / "corpus.jsonl").write_text('{"_id": "d1"}\n'), "corpus.jsonl:1: no 'text'"),
    ],
)  # fmt: skip
def test_a_malformed_beir_folder_is_one_line_naming_the_file(tmp_path, broken, says):
    folder = write_beir(tmp_path / "set")
    broken(folder)
    result = runner.invoke(app, ["mteb-eval", "-m", "bm25", "-t", str(folder), "-o", str(tmp_path / "m")])
    assert result.exit_code == 2, result.output
    assert says in result.output and "Traceback" not in result.output
    assert not (tmp_path / "m").exists()


def test_contrastive_scores_your_test_folder_as_a_held_out_set():
    from neoembed.contrastive import EvalSettings, HeldOutSet

    settings = EvalSettings.model_validate({"sets": ["path/to/my-tests", "foldoc"]})
    assert settings.sets[0] == HeldOutSet(kind="files", path="path/to/my-tests")
    assert [s.label for s in settings.sets] == ["my-tests", "foldoc"]
    with pytest.raises(ValueError, match="give its path"):
        HeldOutSet(kind="files", path="x", queries=10)
