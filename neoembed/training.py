"""What every neoembed training job shares on top of the transformers Trainer.

A run directory records its recipe and only resumes with the same one; a resume starts from the newest
checkpoint the Trainer finished writing; every log line goes to `metrics.jsonl`, and a loss that stops being
finite stops the run before anything is saved after it. `neoembed pretrain` and `neoembed contrastive` use all
three.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from pydantic import BaseModel

from neoembed.errors import RunError
from neoembed.recipes import RecipeError

# Fields of a recipe's `train` section that may change between a run and its resume without changing what
# is trained.
RESUMABLE_CHANGES = {"log_steps", "eval_steps", "save_steps", "keep_checkpoints", "num_workers", "threads"}


class TrainingDiverged(RunError):
    """The loss became NaN or infinite; the message names the last good checkpoint."""


class GuardedLogging:
    """Trainer mixin (list it before the Trainer class): a non-finite training loss raises TrainingDiverged,
    and every log is appended to <output_dir>/metrics.jsonl by the main process.

    A NaN is caught when it is logged, so a recipe's save steps must be log steps too: then a diverged model is
    never written as a checkpoint.
    """

    def log(self, logs: dict, *args, **kwargs) -> None:
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(loss):
            last = last_complete_checkpoint(Path(self.args.output_dir))
            raise TrainingDiverged(
                f"the training loss became {loss} at step {self.state.global_step}; nothing was saved after "
                f"it. Last good checkpoint: {last or 'none yet'}. Lower optim.lr or raise optim.warmup_steps."
            )
        super().log(logs, *args, **kwargs)
        if self.is_world_process_zero():
            with (Path(self.args.output_dir) / "metrics.jsonl").open("a", encoding="utf-8") as out:
                out.write(json.dumps({"step": self.state.global_step, **logs}) + "\n")


def check_resume_compatible(settings: BaseModel, output_dir: Path) -> None:
    """A run may only resume with the same recipe (apart from logging/saving cadence)."""
    recorded = output_dir / "recipe.json"
    current = settings.model_dump(mode="json")
    if recorded.exists():
        previous = json.loads(recorded.read_text())
        differences = [
            f"{section}.{field}"
            for section, values in current.items()
            for field, value in values.items()
            if not (section == "train" and field in RESUMABLE_CHANGES)
            and previous.get(section, {}).get(field) != value
        ]
        if differences:
            raise RecipeError(
                f"{output_dir} holds a run with a different recipe (fields {', '.join(differences)}); "
                "use another train.output_dir or the same recipe"
            )
    else:
        output_dir.mkdir(parents=True, exist_ok=True)
        recorded.write_text(json.dumps(current, indent=2))


def last_complete_checkpoint(output_dir: Path) -> str | None:
    """The newest checkpoint the Trainer finished writing, removing any a kill left half-written.

    The Trainer writes trainer_state.json last, so a checkpoint whose state file parses is complete;
    transformers' own `get_last_checkpoint` would pick a half-written newer folder and fail to resume.
    """
    if not output_dir.exists():
        return None
    checkpoints = sorted(
        (p for p in output_dir.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
        reverse=True,
    )
    for checkpoint in checkpoints:
        try:
            json.loads((checkpoint / "trainer_state.json").read_text())
        except (OSError, ValueError):
            print(f"removing incomplete checkpoint {checkpoint} (the run was stopped while writing it)")
            shutil.rmtree(checkpoint)
            continue
        return str(checkpoint)
    return None


def release_process_group() -> None:
    """Tear down the process group the Trainer started under torchrun, once every rank is done.

    Left to interpreter exit, gloo's threads can outlive a rank whose peer has already gone, and that rank
    aborts ("terminate called without an active exception") after a successful run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
