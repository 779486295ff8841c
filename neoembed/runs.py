"""What every neoembed run shares: its files, its Trainer logging and its common TrainingArguments.

Files: every JSON, text or parquet file a run or build writes goes through the atomic writers (a killed
process leaves the old file or the new one, never half of one), and every JSONL log is appended by
`append_jsonl`.

Trainer runs (`neoembed pretrain`, `neoembed contrastive`, the GLUE fine-tunes) log through `MetricsLog`, a
`TrainerCallback` that appends every log line to a JSONL file and stops the run when the training loss stops
being finite, before anything is saved after it. They take the TrainingArguments fields they share from
`trainer_arguments`. A pretraining or contrastive run directory also records its recipe and only resumes with
the same one, resumes from the newest checkpoint the Trainer finished writing, and tears down its torchrun
process group when it ends.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from transformers import TrainerCallback, TrainerState, TrainingArguments

from neoembed.errors import RunError
from neoembed.precision import resolve_precision
from neoembed.recipes import RecipeError

METRICS_FILE = "metrics.jsonl"

# What may change between a run and its resume without changing what is trained: section -> its fields that
# may (None: the whole section). `eval` says which held-out sets are scored and how; nothing trains on them.
RESUMABLE_CHANGES: dict[str, set[str] | None] = {
    "train": {
        "log_steps",
        "eval_steps",
        "save_steps",
        "keep_checkpoints",
        "num_workers",
        "threads",
        "compile",
    },
    "eval": None,
    "export": None,  # applied after training
}


# Files --------------------------------------------------------------------------------------------------


def temp_path(path: Path) -> Path:
    """A sibling name unique to this writer: ranks on other machines may write the same file at once."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}")


def write_text(path: Path, text: str) -> None:
    """Write `text` atomically (through a sibling temporary file and a rename)."""
    path = Path(path)
    tmp = temp_path(path)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data: dict) -> None:
    """Write `data` atomically as indented JSON with sorted keys (the same data gives the same bytes)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_parquet(path: Path, table, row_group_size: int = 10_000) -> None:
    """Write a pyarrow Table atomically as zstd-compressed parquet."""
    import pyarrow.parquet as pq

    path = Path(path)
    tmp = temp_path(path)
    pq.write_table(table, tmp, compression="zstd", row_group_size=row_group_size)
    os.replace(tmp, path)


def append_jsonl(path: Path, record: dict) -> None:
    """Append `record` as one JSON line: what every neoembed log file (metrics, build and index logs) holds."""
    with Path(path).open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


# Trainer logging ----------------------------------------------------------------------------------------


class TrainingDiverged(RunError):
    """The loss became NaN or infinite; the message names the last good checkpoint."""


class MetricsLog(TrainerCallback):
    """Appends every Trainer log (`{"step": ..., **logs}`) to `path` from the main process, and raises
    TrainingDiverged on every rank when a logged training loss is not finite.

    The Trainer saves after it logs, so the stop comes before a diverged model is written, provided the save
    steps are log steps too and `logging_nan_inf_filter` is off (as `trainer_arguments` sets it); with the
    filter on, the Trainer replaces a NaN by the running mean and the run goes on.
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


def precision_arguments(precision: str) -> dict:
    """The TrainingArguments device and mixed-precision flags for a recipe's `precision` ("auto", "fp32",
    "bf16"), as the precision resolver answers it. The one place a precision choice enters the
    TrainingArguments."""
    resolved = resolve_precision(precision)
    return {"bf16": resolved.train_bf16, "fp16": resolved.train_fp16, "use_cpu": resolved.device == "cpu"}


def trainer_arguments(
    *,
    output_dir: str | Path,
    seed: int,
    precision: str,
    log_steps: int,
    save_steps: int | None,
    keep_checkpoints: int | None,
    num_workers: int = 0,
    args_class: type[TrainingArguments] = TrainingArguments,
    **specific,
) -> TrainingArguments:
    """`args_class` with the fields every neoembed trainer sets the same way, plus the trainer's `specific`
    ones (which may override a shared one). Checkpoints every `save_steps` steps, or every epoch when it is
    None, keeping the newest `keep_checkpoints`."""
    shared = dict(
        output_dir=str(output_dir),
        seed=seed,
        **precision_arguments(precision),
        logging_steps=log_steps,
        logging_nan_inf_filter=False,  # a NaN must reach MetricsLog and stop the run
        save_strategy="steps" if save_steps else "epoch",
        save_steps=save_steps,
        save_total_limit=keep_checkpoints,
        dataloader_num_workers=num_workers,
        ddp_find_unused_parameters=False,  # every parameter gets a gradient: skip DDP's graph walk
        report_to=[],
    )
    return args_class(**(shared | specific))


# Run directories ----------------------------------------------------------------------------------------


def check_resume_compatible(settings: BaseModel, output_dir: Path) -> None:
    """A run may only resume with the same recipe (apart from RESUMABLE_CHANGES: logging/saving cadence, the
    held-out evaluation and the export)."""
    recorded = output_dir / "recipe.json"
    current = settings.model_dump(mode="json")
    if recorded.exists():
        previous = json.loads(recorded.read_text())
        differences = [
            f"{section}.{field}"
            for section, values in current.items()
            for field, value in values.items()
            if not _resumable(section, field)
            and not _same_as_recorded(settings, previous, section, field, value)
        ]
        if differences:
            raise RecipeError(
                f"{output_dir} holds a run with a different recipe (fields {', '.join(differences)}); "
                "use another train.output_dir or the same recipe"
            )
    else:
        output_dir.mkdir(parents=True, exist_ok=True)
        recorded.write_text(json.dumps(current, indent=2))


def _resumable(section: str, field: str) -> bool:
    fields = RESUMABLE_CHANGES.get(section, set())
    return fields is None or field in fields


def _same_as_recorded(settings: BaseModel, previous: dict, section: str, field: str, value) -> bool:
    """Whether a field's value matches the recorded run's. A field the recorded run predates (added to the
    settings since) matches when this run leaves it at its default, so runs from older versions resume."""
    recorded = previous.get(section, {})
    if field in recorded:
        return recorded[field] == value
    info = type(getattr(settings, section)).model_fields[field]
    return not info.is_required() and to_jsonable_python(info.get_default(call_default_factory=True)) == value


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


def train_or_restore(trainer, checkpoint: str | None) -> None:
    """Train from `checkpoint` (or from scratch), or, when that checkpoint already reached max_steps, only
    load its weights and state: the Trainer would otherwise run one step past max_steps on resume, so
    re-running a finished run would export a different model."""
    if checkpoint is not None:
        state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
        if 0 < trainer.args.max_steps <= state.global_step:
            trainer._load_from_checkpoint(checkpoint)
            trainer.state = state
            return
    trainer.train(resume_from_checkpoint=checkpoint)


def release_process_group() -> None:
    """Tear down the process group the Trainer started under torchrun, once every rank is done.

    Left to interpreter exit, gloo's threads can outlive a rank whose peer has already gone, and that rank
    aborts ("terminate called without an active exception") after a successful run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
