"""The uniform MTEB harness end to end: local WordNet tasks through mteb.evaluate for the packaged MiniLM and
bm25, a failing task that does not stop the others, resume from the result cache, and the CLI."""

import json
import shutil

import pytest
from typer.testing import CliRunner

LOCAL = ["WordNetDefinitionRetrieval", "WordNetSynonymPairClassification", "WordNetPOSClassification"]


@pytest.fixture(scope="module")
def broken_datasets(tmp_path_factory):
    """A local copy of STS12's dataset with the wrong columns: the real STS12 task fails on it."""
    root = tmp_path_factory.mktemp("datasets")
    (root / "mteb" / "sts12-sts").mkdir(parents=True)
    (root / "mteb" / "sts12-sts" / "test.jsonl").write_text('{"left": "a", "right": "b", "label": 1.0}\n')
    return root


@pytest.fixture(scope="module")
def run(tmp_path_factory, broken_datasets):
    from neoembed.evaluation.models import EvalSettings
    from neoembed.evaluation.runner import resolve_models, run_evaluation
    from neoembed.evaluation.tasks import select_tasks, use_local_datasets

    out = tmp_path_factory.mktemp("mteb-run")
    settings = EvalSettings(batch_size=64)
    tasks = select_tasks([*LOCAL, "STS12"])
    assert use_local_datasets(tasks, broken_datasets) == ["STS12"]
    specs = resolve_models(["minilm", "bm25"], settings)
    return out, settings, specs, run_evaluation(specs, tasks, settings, out)


def _statuses(report):
    return {(o.model, o.task): o.status for o in report.outcomes}


def test_local_tasks_score_in_range_for_minilm_and_bm25(run):
    _, _, _, report = run
    scores = report.summary.scores
    minilm, bm25 = scores["all-MiniLM-L6-v2"], scores["bm25"]
    assert all(0.0 < minilm[name] <= 1.0 for name in LOCAL)
    # Well above chance: balanced pairs (AP 0.5), four balanced classes (accuracy 0.25).
    assert minilm["WordNetSynonymPairClassification"] > 0.7
    assert minilm["WordNetPOSClassification"] > 0.4
    assert minilm["WordNetDefinitionRetrieval"] > 0.2
    assert 0.0 < bm25["WordNetDefinitionRetrieval"] <= 1.0
    # bm25 is retrieval-only: the other tasks are not applicable, not failures.
    statuses = _statuses(report)
    assert statuses[("bm25", "WordNetPOSClassification")] == "n/a"
    assert statuses[("bm25", "STS12")] == "n/a"


def test_a_failing_task_is_reported_and_the_others_still_run(run):
    out, _, _, report = run
    statuses = _statuses(report)
    assert statuses[("all-MiniLM-L6-v2", "STS12")] == "failed"
    assert [o.task for o in report.failed] == ["STS12"]
    assert report.failed[0].error
    assert all(statuses[("all-MiniLM-L6-v2", name)] == "done" for name in LOCAL)
    logged = [json.loads(line) for line in (out / "mteb_eval.jsonl").read_text().splitlines()]
    assert {(r["model"], r["task"], r["status"]) for r in logged} >= {("all-MiniLM-L6-v2", "STS12", "failed")}


def test_results_and_settings_are_recorded(run):
    out, settings, _, _ = run
    record = json.loads((out / "settings.json").read_text())
    assert record["settings"] == settings.model_dump()
    assert {m["label"] for m in record["models"]} == {"all-MiniLM-L6-v2", "bm25"}
    assert (out / "summary.md").is_file() and (out / "summary.png").is_file()


def test_rerun_skips_finished_tasks_without_loading_models(run, monkeypatch):
    from neoembed.evaluation import runner
    from neoembed.evaluation.tasks import select_tasks

    out, settings, specs, first = run

    def no_loading(*args, **kwargs):
        raise AssertionError("a finished task loaded its model again")

    monkeypatch.setattr(runner, "load_model", no_loading)
    again = runner.run_evaluation(specs, select_tasks(LOCAL), settings, out)
    assert {o.status for o in again.outcomes} == {"cached", "n/a"}
    for name in LOCAL:
        assert (
            again.summary.scores["all-MiniLM-L6-v2"][name] == first.summary.scores["all-MiniLM-L6-v2"][name]
        )


