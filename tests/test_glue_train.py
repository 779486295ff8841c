"""GLUE fine-tuning end to end on easy synthetic files: learning, grid, resume, MNLI transfer, CLI.

One tiny NeoBERT (1 layer x 64, bert-base-uncased vocabulary) keeps every run to a few dozen CPU steps.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.glue import GlueError, load_settings, run_glue, select_tasks
from neoembed.glue.metrics import compute_metrics
from neoembed.glue.model import load_glue_model
from neoembed.glue.synthetic import write_synthetic
from neoembed.glue.tasks import TASKS

QUICK = {
    "train.max_epochs": 1,
    "max_train_samples": 32,
    "optim.lr": 2e-3,
    "train.batch_size": 16,
    "train.log_steps": 1,
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One intra-op thread: a model this small gains nothing from two, and on a loaded machine the
    thread hand-offs cost several times the arithmetic."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_neobert(tmp_path_factory):
    from neoembed.pretrain.neobert import NeoBERTModel, tiny_config
    from neoembed.pretrain.neobert.tokenizer import load_tokenizer

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-neobert")
    config = tiny_config(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128)
    NeoBERTModel(config).save_pretrained(path)
    load_tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("glue-data")
    write_synthetic(path, ["sst2", "stsb", "mnli", "rte"], n_train=128, n_eval=64, seed=0)
    return path


def _rows(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()[1:]]


def test_classification_and_regression_beat_the_baselines(tiny_neobert, glue_dir, tmp_path):
    settings = load_settings(
        overrides={"optim.lr": 2e-3, "train.batch_size": 8, "train.max_epochs": 4, "transfer.enabled": False}
    )
    results = run_glue(
        tiny_neobert, select_tasks(["sst2", "stsb"], []), settings, tmp_path, data_dir=glue_dir
    )
    sst2, stsb = results
    majority = max(np.bincount([int(r[-1]) for r in _rows(glue_dir / "sst2" / "validation.tsv")])) / 64
    assert set(sst2.metrics["validation"]) == {"accuracy", "score"}
    assert sst2.metrics["validation"]["accuracy"] > majority + 0.15

    # STS-B: scored with Pearson/Spearman; the kept model beats predicting the mean score.
    assert set(stsb.metrics["validation"]) == {"pearson", "spearman", "score"}
    assert stsb.metrics["validation"]["pearson"] > 0.5
    dev = _rows(glue_dir / "stsb" / "validation.tsv")
    labels = np.array([float(r[-1]) for r in dev])
    model = load_glue_model(str(tmp_path / "stsb" / "best_model"), TASKS["stsb"]).eval()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "stsb" / "best_model")
    with torch.no_grad():
        batch = tokenizer([r[0] for r in dev], [r[1] for r in dev], padding=True, return_tensors="pt")
        predicted = model(**batch).logits.squeeze(-1).numpy()
    assert np.mean((predicted - labels) ** 2) < np.var(labels)  # MSE below the constant predictor's
    # The saved best model is the one whose metrics were reported.
    recomputed = compute_metrics(TASKS["stsb"], predicted, labels)
    assert recomputed["pearson"] == pytest.approx(stsb.metrics["validation"]["pearson"], abs=1e-4)

    log = [json.loads(line) for line in (tmp_path / "stsb" / "bs8-lr0.002-wd0.01" / "metrics.jsonl").open()]
    assert any("eval_pearson" in entry for entry in log) and any("loss" in entry for entry in log)
    assert (tmp_path / "stsb" / "bs8-lr0.002-wd0.01" / "curves.png").exists(), "beside the run's result"


def test_mnli_transfer(tiny_neobert, glue_dir, tmp_path):
    settings = load_settings(overrides={**QUICK, "transfer": {"enabled": True, "tasks": ["rte"]}})
    results = run_glue(tiny_neobert, select_tasks(["rte", "mnli"], []), settings, tmp_path, data_dir=glue_dir)
    assert [r.task for r in results] == ["mnli", "rte"]  # MNLI runs first
    mnli_best = tmp_path / "mnli" / "best_model"
    assert results[1].init_from == str(mnli_best)
    assert set(results[0].metrics) == {"validation_matched", "validation_mismatched"}

    # RTE starts from MNLI's backbone and dense layer with a new 2-way classifier.
    mnli = load_glue_model(str(mnli_best), TASKS["mnli"])
    rte = load_glue_model(str(mnli_best), TASKS["rte"])
    assert rte.classifier.out_features == 2 and rte.config.problem_type == "single_label_classification"
    for name, tensor in mnli.state_dict().items():
        if not name.startswith("classifier."):
            assert torch.equal(tensor, rte.state_dict()[name]), name

    # Without MNLI anywhere, a transfer task fails before training.
    with pytest.raises(GlueError, match="best MNLI checkpoint.*--mnli-checkpoint"):
        run_glue(tiny_neobert, select_tasks(["rte"], []), settings, tmp_path / "fresh", data_dir=glue_dir)


def test_cli_grid_resume_and_errors(tiny_neobert, glue_dir, tmp_path):
    recipe = tmp_path / "grid.yaml"
    recipe.write_text(
        "tasks: [sst2]\ngrid: {batch_size: [8, 16], lr: [2.0e-3], weight_decay: [0.01]}\n"
        "max_train_samples: 32\ntrain: {max_epochs: 1, log_steps: 1}\n"
    )
    out = tmp_path / "out"
    args = [
        "glue",
        "-m",
        tiny_neobert,
        "-t",
        "all",
        "--grid",
        "--recipe",
        str(recipe),
        "--data-dir",
        str(glue_dir),
    ]
    result = CliRunner().invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "| sst2 |" in result.output and "**average** (1 tasks)" in result.output
    runs = [json.loads((out / "sst2" / f"bs{b}-lr0.002-wd0.01" / "result.json").read_text()) for b in (8, 16)]
    best = max(runs, key=lambda r: r["score"])
    summary = json.loads((out / "glue.json").read_text())
    assert summary["tasks"]["sst2"]["hyperparameters"] == best["hyperparameters"]
    assert summary["average"] == pytest.approx(100 * best["score"])
    assert json.loads((out / "sst2" / "best.json").read_text())["hyperparameters"] == best["hyperparameters"]
    assert (out / "sst2" / "best_model" / "model.safetensors").exists()
    assert not list(out.glob("sst2/bs*/model")) and not list(
        out.glob("sst2/bs*/checkpoints")
    )  # one model kept

    # A rerun reuses both finished runs; a changed protocol is refused instead of mixed in.
    again = CliRunner().invoke(app, [*args, "-o", str(out)])
    assert again.exit_code == 0 and again.output.count("done before") == 2
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2
    changed = CliRunner().invoke(app, [*args, "-o", str(out), "--epochs", "2"])
    assert changed.exit_code == 2 and "produced with protocol" in changed.output
    other_data = CliRunner().invoke(app, [*args[:-1], str(glue_dir / "sst2"), "-o", str(out)])
    assert other_data.exit_code == 2 and "produced with data" in other_data.output

    # A narrower rerun of the worse point alone (set through generic field overrides) still reports the
    # best model on disk, not the point it ran.
    worse = min(runs, key=lambda r: r["score"])["hyperparameters"]["batch_size"]
    single = [a for a in args if a != "--grid"] + ["--train.batch_size", str(worse), "--optim.lr", "0.002"]
    narrower = CliRunner().invoke(app, [*single, "-o", str(out)])
    assert narrower.exit_code == 0 and "done before" in narrower.output, narrower.output
    summary = json.loads((out / "glue.json").read_text())
    assert summary["tasks"]["sst2"]["hyperparameters"] == best["hyperparameters"]

    typo = CliRunner().invoke(
        app, [*args, "-o", str(tmp_path / "typo"), "--mnli-checkpoint", str(tmp_path / "no-such-model")]
    )
    assert typo.exit_code == 2 and "not a loadable model" in typo.output

    unknown = CliRunner().invoke(app, ["glue", "-m", tiny_neobert, "-t", "sst2,squad"])
    assert unknown.exit_code == 2 and "unknown GLUE task 'squad'" in unknown.output
    mismatch = CliRunner().invoke(
        app, ["glue", "-m", tiny_neobert, "-t", "cola", "--data-dir", str(glue_dir / "stsb")]
    )
    assert mismatch.exit_code == 2 and "needs columns sentence, label; missing sentence" in mismatch.output
