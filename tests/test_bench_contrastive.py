"""`neoembed bench contrastive`: the recipe's goal checks over a scores table, and the whole bench end to end
on a tiny model (default WordNet build, both trainers on one budget, one mteb run, report, reuse)."""

import json

import pytest
from typer.testing import CliRunner

from neoembed.bench.contrastive import (
    EXAMPLE_TASK,
    FOLDOC_TASK,
    LEMMA_TASK,
    POS_TASK,
    goal_checks,
)

BASE = {EXAMPLE_TASK: 0.343, LEMMA_TASK: 0.500, FOLDOC_TASK: 0.684, POS_TASK: 0.676}


def scores(ours: dict, theirs: dict) -> dict:
    return {"base": BASE, "ours": {**BASE, **ours}, "st": {**BASE, **theirs}}


def met(table: dict) -> list[bool]:
    return [check.met for check in goal_checks(table, "base", "ours", "st")]


def test_a_recipe_that_meets_every_target():
    table = scores(
        {EXAMPLE_TASK: 0.370, FOLDOC_TASK: 0.720, POS_TASK: 0.660},
        {EXAMPLE_TASK: 0.368, FOLDOC_TASK: 0.702},
    )
    checks = goal_checks(table, "base", "ours", "st")
    assert [c.met for c in checks] == [True] * 5
    # the figures a reader needs: both scores and the change
    assert "0.7200 vs ST 0.7020 (+2.56%)" in checks[2].line()
    assert checks[4].figures == "66.0 vs base 67.6 (-1.6 points)"
    assert checks[0].line().endswith(": met")


def test_issue_17s_measurements_fail_the_targets_they_fail():
    # The shipped recipe at batch 64: example->definition unchanged, FOLDOC -4%; ST MNRL reached 0.702.
    table = scores({EXAMPLE_TASK: 0.343, FOLDOC_TASK: 0.657, POS_TASK: 0.592}, {FOLDOC_TASK: 0.702})
    assert met(table) == [False, False, False, True, False]
    assert (
        goal_checks(table, "base", "ours", "st")[1].line().endswith("0.6570 vs base 0.6840 (-3.95%): NOT met")
    )


def test_margins_are_at_their_bounds():
    # +2% relative over the baseline on FOLDOC is enough, +1.9% is not; a 2-point POS drop is within bounds.
    assert met(scores({FOLDOC_TASK: 0.714, POS_TASK: 0.656}, {FOLDOC_TASK: 0.700}))[2:5:2] == [True, True]
    assert met(scores({FOLDOC_TASK: 0.7133, POS_TASK: 0.655}, {FOLDOC_TASK: 0.700}))[2:5:2] == [False, False]
    # losing to the baseline on WordNet examples by any amount fails; a POS gain is no collapse
    assert met(scores({EXAMPLE_TASK: 0.3679, POS_TASK: 0.80}, {EXAMPLE_TASK: 0.368}))[3:] == [False, True]


def test_a_missing_score_fails_its_check_and_says_so():
    table = scores({}, {})
    del table["ours"][FOLDOC_TASK]
    checks = goal_checks(table, "base", "ours", "st")
    assert [c.met for c in checks][1:3] == [False, False]
    assert "missing" in checks[1].figures


@pytest.mark.slow
def test_the_bench_trains_both_models_on_one_budget_and_reports_every_target(tmp_path, minilm_path):
    """Tiny random BERT, 1000 WordNet rows, a few seconds of training per model."""
    from test_contrastive import tiny_encoder_dir

    from neoembed.cli import app

    base = tiny_encoder_dir(tmp_path, minilm_path)
    out = tmp_path / "bench"
    args = ["bench", "contrastive", "--model", str(base), "--rows", "1000", "--minutes", "0.05",
            "--threads", "1", "--out", str(out), "--set", "eval.sets=[]", "--set", "train.save_steps=1000", "--set", "train.batch_size=16"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "contrastive.json").read_text())

    # the default build: every WordNet pair kind, mined negatives
    stats = json.loads((out / "data" / "stats.json").read_text())
    assert stats["sources"]["wordnet"]["rows_out"] > 0 and stats["total"]["negatives_per_row"] > 0
    # both trained on the same budget, each exported as a sentence-transformers directory
    runs = report["runs"]
    for name in ("neoembed", "st-baseline"):
        assert runs[name]["steps"] >= 1
        assert (out / name / f"{name}-model" / "modules.json").is_file()
    # the baseline is plain sentence-transformers as the issue ran it: MNRL on (query, positive), lr 5e-5, batch 64
    card = (out / "st-baseline" / "st-baseline-model" / "README.md").read_text()
    assert "Columns: <code>query</code> and <code>positive</code>\n" in card
    for setting in (
        "loss:MultipleNegativesRankingLoss",
        "`learning_rate`: 5e-05",
        "`per_device_train_batch_size`: 64",
    ):
        assert setting in card
    # one mteb run scored all four models on all four tasks (BM25 retrieval only)
    labels = [row["model"] for row in report["rows"]]
    assert labels == ["BM25", "tiny-bert (base)", "tiny-bert neoembed (contrastive-cpu)", "tiny-bert ST MNRL"]
    for label in labels[1:]:
        assert all(report["scores"][label][task] is not None for task in BASE)
    assert report["scores"]["BM25"][FOLDOC_TASK] > 0
    tuned = report["rows"][2]
    assert "%)" in tuned["FOLDOC term->definition nDCG@10"]  # relative change vs base
    assert len(report["checks"]) == 5
    assert "Recipe goals" in result.output and "ST baseline on FOLDOC" in result.output
    assert "Recipe goals" in (out / "contrastive.md").read_text()

    # a second invocation reuses the finished trainings and the cached scores
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    rerun = json.loads((out / "contrastive.json").read_text())
    assert rerun["runs"]["neoembed"]["reused"] and rerun["runs"]["st-baseline"]["reused"]
    assert rerun["scores"] == report["scores"]


def test_overriding_a_shared_field_is_refused(tmp_path):
    from neoembed.cli import app

    data = tmp_path / "data"
    data.mkdir()
    (data / "stats.json").write_text("{}")
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "contrastive",
            "--data",
            str(data),
            "--set",
            "train.max_minutes=30",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2
    assert "train.max_minutes" in result.output and "--set" in result.output
