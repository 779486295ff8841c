"""`neoembed bench contrastive`: the recipe's targets over a scores table, seed averages with paired intervals,
and the whole bench end to end on a tiny model (default WordNet build, every method x precision x seed on one
budget, one mteb run, report, reuse)."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from neoembed.bench.contrastive import (
    EXAMPLE_TASK,
    FOLDOC_TASK,
    LEMMA_TASK,
    POS_TASK,
    goal_checks,
)
from neoembed.evaluation.significance import Difference, ExampleScores, RowInput, compare_pair, mean_of

BASE = {EXAMPLE_TASK: 0.343, LEMMA_TASK: 0.500, FOLDOC_TASK: 0.684, POS_TASK: 0.676}
RUNS = ["fp32 seed 0", "fp32 seed 1", "bf16 seed 0"]


def scores(*runs: dict) -> dict:
    return {"base": BASE, **{name: {**BASE, **run} for name, run in zip(RUNS, runs)}}


def ahead(low: float) -> Difference:
    return Difference("neoembed", "st", "Average", low + 0.01, low, low + 0.02, 0.01, "examples", 300)


def checks(table: dict, versus=None):
    return goal_checks(table, "base", [name for name in RUNS if name in table], versus or ahead(0.001))


def test_a_recipe_that_meets_every_target():
    table = scores(*[{EXAMPLE_TASK: 0.375, FOLDOC_TASK: 0.693}] * 3)
    found = checks(table)
    assert [c.met for c in found] == [True] * 4
    # the figures a reader needs: how many runs, the mean change, the interval
    assert found[0].figures == "3/3 runs"
    assert found[1].figures == "mean +1.32% over 3 runs"
    assert found[3].figures == "+1.10 points [+0.10, +2.10]" and found[3].line().endswith(": met")


def test_issue_36s_measurements_fail_the_targets_they_fail():
    # As shipped: WordNet example +23.6%, FOLDOC 0.5386 -> 0.5244 in each run; ST ahead by an interval over 0.
    base = {**BASE, FOLDOC_TASK: 0.5386}
    table = {"base": base, **{name: {**base, EXAMPLE_TASK: 0.424, FOLDOC_TASK: 0.5244} for name in RUNS}}
    found = checks(table, ahead(-0.02))
    assert [c.met for c in found] == [False, False, True, False]
    assert "0/3 runs; below: fp32 seed 0, fp32 seed 1, bf16 seed 0" in found[0].line()
    assert found[1].figures == "mean -2.64% over 3 runs"


def test_one_run_below_the_base_fails_every_run_even_when_the_mean_gains():
    table = scores({FOLDOC_TASK: 0.70}, {FOLDOC_TASK: 0.70}, {FOLDOC_TASK: 0.683})
    found = checks(table)
    assert not found[0].met and found[0].figures == "2/3 runs; below: bf16 seed 0"
    assert found[1].met  # +1.6% on the mean


def test_margins_are_at_their_bounds():
    at = {FOLDOC_TASK: BASE[FOLDOC_TASK] * 1.01, EXAMPLE_TASK: BASE[EXAMPLE_TASK] * 1.08}
    below = {FOLDOC_TASK: BASE[FOLDOC_TASK] * 1.0099, EXAMPLE_TASK: BASE[EXAMPLE_TASK] * 1.0799}
    assert [c.met for c in checks(scores(at, at, at))][1:3] == [True, True]
    assert [c.met for c in checks(scores(below, below, below))][1:3] == [False, False]
    # an interval touching 0 is not above it
    assert not checks(scores(at, at, at), ahead(0.0))[3].met


def test_a_missing_score_or_interval_fails_its_check_and_says_so():
    table = scores({}, {}, {})
    del table["fp32 seed 1"][FOLDOC_TASK]
    found = goal_checks(table, "base", RUNS, None)
    assert [c.met for c in found] == [False, False, False, False]
    assert "missing" in found[1].figures and "predictions missing" in found[3].figures


def per_query(values) -> RowInput:
    values = np.asarray(values, dtype=float)
    return RowInput(
        float(values.mean()), [[ExampleScores(len(values), lambda idx: values[idx].mean(axis=-1))]]
    )


def test_seed_averages_compare_query_by_query():
    """mean_of: the mean score of the runs, and on each resample the mean of their resampled scores; so two
    recipes whose seeds differ query by query are compared on their seed-averaged per-query scores."""
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.8, 200)
    ours = [per_query(np.clip(base + 0.05 + rng.normal(0, 0.02, 200), 0, 1)) for _ in range(3)]
    theirs = [per_query(np.clip(base + rng.normal(0, 0.02, 200), 0, 1)) for _ in range(3)]
    mean = mean_of(ours)
    assert mean.score == pytest.approx(np.mean([o.score for o in ours]))
    everything = np.arange(200)[None, :]
    assert mean.parts[0][0].score(everything)[0] == pytest.approx(mean.score)
    *_, average = compare_pair("ours", "theirs", {"task": (mean, mean_of(theirs))})
    assert average.difference == pytest.approx(0.05, abs=0.01) and average.low > 0.03
    # a run without per-query scores leaves the average without them (no interval), not wrong
    assert mean_of([*ours, RowInput(0.5, None)]).parts is None


def test_a_step_and_a_minute_budget_together_are_refused():
    from neoembed.bench.settings import ContrastiveBench

    with pytest.raises(ValueError, match="--steps or --minutes"):
        ContrastiveBench(steps=10, minutes=1.0)


@pytest.mark.slow
def test_the_bench_trains_every_arm_on_one_budget_and_reports_every_target(tmp_path, minilm_path):
    """Tiny random BERT, 1000 WordNet rows, 3 steps per run, 2 seeds in fp32."""
    from test_contrastive import tiny_encoder_dir

    from neoembed.cli import app

    base = tiny_encoder_dir(tmp_path, minilm_path)
    out = tmp_path / "bench"
    args = ["bench", "contrastive", "--model", str(base), "--rows", "1000", "--steps", "3", "--seeds", "2",
            "--precisions", "fp32", "--threads", "1", "--out", str(out), "--set", "eval.sets=[]",
            "--set", "train.save_steps=1000", "--set", "train.batch_size=16"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "contrastive.json").read_text())

    # the default build: every WordNet pair kind and the manual pages, mined negatives
    stats = json.loads((out / "data" / "stats.json").read_text())
    assert stats["sources"]["wordnet"]["rows_out"] > 0 and stats["total"]["negatives_per_row"] > 0
    assert stats["sources"]["manpages"]["rows_out"] > 0  # the recipe's second source
    # every method x seed trained the same number of steps, each exported as a sentence-transformers directory
    runs = report["runs"]
    assert sorted(runs) == ["neoembed-fp32-seed0", "neoembed-fp32-seed1", "st-fp32-seed0", "st-fp32-seed1"]
    for name, run in runs.items():
        assert run["steps"] == 3
        assert (out / name / f"{name}-model" / "modules.json").is_file()
    recorded = json.loads((out / "neoembed-fp32-seed1" / "recipe.json").read_text())
    assert recorded["train"]["seed"] == 1 and recorded["train"]["precision"] == "fp32"
    # the baseline is plain sentence-transformers: MNRL on (query, positive), lr 5e-5, batch 64, the seed
    card = (out / "st-fp32-seed1" / "st-fp32-seed1-model" / "README.md").read_text()
    assert "Columns: <code>query</code> and <code>positive</code>\n" in card
    for setting in ("loss:MultipleNegativesRankingLoss", "`learning_rate`: 5e-05", "`per_device_train_batch_size`: 64",
                    "`seed`: 1"):  # fmt: skip
        assert setting in card
    # trained at the recipe's length, the baseline still declares the base model's own input limit
    from neoembed.embedder import load_embedder

    declared = load_embedder(str(base)).max_seq_length
    assert declared != 64  # contrastive-cpu's model.max_length
    assert load_embedder(str(out / "st-fp32-seed1" / "st-fp32-seed1-model")).max_seq_length == declared
    # one mteb run scored every model on every task (BM25 retrieval only)
    labels = [row["model"] for row in report["rows"]]
    assert labels[:2] == ["BM25", "tiny-bert (base)"] and len(labels) == 6
    assert "tiny-bert neoembed fp32 seed 1" in labels and "tiny-bert ST MNRL fp32 seed 0" in labels
    for label in labels[1:]:
        assert all(report["scores"][label][task] is not None for task in BASE)
    # seed means with their spread, paired differences with intervals, the targets
    means = [row for row in report["summary"] if row["model"] == "neoembed x 2"]
    assert len(means) == 1 and "[" in means[0]["FOLDOC term->definition nDCG@10"]
    versus = next(row for row in report["differences"] if row["comparison"] == "neoembed - ST MNRL")
    assert versus["mean"].count("[") == 1
    assert len(report["checks"]) == 4
    assert "Recipe targets" in result.output and "in every run" in result.output

    # a second invocation reuses the finished trainings and the cached scores
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    rerun = json.loads((out / "contrastive.json").read_text())
    assert all(run["reused"] for run in rerun["runs"].values())
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
            "train.seed=3",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2
    assert "train.seed" in result.output and "--set" in result.output


def test_an_arm_linked_in_from_another_bench_is_reused_or_replaced_never_trained_over(tmp_path):
    from neoembed.bench.comparison import recipe_identity, reuse_or_train
    from neoembed.bench.st_baseline import Trained
    from neoembed.contrastive import ContrastiveSettings

    def recipe(out: Path, lr: float = 1e-4) -> dict:
        plan = {"data": {"path": "d"}, "train": {"output_dir": str(out)}, "export": {"path": str(out / "m")},
                "optim": {"lr": lr}}  # fmt: skip
        return ContrastiveSettings.model_validate(plan).model_dump(mode="json")

    other, here = tmp_path / "other" / "arm", tmp_path / "here" / "arm"
    # A marker as written before arms were identified without their location.
    written = {"recipe": recipe(other), "data": "x"}
    reuse_or_train(other, written, False, lambda: (other.mkdir(parents=True), Trained(3, 0.5, "m"))[1])
    here.parent.mkdir()
    here.symlink_to(other)
    # Where an arm is written is not what it trains: the same recipe elsewhere reuses it.
    same = {"recipe": recipe_identity(recipe(here)), "data": "x"}
    assert reuse_or_train(here, same, False, lambda: pytest.fail("retrained")) == Trained(
        3, 0.5, "m", reused=True
    )
    # Another recipe trains a run of its own in place of the link, and the linked run stays as it was.
    changed = {"recipe": recipe_identity(recipe(here, lr=2e-4)), "data": "x"}
    result = reuse_or_train(here, changed, False, lambda: (here.mkdir(), Trained(4, 0.5, "m"))[1])
    assert result == Trained(4, 0.5, "m") and not here.is_symlink()
    assert json.loads((other / "bench-run.json").read_text())["result"]["steps"] == 3


def test_the_benches_default_to_the_precisions_training_runs_in(cpu_bf16):
    """Quality is reported in each precision the machine trains in, speed and adaptation in `auto`'s."""
    from neoembed.bench.contrastive_speed import speed_precisions
    from neoembed.bench.settings import AdaptBench, ContrastiveBench

    auto = "bf16" if cpu_bf16 else "fp32"
    assert ContrastiveBench().run_precisions() == (("fp32", "bf16") if cpu_bf16 else ("fp32",))
    assert speed_precisions(ContrastiveBench()) == AdaptBench().run_precisions() == (auto,)
    assert AdaptBench(precisions=("fp32",)).run_precisions() == ("fp32",)


def test_your_data_is_held_to_five_percent_over_the_base_and_level_with_mnrl():
    from neoembed.bench.contrastive import your_checks

    def interval(low: float, high: float) -> Difference:
        return Difference("a", "b", "mine", (low + high) / 2, low, high, 0.01, "examples", 60)

    table = {"base": {"mine": 0.50}, "seed 0": {"mine": 0.53}, "seed 1": {"mine": 0.54}}
    met = your_checks(
        table, "base", ["seed 0", "seed 1"], "mine", interval(0.01, 0.05), interval(-0.01, 0.02)
    )
    assert [c.met for c in met] == [True, True]
    assert met[0].figures == "+7.00%, +3.00 points [+1.00, +5.00]"
    short = your_checks(table, "base", ["seed 0"], "mine", interval(0.01, 0.05), interval(-0.03, -0.01))
    assert [c.met for c in short] == [True, False]  # +6%, but MNRL ahead with its interval above 0
    small = {"base": {"mine": 0.50}, "seed 0": {"mine": 0.52}}
    assert not your_checks(small, "base", ["seed 0"], "mine", interval(0.01, 0.03), None)[0].met  # +4%
    assert "missing" in your_checks(small, "base", ["seed 0"], "mine", None, None)[0].figures
