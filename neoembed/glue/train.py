"""Fine-tune one model on one task at one grid point with the transformers Trainer, then score it: a job of
the skeleton every trainer shares (`training.run_job`)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from neoembed.glue.metrics import compute_metrics
from neoembed.glue.model import load_glue_model
from neoembed.glue.settings import GlueSettings, Hyperparameters
from neoembed.glue.tasks import GlueTask
from neoembed.run_files import METRICS_FILE
from neoembed.training import MetricsLog, Prepared, compile_for_training, run_job, trainer_arguments


@dataclass
class RunResult:
    metrics: dict[str, dict[str, float]]  # dev split -> metric -> value
    score: float  # the task score: mean over dev splits of each split's metric mean
    best_step: int  # the step whose checkpoint was kept (early stopping keeps the best evaluation)
    steps: int  # steps actually trained
    epochs: float


def training_arguments(settings: GlueSettings, hp: Hyperparameters, output_dir: Path):
    """The paper's protocol: AdamW (0.9, 0.95), linear warmup over 6% of the steps then linear decay,
    up to `train.max_epochs` with early stopping on the task score, keeping the best evaluation's weights."""
    import torch

    train = settings.train
    return trainer_arguments(
        train,
        settings.optim,
        output_dir=output_dir,
        # A checkpoint at every evaluation (per epoch without eval_steps), the best one always kept.
        save_strategy="steps" if train.eval_steps else "epoch",
        save_steps=train.eval_steps,
        save_total_limit=1,
        # A diverging grid point is scored (and loses) rather than stopping the grid: the Trainer's filter
        # keeps a NaN out of the logs.
        logging_nan_inf_filter=True,
        per_device_train_batch_size=hp.batch_size,
        per_device_eval_batch_size=train.eval_batch_size,
        learning_rate=hp.learning_rate,
        weight_decay=hp.weight_decay,
        optim="adamw_torch",
        lr_scheduler_type="linear",
        num_train_epochs=train.max_epochs,
        eval_strategy="steps" if train.eval_steps else "epoch",
        eval_steps=train.eval_steps,
        save_only_model=True,
        load_best_model_at_end=True,
        metric_for_best_model="score",
        greater_is_better=True,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


class GlueRun:
    """One grid point of one task as a `training.Job`: fine-tune `init` (a new classification head, seeded by
    `run_job`) on the train split, early-stopping on the first dev split; score every dev split with the best
    weights, save them to `run_dir/model` and drop the intermediate checkpoints. A point starts over when
    re-run (the runner resumes whole points), so there is no checkpoint to resume from."""

    def __init__(
        self, init: str, tokenizer, task: GlueTask, data, hp: Hyperparameters, settings, run_dir: Path
    ):
        self.init, self.tokenizer, self.task, self.data = init, tokenizer, task, data
        self.hp, self.settings, self.run_dir = hp, settings, Path(run_dir)

    def prepare(self) -> Prepared:
        from transformers import DataCollatorWithPadding, EarlyStoppingCallback, Trainer

        task, settings, tokenizer = self.task, self.settings, self.tokenizer
        model = load_glue_model(self.init, task)
        compile_for_training(model, settings.train)
        trainer = Trainer(
            model=model,
            args=training_arguments(settings, self.hp, self.run_dir / "checkpoints"),
            train_dataset=self.data["train"],
            eval_dataset=self.data[task.eval_splits[0]],
            processing_class=tokenizer,
            data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8),
            # a single-head model: predictions and labels are single arrays, never tuples
            compute_metrics=lambda p: compute_metrics(
                task, np.asarray(p.predictions), np.asarray(p.label_ids)
            ),
            callbacks=[
                EarlyStoppingCallback(early_stopping_patience=settings.train.early_stopping_patience),
                MetricsLog(self.run_dir / METRICS_FILE),
            ],
        )
        return Prepared(trainer)

    def finish(self, prepared: Prepared) -> RunResult:
        from transformers import EarlyStoppingCallback

        trainer, task, data = prepared.trainer, self.task, self.data
        trainer.remove_callback(EarlyStoppingCallback)  # it only understands the training-time evaluations
        metrics = {}
        for split in task.eval_splits:
            found = trainer.evaluate(data[split], metric_key_prefix=split)
            metrics[split] = {m: found[f"{split}_{m}"] for m in (*task.metrics, "score")}
        best = trainer.state.best_model_checkpoint
        trainer.save_model(str(self.run_dir / "model"))
        shutil.rmtree(self.run_dir / "checkpoints", ignore_errors=True)
        return RunResult(
            metrics=metrics,
            score=sum(m["score"] for m in metrics.values()) / len(metrics),
            best_step=int(best.rsplit("-", 1)[1]) if best else trainer.state.global_step,
            steps=trainer.state.global_step,
            epochs=float(trainer.state.epoch or 0.0),
        )


def fine_tune(
    init: str, tokenizer, task: GlueTask, data, hp: Hyperparameters, settings, run_dir: Path
) -> RunResult:
    """Run one grid point (`GlueRun`) through the job skeleton every trainer shares (`training.run_job`)."""
    return run_job(GlueRun(init, tokenizer, task, data, hp, settings, run_dir), settings.train, run_dir)
