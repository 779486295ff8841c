"""Trainer callbacks every neoembed trainer may add: the metrics log with its NaN stop and curves, and a time
budget."""

from __future__ import annotations

import math
import time
from pathlib import Path

from transformers import TrainerCallback

from neoembed.errors import RunError
from neoembed.run_files import append_jsonl
from neoembed.training.checkpoints import last_complete_checkpoint
from neoembed.training.curves import write_curves


class TrainingDiverged(RunError):
    """The loss became NaN or infinite; the message names the last good checkpoint."""


class MetricsLog(TrainerCallback):
    """Appends every Trainer log (`{"step": ..., **logs}`) to `path` from the main process, raises
    TrainingDiverged on every rank when a logged training loss is not finite, and draws curves.png beside
    `path` when training ends.

    The Trainer saves after it logs, so the stop comes before a diverged model is written, provided the save
    steps are log steps too (`TrainSettings` checks it) and the Trainer's NaN filter is off (as
    `trainer_arguments` sets it); with the filter on, the Trainer replaces a NaN by the running mean.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(loss):
            last = last_complete_checkpoint(Path(args.output_dir))
            raise TrainingDiverged(
                f"the training loss became {loss} at step {state.global_step}; nothing was saved after "
                f"it. Last good checkpoint: {last or 'none yet'}. Lower optim.lr or raise optim.warmup_steps."
            )
        if state.is_world_process_zero:
            append_jsonl(self.path, {"step": state.global_step, **logs})

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.path.exists():
            write_curves(self.path.parent)


def logged_runtime(records: list[dict]) -> float:
    """Seconds of `trainer.train()` as the Trainer logged them at its end (in-training evaluations included),
    from a `MetricsLog`'s records: the last run's, where a resumed run logged several."""
    return next(record["train_runtime"] for record in reversed(records) if "train_runtime" in record)


class TimeBudget(TrainerCallback):
    """Stop after `minutes` of training (evaluation time excluded); the trainer then saves and exports."""

    def __init__(self, minutes: float) -> None:
        self.seconds, self.spent, self.started = minutes * 60, 0.0, None

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.spent += time.perf_counter() - self.started
        if self.spent >= self.seconds:
            control.should_training_stop = True
            control.should_save = True
