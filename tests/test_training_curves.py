"""Training curves: read from metrics.jsonl, drawn to curves.png when training ends, two runs compared."""

import json
from pathlib import Path

import matplotlib.image
import pytest
from transformers import TrainerControl, TrainerState
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.errors import InputError
from neoembed.training import MetricsLog, read_curves, write_curves

runner = CliRunner()


def write_log(run: Path, records: list[dict]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def contrastive_log(run: Path, slope: float = 1.0) -> Path:
    """What a contrastive run logs: training steps, evaluations of two held-out sets, the final summary."""
    records = [{"step": 0, "eval_wordnet_cosine_ndcg@10": 0.5, "eval_foldoc_cosine_ndcg@10": 0.4}]
    for step in range(1, 11):
        records.append(
            {
                "step": step,
                "loss": 2.0 - 0.1 * slope * step,
                "grad_norm": 1.0 / step,
                "learning_rate": 1e-4 * step / 10,
                "epoch": step / 10,
            }
        )
        if step % 5 == 0:
            records.append(
                {
                    "step": step,
                    "eval_wordnet_cosine_ndcg@10": 0.5 + 0.01 * step,
                    "eval_wordnet_dim64_cosine_ndcg@10": 0.4,
                    "eval_foldoc_cosine_ndcg@10": 0.4,
                    "eval_wordnet_cosine_recall@10": 0.9,
                    "eval_runtime": 1.5,
                    "eval_samples_per_second": 9.0,
                }
            )
    records.append({"step": 10, "train_runtime": 12.0, "train_loss": 1.5})
    return write_log(run, records)


def test_curves_hold_loss_learning_rate_grad_norm_and_the_headline_held_out_metric(tmp_path):
    curves = read_curves(contrastive_log(tmp_path / "run"))
    assert curves.name == "run"
    assert curves.panels["training loss"]["loss"][0] == (1, pytest.approx(1.9))
    assert len(curves.panels["learning rate"]["learning_rate"]) == 10
    assert len(curves.panels["gradient norm"]["grad_norm"]) == 10
    # Each set's full-dimension nDCG@10, before training (step 0) and at each evaluation; not the bookkeeping,
    # the smaller dimensions or the other metrics.
    score = curves.panels["held-out score"]
    assert set(score) == {"wordnet_cosine_ndcg@10", "foldoc_cosine_ndcg@10"}
    assert [step for step, _ in score["wordnet_cosine_ndcg@10"]] == [0, 5, 10]
    assert "held-out loss" not in curves.panels


def test_an_mlm_or_glue_run_plots_its_held_out_loss_and_score(tmp_path):
    run = write_log(
        tmp_path / "glue",
        [
            {"step": 1, "loss": 1.0, "learning_rate": 1e-5, "grad_norm": 2.0},
            {"step": 2, "eval_loss": 0.9, "eval_score": 0.7, "eval_pearson": 0.7, "eval_runtime": 1.0},
        ],
    )
    curves = read_curves(run)
    assert curves.panels["held-out loss"] == {"eval_loss": [(2, 0.9)]}
    assert curves.panels["held-out score"] == {"score": [(2, 0.7)]}, "GLUE's task score, not every metric"


def test_write_curves_draws_a_png_beside_the_log(tmp_path):
    path = write_curves(contrastive_log(tmp_path / "run"))
    assert path == tmp_path / "run" / "curves.png"
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 1000, "a row of panels"
    assert write_curves(write_log(tmp_path / "empty", [])) is None, "nothing logged yet: no figure"


def test_metrics_log_draws_the_curves_when_training_ends(tmp_path):
    run = contrastive_log(tmp_path / "run")
    callback = MetricsLog(run / "metrics.jsonl")
    args = type("Args", (), {"output_dir": str(run)})()
    callback.on_train_end(args, TrainerState(is_world_process_zero=False), TrainerControl())
    assert not (run / "curves.png").exists(), "only the main process draws"
    callback.on_train_end(args, TrainerState(is_world_process_zero=True), TrainerControl())
    assert (run / "curves.png").stat().st_size > 10_000


def test_runs_compare_draws_two_runs_on_one_figure(tmp_path):
    a, b = contrastive_log(tmp_path / "a"), contrastive_log(tmp_path / "b", slope=0.5)
    out = tmp_path / "ab.png"
    result = runner.invoke(app, ["runs", "compare", str(a), str(b), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert matplotlib.image.imread(out).shape[1] > 1000
    missing = runner.invoke(app, ["runs", "compare", str(a), str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no metrics.jsonl" in missing.output
    alone = runner.invoke(app, ["runs", "compare", str(a)])
    assert alone.exit_code == 2 and "at least two" in alone.output


def test_reading_a_directory_without_a_log_names_it(tmp_path):
    with pytest.raises(InputError, match="no metrics.jsonl"):
        read_curves(tmp_path)
