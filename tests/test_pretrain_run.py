"""`neoembed pretrain` end to end on tiny local corpora: outputs, exact resume after SIGKILL, bad input."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from synthetic_text import random_documents

from neoembed.pretrain.corpus import PretrainCorpusError
from neoembed.pretrain.settings import PretrainSettings
from neoembed.pretrain.train import run_pretraining
from neoembed.recipes import RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[1]


def write_corpus(path: Path) -> Path:
    path.write_text("\n".join(random_documents(400, min_words=4, max_words=30)) + "\n")
    return path


def tiny_recipe(tmp_path: Path, **train) -> dict:
    corpus = write_corpus(tmp_path / "corpus.txt")
    return {
        "corpus": {"files": [str(corpus)], "heldout_fraction": 0.1},
        "model": {
            "config": {
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_length": 64,
            }
        },
        "data": {"max_length": 64, "batch_size": 4},
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "train": {
            "output_dir": str(tmp_path / "run"),
            "max_steps": 8,
            "log_steps": 1,
            "eval_steps": 4,
            "eval_batches": 2,
            "save_steps": 2,
            "keep_checkpoints": 2,
            "threads": 1,
            "peak_tflops": 0.25,
            **train,
        },
    }


def losses(run_dir: Path) -> dict[int, float]:
    """The last logged training loss of each step (a resumed run logs the steps after its checkpoint again)."""
    by_step = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "loss" in record:
            by_step[record["step"]] = record["loss"]
    return by_step


def test_a_run_writes_a_loadable_model_metrics_and_rotated_checkpoints(tmp_path):
    from transformers import AutoModelForMaskedLM

    settings = PretrainSettings.model_validate(tiny_recipe(tmp_path))
    final = run_pretraining(settings)
    model = AutoModelForMaskedLM.from_pretrained(final)
    assert (final / "tokenizer.json").exists() and model.config.hidden_size == 32
    assert model.config.sparse_prediction is False, "a training setting does not leak into the saved model"
    run = tmp_path / "run"
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-6", "checkpoint-8"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_logs = [r for r in records if "loss" in r]
    assert len(train_logs) == 8
    assert "tokens_per_s" not in train_logs[0], "the warm-up step is left out of the throughput window"
    assert all(r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1 for r in train_logs[1:])
    assert all(0.5 < r["packing_efficiency"] <= 1 for r in train_logs), "packed rows are (nearly) full"
    assert sum(1 for r in records if "eval_loss" in r) == 2
    assert train_logs[-1]["loss"] < train_logs[0]["loss"]
    assert (run / "curves.png").stat().st_size > 10_000, "the curves are drawn when training ends"
    if importlib.util.find_spec("tensorboard"):  # neoembed[tensorboard]: the Trainer reports to it
        assert list(run.glob("runs/*/events.out.tfevents.*"))


@pytest.mark.faults
def test_a_run_killed_with_sigkill_resumes_on_the_same_loss_curve(tmp_path):
    recipe = tiny_recipe(tmp_path)
    uninterrupted = PretrainSettings.model_validate(recipe)
    run_pretraining(uninterrupted)
    expected = losses(Path(uninterrupted.train.output_dir))

    killed_dir = tmp_path / "killed"
    recipe["train"]["output_dir"] = str(killed_dir)
    recipe_path = tmp_path / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe))
    command = [sys.executable, "-m", "neoembed", "pretrain", "--recipe", str(recipe_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (killed_dir / "checkpoint-2" / "trainer_state.json").exists():
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no checkpoint within the time limit"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed_dir / "final").exists()

    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resumed = losses(killed_dir)
    assert sorted(resumed) == list(range(1, 9))
    for step in range(1, 9):
        assert resumed[step] == pytest.approx(expected[step], abs=1e-6), f"step {step}"


def test_bf16_autocast_on_cpu_trains_fp32_master_weights_and_lowers_the_loss(tmp_path):
    from safetensors.torch import load_file

    settings = PretrainSettings.model_validate(tiny_recipe(tmp_path, precision="bf16", eval_steps=8))
    final = run_pretraining(settings)
    assert all(t.dtype == torch.float32 for t in load_file(final / "model.safetensors").values())
    curve = losses(tmp_path / "run")
    assert curve[8] < curve[1]


def test_running_a_finished_run_again_saves_the_same_model(tmp_path):
    from safetensors.torch import load_file

    settings = PretrainSettings.model_validate(tiny_recipe(tmp_path, max_steps=2, save_steps=2))
    final = run_pretraining(settings)
    first = load_file(final / "model.safetensors")
    run_pretraining(settings)
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-2"]
    assert sorted(losses(tmp_path / "run")) == [1, 2]
    for name, value in load_file(final / "model.safetensors").items():
        assert torch.equal(value, first[name]), name


def test_resuming_with_a_different_recipe_is_refused(tmp_path):
    recipe = tiny_recipe(tmp_path, max_steps=2, save_steps=2)
    run_pretraining(PretrainSettings.model_validate(recipe))
    recipe["optim"]["lr"] = 1e-4
    with pytest.raises(RecipeError, match="optim.lr"):
        run_pretraining(PretrainSettings.model_validate(recipe))


@pytest.mark.parametrize(
    "override, message",
    [
        ({"train.max_steps": "many"}, "train.max_steps"),
        ({"data.mode": "zipped"}, "data.mode"),
        ({"optim.lrr": 1.0}, "optim.lrr: unknown field"),
        ({"corpus.wordnet": True}, "exactly one of"),
    ],
)
def test_recipe_errors_name_the_field(tmp_path, override, message):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe(tmp_path)))
    with pytest.raises(RecipeError, match=message):
        load_recipe(path, PretrainSettings, override)


def test_unreadable_corpora_are_clear_errors(tmp_path):
    recipe = tiny_recipe(tmp_path)
    recipe["corpus"]["files"] = [str(tmp_path / "missing-*.txt")]
    with pytest.raises(PretrainCorpusError, match="matches no file"):
        run_pretraining(PretrainSettings.model_validate(recipe))

    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait\n".encode("latin-1") * 5)
    recipe["corpus"]["files"] = [str(bad)]
    recipe["train"]["output_dir"] = str(tmp_path / "run2")
    with pytest.raises(PretrainCorpusError, match="not UTF-8"):
        run_pretraining(PretrainSettings.model_validate(recipe))

    table = tmp_path / "docs.jsonl"
    table.write_text('{"body": "hello"}\n')
    recipe["corpus"]["files"] = [str(table)]
    recipe["train"]["output_dir"] = str(tmp_path / "run3")
    with pytest.raises(PretrainCorpusError, match="no column 'text'.*body"):
        run_pretraining(PretrainSettings.model_validate(recipe))


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path):
    recipe = tiny_recipe(tmp_path)
    recipe["model"]["config"]["vocab_size"] = 1000
    with pytest.raises(RecipeError, match="vocab_size"):
        run_pretraining(PretrainSettings.model_validate(recipe))


def test_two_gloo_processes_train_like_one_process_accumulating_two_batches(tmp_path):
    """Items are indexed globally, so 2 ranks x 1 micro-batch see the batches 1 rank x 2 accumulations sees."""
    import torch
    from safetensors.torch import load_file

    recipe = tiny_recipe(tmp_path, max_steps=3, save_steps=3, log_steps=1, eval_steps=3)
    recipe["train"]["output_dir"] = str(tmp_path / "single")
    recipe["train"]["grad_accum"] = 2
    run_pretraining(PretrainSettings.model_validate(recipe))

    recipe["train"]["output_dir"] = str(tmp_path / "ddp")
    recipe["train"]["grad_accum"] = 1
    recipe_path = tmp_path / "ddp.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", "neoembed", "pretrain", "--recipe", str(recipe_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    single = load_file(tmp_path / "single" / "final" / "model.safetensors")
    ddp = load_file(tmp_path / "ddp" / "final" / "model.safetensors")
    for name, value in single.items():
        assert torch.allclose(value, ddp[name], atol=1e-5), name


def test_cli_reports_recipe_errors_without_a_traceback(tmp_path):
    from typer.testing import CliRunner

    from neoembed.cli import app

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe(tmp_path)))
    result = CliRunner().invoke(app, ["pretrain", "--recipe", str(path), "--optim.lr", "fast"])
    assert result.exit_code == 2
    assert "field optim.lr" in result.output and "Traceback" not in result.output


def test_a_diverging_run_stops_with_a_clear_message_and_saves_nothing_after(tmp_path):
    from neoembed.training import TrainingDiverged

    recipe = tiny_recipe(tmp_path, max_steps=40, save_steps=2, log_steps=1, eval_steps=40)
    recipe["optim"] = {"lr": 1e6, "warmup_steps": 0}  # AdamW steps of ~1e6 per weight: the loss overflows
    with pytest.raises(TrainingDiverged, match="loss became (nan|inf)") as stopped:
        run_pretraining(PretrainSettings.model_validate(recipe))
    run = tmp_path / "run"
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    finite_steps = [r["step"] for r in logged if "loss" in r]  # the diverged loss raises before it is logged
    saved = sorted(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*"))
    assert all(step <= max(finite_steps, default=0) for step in saved)
    assert not (run / "final").exists()
    assert "Last good checkpoint" in str(stopped.value)


def test_empty_documents_are_skipped_and_counted(tmp_path, caplog):
    from neoembed.pretrain.corpus import load_corpus
    from neoembed.pretrain.settings import CorpusSettings

    table = tmp_path / "docs.jsonl"
    rows = ['{"text": "a real document"}', '{"text": "   "}', '{"text": null}', '{"text": "another one"}']
    table.write_text("\n".join(rows) + "\n")
    with caplog.at_level("WARNING", logger="neoembed.pretrain"):
        train, heldout = load_corpus(CorpusSettings(files=[str(table)], heldout_fraction=0.0))
    assert sorted(train["text"]) == ["a real document", "another one"] and len(heldout) == 0
    assert "skipped 2 empty or non-text documents of 4" in caplog.text


def test_a_wsd_schedule_holds_the_peak_then_decays(tmp_path):
    recipe = tiny_recipe(tmp_path)
    recipe["optim"] |= {"schedule": "wsd", "wsd_decay_fraction": 0.25, "min_lr_ratio": 0.0}
    run_pretraining(PretrainSettings.model_validate(recipe))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["learning_rate"] for r in records if "loss" in r]  # each logged after its step
    peak = recipe["optim"]["lr"]
    assert rates[1] == peak / 2 and all(rate == peak for rate in rates[2:7])
    assert 0 < rates[7] < peak, "the last quarter of the steps decays"


@pytest.mark.slow
def test_a_run_with_compiled_layers_trains(tmp_path):
    final = run_pretraining(PretrainSettings.model_validate(tiny_recipe(tmp_path, compile=True)))
    assert (final / "model.safetensors").exists()
    assert losses(tmp_path / "run")[8] < losses(tmp_path / "run")[1]
