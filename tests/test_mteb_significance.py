"""Paired significance: a model against itself differs by nothing; a noise-degraded copy of it is
significantly worse on local WordNet tasks; the per-example scores rebuilt from mteb's saved predictions
reproduce mteb's own main scores; results load with mteb's ResultCache."""

import os
import tempfile

os.environ["MTEB_CACHE"] = tempfile.mkdtemp(prefix="mteb-cache-")  # before anything imports mteb

import numpy as np  # noqa: E402
import pytest  # noqa: E402

TASKS = ["WordNetSynonymPairClassification", "WordNetDefinitionRetrieval", "WordNetPOSClassification"]


@pytest.fixture(scope="module")
def noisy_minilm(tmp_path_factory):
    """A copy of the packaged MiniLM whose token embeddings carry Gaussian noise as large as the weights."""
    import torch

    from neoembed.embedder import load_embedder

    model = load_embedder("minilm")
    weights = model[0].auto_model.embeddings.word_embeddings.weight
    with torch.no_grad():
        weights += torch.randn(weights.shape, generator=torch.Generator().manual_seed(0)) * weights.std()
    path = tmp_path_factory.mktemp("noisy") / "minilm-noisy"
    model.save(str(path))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, noisy_minilm):
    from neoembed.evaluation.models import EvalSettings
    from neoembed.evaluation.runner import resolve_models, run_evaluation
    from neoembed.evaluation.tasks import select_tasks

    out = tmp_path_factory.mktemp("significance")
    settings = EvalSettings(batch_size=64)
    specs = resolve_models(["minilm", "minilm", str(noisy_minilm)], settings)
    return out, specs, run_evaluation(specs, select_tasks(TASKS), settings, out)


def _by_row(report, model):
    return {d.row: d for d in report.summary.differences if d.model == model}


def test_a_model_against_itself_is_not_significantly_different(run):
    _, _, report = run
    same = _by_row(report, "all-MiniLM-L6-v2#2")
    assert set(same) == {*TASKS, "Average"}
    for d in same.values():
        assert d.difference == 0.0 and (d.low, d.high) == (0.0, 0.0)
        assert d.p_value == 1.0 and not d.significant
        assert d.method == "examples" and d.n > 0


def test_a_noise_degraded_copy_is_significantly_worse(run):
    _, _, report = run
    noisy = _by_row(report, "minilm-noisy")
    for name in ("WordNetDefinitionRetrieval", "WordNetSynonymPairClassification", "Average"):
        d = noisy[name]
        assert d.difference < 0 and d.high < 0, d
        assert d.significant and d.p_value < 0.01, d
        assert d.low <= d.difference <= d.high


def test_rebuilt_per_example_scores_reproduce_mteb_main_scores(run):
    """The observed difference is computed from the saved predictions, not from the result files: both
    agree (to the 5 decimals mteb stores) only if the per-example scores reproduce mteb's metric."""
    _, _, report = run
    scores = report.summary.scores
    for d in _by_row(report, "minilm-noisy").values():
        if d.row != "Average":
            expected = scores["minilm-noisy"][d.row] - scores["all-MiniLM-L6-v2"][d.row]
            assert d.difference == pytest.approx(expected, abs=2e-5), d.row


def test_summary_table_csv_and_chart_show_the_intervals(run):
    import csv

    out, _, _ = run
    markdown = (out / "summary.md").read_text()
    assert "Paired differences against all-MiniLM-L6-v2:" in markdown
    assert "| Task | all-MiniLM-L6-v2#2 - all-MiniLM-L6-v2 | minilm-noisy - all-MiniLM-L6-v2 |" in markdown
    assert "| WordNetSynonymPairClassification | +0.00 [+0.00, +0.00] p=1.000 |" in markdown
    rows = list(csv.DictReader((out / "differences.csv").open()))
    assert {(r["model"], r["name"]) for r in rows} >= {("minilm-noisy", "Average")}
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_load_with_mtebs_result_cache(run):
    from mteb import ResultCache

    out, specs, _ = run
    results = ResultCache(out).load_results(models=[s.meta for s in specs], load_experiments="match_kwargs")
    loaded = {(m.model_name, r.task_name) for m in results.model_results for r in m.task_results}
    assert loaded == {(s.meta.name, task) for s in specs for task in TASKS}
    # Saved predictions sit outside results/, so mteb never reads them as results.
    assert not list((out / "results").rglob("*_predictions.json"))
    assert list((out / "predictions").rglob("WordNetDefinitionRetrieval_predictions.json"))