def test_resume_runs_only_the_missing_task(run, monkeypatch):
    from neoembed.evaluation import runner
    from neoembed.evaluation.tasks import select_tasks

    out, settings, specs, first = run
    bm25 = next(s for s in specs if s.is_lexical)
    lost = runner.ResultCache(out).get_task_result_path("WordNetDefinitionRetrieval", bm25.meta)
    lost.unlink()  # as if the run had crashed before finishing this task
    real_load = runner.load_model

    def only_bm25(spec, *args, **kwargs):
        assert spec.is_lexical, f"{spec.label} has no missing task and must not load"
        return real_load(spec, *args, **kwargs)

    monkeypatch.setattr(runner, "load_model", only_bm25)
    again = runner.run_evaluation(specs, select_tasks(LOCAL), settings, out)
    statuses = _statuses(again)
    assert statuses[("bm25", "WordNetDefinitionRetrieval")] == "done"
    assert statuses[("all-MiniLM-L6-v2", "WordNetDefinitionRetrieval")] == "cached"
    assert again.summary.scores["bm25"]["WordNetDefinitionRetrieval"] == pytest.approx(
        first.summary.scores["bm25"]["WordNetDefinitionRetrieval"]
    )


def test_cli_prints_the_comparison_table_from_the_cache(run):
    from neoembed.cli import app

    out, _, _, _ = run
    args = ["mteb-eval", "-m", "minilm", "-m", "bm25", "--tasks", ",".join(LOCAL), "-o", str(out)]
    result = CliRunner().invoke(app, [*args, "--batch-size", "64"])
    assert result.exit_code == 0, result.output
    assert "| Task | Type | all-MiniLM-L6-v2 | bm25 |" in result.output
    assert "| WordNetSynonymPairClassification | PairClassification |" in result.output
    assert "4 cached" in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-m", "minilm", "--tasks", "WordNetDefRetrieval"], "WordNetDefinitionRetrieval"),
        (["-m", "minilm", "--benchmark", "MTEB(eng v1)"], "MTEB(eng, v1)"),
        (["-m", "minilm", "--task-types", "Retreival"], "Retrieval"),
        (["-m", "./no/such/model", "--tasks", "STS12"], "no such directory"),
        (["-m", "minilm", "--tasks", "STS12", "--prompt", "NoSuchTask-query=q: "], "NoSuchTask-query"),
    ],
)
def test_cli_bad_input_names_the_closest_valid_names(args, expected, tmp_path):
    from neoembed.cli import app

    result = CliRunner().invoke(app, ["mteb-eval", *args, "-o", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert expected in result.output


def test_a_plain_transformers_encoder_is_pooled_like_the_protocol_says(minilm_path, tmp_path):
    """MiniLM's BERT saved as a bare transformers directory + masked-mean pooling + normalisation must give
    exactly the sentence-transformers MiniLM embeddings (which are mean-pooled and normalised)."""
    import numpy as np

    from neoembed.embedder import load_embedder
    from neoembed.evaluation.models import EvalSettings, load_sentence_transformer, resolve_model

    reference = load_embedder("minilm")
    reference[0].auto_model.save_pretrained(tmp_path / "bert")
    reference.tokenizer.save_pretrained(tmp_path / "bert")
    settings = EvalSettings(max_length=256)
    spec = resolve_model(str(tmp_path / "bert"), settings)
    assert spec.kind == "hf-encoder"
    model = load_sentence_transformer(spec, settings)
    texts = ["a small dog barked at the mailman", "glosses define the senses of words", "x"]
    ours = model.encode(texts)
    np.testing.assert_allclose(ours, reference.encode(texts), atol=1e-5)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)

    cls = load_sentence_transformer(spec, EvalSettings(max_length=256, pooling="cls", normalize=False))
    assert not np.allclose(cls.encode(texts), ours, atol=1e-3)
    assert cls.max_seq_length == 256


def test_scoring_settings_name_the_cache_entry_but_batch_size_does_not():
    from neoembed.evaluation.models import EvalSettings, resolve_model

    base = resolve_model("minilm", EvalSettings())
    assert (
        resolve_model("minilm", EvalSettings(batch_size=8)).meta.experiment_name == base.meta.experiment_name
    )
    for changed in (
        EvalSettings(pooling="cls"),
        EvalSettings(max_length=128),
        EvalSettings(prompts={"query": "q"}),
    ):
        assert resolve_model("minilm", changed).meta.experiment_name != base.meta.experiment_name


def test_models_in_same_named_directories_are_labelled_by_their_runs(tmp_path):
    """`-m runs/pk-50/model -m runs/pk-200/model` must not read as `model` and `model#2` in the summary."""
    from neoembed.evaluation.models import EvalSettings
    from neoembed.evaluation.runner import resolve_models

    for run in ("pk-50", "pk-200", "old/pk-50"):
        (tmp_path / "runs" / run / "model").mkdir(parents=True)
        (tmp_path / "runs" / run / "model" / "config.json").write_text("{}")
    names = [str(tmp_path / "runs" / run / "model") for run in ("pk-50", "pk-200", "old/pk-50", "pk-50")]
    labels = [spec.label for spec in resolve_models(["minilm", "bm25", *names], EvalSettings())]
    assert labels == [
        "all-MiniLM-L6-v2",
        "bm25",
        "runs/pk-50/model",
        "pk-200/model",
        "old/pk-50/model",
        "runs/pk-50/model#2",
    ]


def test_local_dataset_copy_runs_a_real_mteb_task(tmp_path):
    """--datasets-dir: the real STS12 task class evaluates from a local copy of its dataset repository."""
    from neoembed.evaluation.models import EvalSettings
    from neoembed.evaluation.runner import resolve_models, run_evaluation
    from neoembed.evaluation.tasks import select_tasks, use_local_datasets

    copy = tmp_path / "datasets" / "mteb" / "sts12-sts"
    copy.mkdir(parents=True)
    pairs = [
        ("a man is playing a guitar", "a person plays the guitar", 4.8),
        ("a dog runs in the park", "the stock market fell sharply", 0.2),
        ("a woman slices an onion", "someone is cutting an onion", 4.5),
        ("the sky is blue today", "a cat sleeps on the sofa", 0.0),
        ("the cat is black", "the cat is white", 2.0),
        ("a plane takes off", "an airplane is departing", 4.7),
    ]
    lines = [json.dumps({"sentence1": a, "sentence2": b, "score": s}) for a, b, s in pairs]
    (copy / "test.jsonl").write_text("\n".join(lines) + "\n")
    tasks = select_tasks(["STS12"])
    assert use_local_datasets(tasks, tmp_path / "datasets") == ["STS12"]
    settings = EvalSettings()
    report = run_evaluation(resolve_models(["minilm"], settings), tasks, settings, tmp_path / "out")
    assert [o.status for o in report.outcomes] == ["done"]
    assert report.summary.scores["all-MiniLM-L6-v2"]["STS12"] > 0.5
    shutil.rmtree(copy)


def test_a_failed_aggregate_is_retried_not_cached(tmp_path):
    """CQADupstack runs as its twelve subtasks: when they fail, no aggregate result is cached as finished."""
    from neoembed.evaluation.models import EvalSettings
    from neoembed.evaluation.runner import resolve_models, run_evaluation
    from neoembed.evaluation.tasks import leaf_tasks, select_tasks, use_local_datasets

    tasks = select_tasks(["CQADupstackRetrieval"])
    for leaf in leaf_tasks(tasks):  # unreadable local copies: fails the same way with or without a hub cache
        (tmp_path / "datasets" / leaf.metadata.dataset["path"]).mkdir(parents=True)
    assert len(use_local_datasets(tasks, tmp_path / "datasets")) == 12
    settings = EvalSettings()
    specs = resolve_models(["bm25"], settings)
    for _ in range(2):
        report = run_evaluation(specs, tasks, settings, tmp_path / "out")
        assert [(o.task, o.status) for o in report.outcomes] == [("CQADupstackRetrieval", "failed")]
    assert not list((tmp_path / "out" / "results").rglob("CQADupstack*.json"))


def test_prompts_are_the_protocols_only(minilm_path):
    """Given prompts reach mteb's prompt lookup (local task names included); a model's own prompts do not."""
    from mteb.models.abs_encoder import get_prompt_name
    from mteb.types import PromptType

    from neoembed.evaluation.local_tasks import WordNetDefinitionRetrieval, WordNetPOSClassification
    from neoembed.evaluation.models import EvalSettings, load_model, resolve_model

    prompts = {"WordNetDefinitionRetrieval-query": "definition of: ", "Classification": "classify: "}
    settings = EvalSettings(prompts=prompts)
    wrapper = load_model(resolve_model(str(minilm_path), settings), settings)
    assert wrapper.model.prompts == {}
    retrieval, classification = WordNetDefinitionRetrieval.metadata, WordNetPOSClassification.metadata
    assert (
        get_prompt_name(wrapper.model_prompts, retrieval, PromptType.query)
        == "WordNetDefinitionRetrieval-query"
    )
    assert get_prompt_name(wrapper.model_prompts, retrieval, PromptType.document) is None
    assert get_prompt_name(wrapper.model_prompts, classification, None) == "Classification"
    plain = load_model(resolve_model("minilm", EvalSettings()), EvalSettings())
    assert plain.model_prompts is None and plain.model.prompts == {}


@pytest.mark.faults
def test_an_unknown_task_is_one_line_without_mtebs_beta_warnings(tmp_path):
    """Finding the closest names instantiates every mteb task, and mteb logs and warns about each of its 250
    beta ones; the user sees only the answer."""
    import subprocess
    import sys

    command = [
        sys.executable,
        "-m",
        "neoembed",
        "mteb-eval",
        "-m",
        "minilm",
        "-t",
        "NoSuchTask",
        "-o",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("neoembed mteb-eval: unknown task 'NoSuchTask' (closest: ")
