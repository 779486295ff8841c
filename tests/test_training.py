"""The training vocabulary and plumbing: MetricsLog's NaN stop, one mapping to TrainingArguments, one rule set,
recipe-checked resume."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState

from neoembed.recipes import RecipeError, StrictSettings
from neoembed.training import MetricsLog, TrainingDiverged, check_resume_compatible

# Curves go to TensorBoard exactly where it is installed (neoembed[tensorboard]).
TENSORBOARD = ["tensorboard"] if importlib.util.find_spec("tensorboard") else []


def log(callback: MetricsLog, output_dir: Path, logs: dict, step: int, main: bool = True) -> None:
    class Args:
        pass

    args = Args()
    args.output_dir = str(output_dir)
    state = TrainerState(global_step=step, is_world_process_zero=main)
    callback.on_log(args, state, TrainerControl(), logs=logs)


def test_metrics_log_writes_from_the_main_process_and_stops_on_a_non_finite_loss(tmp_path):
    callback = MetricsLog(tmp_path / "metrics.jsonl")
    log(callback, tmp_path, {"loss": 2.5, "epoch": 0.1}, step=1)
    log(callback, tmp_path, {"loss": 2.0}, step=2, main=False)  # another rank: nothing written
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "checkpoint-1" / "trainer_state.json").write_text("{}")
    with pytest.raises(TrainingDiverged, match=r"became nan at step 3.*checkpoint-1"):
        log(callback, tmp_path, {"loss": math.nan}, step=3)
    with pytest.raises(TrainingDiverged, match="became inf"):
        log(callback, tmp_path, {"loss": math.inf}, step=4, main=False)  # every rank stops
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [{"step": 1, "loss": 2.5, "epoch": 0.1}]


SHARED = {
    "optim": {"eps": 1e-7, "betas": (0.8, 0.9), "max_grad_norm": 0.5},
    "train": {"seed": 7, "grad_accum": 2},
}


def test_the_three_trainers_speak_one_vocabulary_mapped_once(tmp_path, cpu_bf16):
    from neoembed.contrastive.settings import ContrastiveSettings
    from neoembed.contrastive.train import training_arguments as contrastive_arguments
    from neoembed.glue.settings import GlueSettings, Hyperparameters
    from neoembed.glue.train import training_arguments as glue_arguments
    from neoembed.pretrain.settings import PretrainSettings
    from neoembed.training import trainer_arguments

    def sections(**train):
        return {"optim": SHARED["optim"], "train": {**SHARED["train"], **train}}

    contrastive = contrastive_arguments(
        ContrastiveSettings.model_validate(
            {"data": {"path": "d"}, **sections(output_dir=str(tmp_path / "c"))}
        ),
        evaluate=False,
    )
    glue = glue_arguments(
        GlueSettings.model_validate(sections()), Hyperparameters(16, 2e-5, 0.01), tmp_path / "g"
    )
    pretrain_settings = PretrainSettings.model_validate(
        {"corpus": {"wordnet": True}, **sections(output_dir=str(tmp_path / "p"))}
    )
    pretrain = trainer_arguments(pretrain_settings.train, pretrain_settings.optim)
    for args in (contrastive, glue, pretrain):
        assert (args.adam_epsilon, args.adam_beta1, args.adam_beta2, args.max_grad_norm) == (
            1e-7,
            0.8,
            0.9,
            0.5,
        )
        assert (args.seed, args.gradient_accumulation_steps) == (7, 2)
        assert args.report_to == TENSORBOARD and args.dataloader_num_workers == 0
    assert contrastive.bf16 is pretrain.bf16 is cpu_bf16  # precision auto: bf16 where the CPU has units
    assert not glue.bf16  # GLUE's default is fp32
    assert pretrain.output_dir == str(tmp_path / "p") and glue.output_dir == str(tmp_path / "g")
    assert glue.warmup_steps == 0.06 and contrastive.warmup_steps == pretrain.warmup_steps == 2000
    assert contrastive.save_strategy == "steps" and not contrastive.logging_nan_inf_filter
    assert glue.save_strategy == "epoch" and glue.logging_nan_inf_filter  # a NaN grid point scores low
    assert glue.ddp_find_unused_parameters is False and contrastive.ddp_find_unused_parameters is True


@pytest.mark.parametrize("job", ["pretrain", "contrastive"])
def test_every_checkpointed_run_saves_only_on_log_steps(job):
    """The guard that keeps a diverged model from being saved holds for every trainer that checkpoints."""
    from neoembed.contrastive.settings import ContrastiveSettings
    from neoembed.pretrain.settings import PretrainSettings

    settings_cls, required = {
        "pretrain": (PretrainSettings, {"corpus": {"wordnet": True}}),
        "contrastive": (ContrastiveSettings, {"data": {"path": "d"}}),
    }[job]
    with pytest.raises(ValueError, match=r"save_steps \(15\) must be a multiple of log_steps \(10\)"):
        settings_cls.model_validate({**required, "train": {"save_steps": 15, "log_steps": 10}})


class _Train(StrictSettings):
    max_steps: int = 10
    schedule: str = "cosine"  # stands for a field added after a run was recorded


class _Recipe(StrictSettings):
    train: _Train = _Train()


def test_a_run_recorded_before_a_field_existed_resumes_only_with_that_field_at_its_default(tmp_path):
    (tmp_path / "recipe.json").write_text(json.dumps({"train": {"max_steps": 10}}))
    check_resume_compatible(_Recipe(), tmp_path)  # the new field at its default: the same run
    with pytest.raises(RecipeError, match="train.max_steps"):
        check_resume_compatible(_Recipe(train=_Train(max_steps=20)), tmp_path)
    with pytest.raises(RecipeError, match="train.schedule"):
        check_resume_compatible(_Recipe(train=_Train(schedule="wsd")), tmp_path)


def test_a_resume_on_another_number_of_ranks_needs_elastic_and_keeps_the_global_batch(tmp_path, monkeypatch):
    from neoembed.training import Launch, more_accumulation, plan_launch

    def plan(world: int, *, elastic=False, zero=False, resize=more_accumulation):
        monkeypatch.setenv("WORLD_SIZE", str(world))
        return plan_launch(
            tmp_path, Launch(world, 8, 1), resuming=True, elastic=elastic, zero=zero, resize=resize
        )

    assert plan(2) == Launch(2, 8, 1)  # the first start records its launch
    assert json.loads((tmp_path / "launch.json").read_text())["world_size"] == 2
    with pytest.raises(RecipeError, match="trained on 2 ranks and this launch has 1; .* train.elastic true"):
        plan(1)
    with pytest.raises(RecipeError, match="ZeRO checkpoints, partitioned over 2 ranks"):
        plan(1, elastic=True, zero=True)
    with pytest.raises(RecipeError, match="global batch of 16 .* does not divide among 3 ranks"):
        plan(3, elastic=True)
    assert plan(1, elastic=True) == Launch(1, 8, 2)  # MLM: each rank accumulates the missing micro-batches
    assert plan(1, elastic=True) == Launch(1, 8, 2)  # and the resized launch is what the run now records
    event = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert (
        event["event"] == "elastic_resume"
        and event["from"]["world_size"] == 2
        and event["to"]["grad_accum"] == 2
    )


def test_contrastive_keeps_its_negatives_with_larger_batches_in_gradcache_chunks():
    from neoembed.training import Launch, larger_batches

    assert larger_batches(Launch(4, 8, 1), 2) == Launch(2, 16, 1, mini_batch_size=8)
    assert larger_batches(Launch(2, 32, 1, mini_batch_size=8), 1) == Launch(1, 64, 1, mini_batch_size=8)
    with pytest.raises(RecipeError, match="global batch of 24 .* does not divide among 5 ranks"):
        larger_batches(Launch(3, 8, 1), 5)


@pytest.mark.parametrize(
    ("setting", "device", "expected"),
    [("auto", "cuda", True), ("auto", "cpu", False), (True, "cpu", True), (False, "cuda", False)],
)
def test_train_compile_auto_compiles_on_cuda_only_and_true_or_false_force_it(setting, device, expected):
    from neoembed.compilation import compile_wanted
    from neoembed.training import TrainSettings

    assert TrainSettings().compile == "auto"
    assert compile_wanted(TrainSettings(compile=setting).compile, device) is expected


def test_every_trainer_compiles_through_the_setting_on_its_device():
    """On this CPU, auto leaves NeoBERT eager and true compiles its blocks (compilation itself waits for the
    first forward pass)."""
    from neoembed.pretrain.neobert import NeoBERTForMaskedLM, tiny_config
    from neoembed.training import TrainSettings, compile_for_training

    eager, compiled = NeoBERTForMaskedLM(tiny_config()), NeoBERTForMaskedLM(tiny_config())
    assert compile_for_training(eager, TrainSettings(precision="fp32")) is False
    assert compile_for_training(compiled, TrainSettings(precision="fp32", compile=True)) is True
    blocks = [[block.compiled for block in model.model.transformer_encoder] for model in (eager, compiled)]
    assert blocks == [[None] * 2, ["inductor"] * 2]
