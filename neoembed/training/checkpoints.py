"""Checkpoints the Trainer wrote: the newest complete one, and training from it (or only restoring it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def last_complete_checkpoint(output_dir: Path) -> str | None:
    """The newest checkpoint the Trainer finished writing (see `complete_checkpoints`)."""
    checkpoints = complete_checkpoints(output_dir)
    return str(checkpoints[0][1]) if checkpoints else None


def complete_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """The checkpoints the Trainer finished writing, as (step, folder), newest first, removing any a kill left
    half-written.

    The Trainer writes trainer_state.json last, so a checkpoint whose state file parses is complete;
    transformers' own `get_last_checkpoint` would pick a half-written newer folder and fail to resume.
    """
    if not output_dir.exists():
        return []
    checkpoints = sorted(
        (
            (int(p.name.split("-")[-1]), p)
            for p in output_dir.glob("checkpoint-*")
            if p.is_dir() and p.name.split("-")[-1].isdigit()
        ),
        reverse=True,
    )
    complete = []
    for step, checkpoint in checkpoints:
        try:
            json.loads((checkpoint / "trainer_state.json").read_text())
        except (OSError, ValueError):
            print(f"removing incomplete checkpoint {checkpoint} (the run was stopped while writing it)")
            shutil.rmtree(checkpoint)
            continue
        complete.append((step, checkpoint))
    return complete


def train_or_restore(trainer, checkpoint: str | None) -> None:
    """Train from `checkpoint` (or from scratch), or, when that checkpoint already reached max_steps, only
    load its weights and state: the Trainer would otherwise run one step past max_steps on resume, so
    re-running a finished run would export a different model."""
    from transformers import TrainerState

    if checkpoint is not None:
        state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
        if 0 < trainer.args.max_steps <= state.global_step:
            trainer._load_from_checkpoint(checkpoint)
            trainer.state = state
            return
    trainer.train(resume_from_checkpoint=checkpoint)


def save_final(trainer, path: str) -> None:
    """Save the model the run ended with. After training, through the Trainer, which gathers what DeepSpeed
    partitioned; after a restore-only resume (`train_or_restore` of a finished run) DeepSpeed never wrapped
    the model, so the Trainer's DeepSpeed path has no engine to ask, and the model saves itself."""
    if trainer.is_deepspeed_enabled and trainer.model_wrapped is trainer.model:
        if trainer.is_world_process_zero():
            trainer.model.save_pretrained(path)
    else:
        trainer.save_model(path)
