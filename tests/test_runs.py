"""Run plumbing: atomic writes, the JSONL log, MetricsLog's NaN stop, and the shared TrainingArguments."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import TrainerControl, TrainerState

from neoembed.recipes import RecipeError, StrictSettings
from neoembed.runs import (
    MetricsLog,
    TrainingDiverged,
    append_jsonl,
    check_resume_compatible,
    write_json,
    write_parquet,
    write_text,
)


def test_atomic_writes_replace_the_file_and_a_failed_write_keeps_the_old_one(tmp_path):
    path = tmp_path / "result.json"
    write_json(path, {"b": 1, "a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    with pytest.raises(TypeError):
        write_json(path, {"a": object()})  # not serialisable: fails before anything is renamed
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    write_text(path, "replaced")
    write_parquet(tmp_path / "t.parquet", pa.table({"x": [1, 2, 3]}))
    assert path.read_text() == "replaced" and pq.read_table(tmp_path / "t.parquet")["x"].to_pylist() == [
        1,
        2,
        3,
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json", "t.parquet"]  # no temporary files


def test_append_jsonl_adds_one_line_per_record(tmp_path):
    for step in (1, 2):
        append_jsonl(tmp_path / "log.jsonl", {"step": step, "text": "é"})
    lines = (tmp_path / "log.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 1, "text": "é"}, {"step": 2, "text": "é"}]


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


def test_the_three_trainers_share_their_common_training_arguments(tmp_path, cpu_bf16):
    from neoembed.contrastive.settings import ContrastiveSettings
    from neoembed.contrastive.train import training_arguments as contrastive_arguments
    from neoembed.evaluation.glue.settings import GlueSettings, Hyperparameters
    from neoembed.evaluation.glue.train import training_arguments as glue_arguments

    contrastive = contrastive_arguments(
        ContrastiveSettings.model_validate(
            {"data": {"path": "d"}, "model": {"base": "b"}, "train": {"output_dir": str(tmp_path / "c")}}
        ),
        evaluate=False,
    )
    glue = glue_arguments(GlueSettings(), Hyperparameters(16, 2e-5, 0.01), tmp_path / "g")
    for args in (contrastive, glue):
        assert args.report_to == [] and args.seed == 0
        assert args.dataloader_num_workers == 0
    assert contrastive.bf16 is cpu_bf16  # precision auto: bf16 autocast where the CPU has bf16 units
    assert not glue.bf16  # GLUE's default is fp32
    assert contrastive.save_strategy == "steps" and not contrastive.logging_nan_inf_filter
    assert glue.save_strategy == "epoch" and glue.logging_nan_inf_filter  # a NaN grid point scores low
    assert glue.ddp_find_unused_parameters is False and contrastive.ddp_find_unused_parameters is True


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