def _units(values):
    from neoembed.evaluation.significance import ExampleScores

    values = np.asarray(values, dtype=float)
    return [[ExampleScores(len(values), lambda idx: values[idx].mean(axis=1))]]


def test_task_level_bootstrap_when_a_task_has_no_predictions():
    from neoembed.evaluation.significance import RowInput, compare_pair

    rng = np.random.default_rng(1)
    base = rng.random(300)
    rows = {
        "with predictions": (
            RowInput(base.mean() + 0.1, _units(base + 0.1)),
            RowInput(base.mean(), _units(base)),
        ),
        "scores only": (RowInput(0.6, None), RowInput(0.5, None)),
    }
    diffs = {d.row: d for d in compare_pair("b", "a", rows, n_resamples=200)}
    assert diffs["with predictions"].method == "examples" and diffs["with predictions"].significant
    assert diffs["with predictions"].difference == pytest.approx(0.1)
    assert diffs["scores only"].method == "scores" and diffs["scores only"].p_value is None
    average = diffs["Average"]
    assert (average.method, average.n) == ("tasks", 2)
    assert average.difference == pytest.approx(0.1)


def test_chosen_pairs_compare_each_model_with_its_own_baseline_and_best(run, tmp_path):
    """`--compare MODEL:BASELINE`: e.g. a fine-tuned model against its own base, bm25 against the best."""
    from mteb import ResultCache

    from neoembed.errors import InputError
    from neoembed.evaluation.runner import check_pairs, compare_cached, summarize_cached
    from neoembed.evaluation.summary import plot_summary, to_markdown
    from neoembed.evaluation.tasks import select_tasks

    out, specs, _ = run
    summary = summarize_cached(specs, select_tasks(TASKS), ResultCache(out))
    pairs = ["minilm-noisy:all-MiniLM-L6-v2#2", "all-MiniLM-L6-v2:best"]
    summary.differences = compare_cached(specs, summary, ResultCache(out), pairs, n_resamples=200)
    # The noisy copy scores below both identical models, so the best other model is the identical copy.
    assert summary.compared_pairs() == [
        ("minilm-noisy", "all-MiniLM-L6-v2#2"),
        ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2#2"),
    ]
    assert summary.difference(("minilm-noisy", "all-MiniLM-L6-v2#2"), "Average").difference < 0
    assert summary.difference(("all-MiniLM-L6-v2", "all-MiniLM-L6-v2#2"), "Average").difference == 0
    markdown = to_markdown(summary)
    assert "Paired differences against all-MiniLM-L6-v2#2:" in markdown
    assert "| Task | minilm-noisy - all-MiniLM-L6-v2#2 | all-MiniLM-L6-v2 - all-MiniLM-L6-v2#2 |" in markdown
    plot_summary(summary, tmp_path / "pairs.png")
    assert (tmp_path / "pairs.png").stat().st_size > 10_000
    # A label that is no evaluated model is refused before any work, naming the models.
    with pytest.raises(InputError, match="'bm25' is not another evaluated model.*minilm-noisy"):
        check_pairs(["bm25:best"], [s.label for s in specs])
    with pytest.raises(InputError, match="--compare minilm-noisy:minilm-noisy"):
        check_pairs(["minilm-noisy:minilm-noisy"], [s.label for s in specs])


def test_a_pair_classification_ap_is_resampled_as_mteb_scores_it_ties_included():
    """The AP main score of a resample, computed without mteb's threshold searches, equals mteb's own
    `_compute_metrics` on that resample; scores rounded so resamples hold ties, as duplicates do anyway."""
    from neoembed.evaluation.significance import _pair_classification_scores
    from neoembed.evaluation.tasks import select_tasks

    (task,) = select_tasks(tasks=["WordNetSynonymPairClassification"])
    task.load_data()
    n = len(task.dataset["test"])
    rng = np.random.default_rng(0)
    predictions = {
        column: np.round(rng.normal(size=n), 1).tolist()
        for column in ("similarity_scores", "cosine_scores", "manhattan_distances", "euclidean_distances")
    }
    predictions["dot_scores"] = predictions["cosine_scores"]
    unit = _pair_classification_scores(task, predictions, "default", "test")
    resamples = rng.integers(0, n, size=(20, n))
    labels = np.asarray(task.dataset["test"][task.label_column_name])
    columns = {k: np.asarray(v) for k, v in predictions.items()}
    expected = [
        task._compute_metrics({k: v[i] for k, v in columns.items()}, labels[i])["max_ap"] for i in resamples
    ]
    np.testing.assert_allclose(unit.score(resamples), expected, rtol=0, atol=1e-12)
