"""How many ranks a run trains on, recorded beside its checkpoints, and what a resume on another number does.

A run directory records its launch in launch.json: the world size, each rank's batch and the accumulation,
so its global batch. A resume on the same number of ranks goes on as recorded. A resume on another number
(a node lost, or added) is refused unless `train.elastic` allows it; then the global batch is kept and the
job's own rule (`Resize`) decides how each rank makes up its share: more accumulation for MLM pretraining,
a larger per-rank batch with GradCache mini-batches for contrastive training (whose in-batch negatives span
the whole batch, which accumulation would cut). The change goes into the run's metrics.jsonl.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from neoembed.recipes import RecipeError
from neoembed.run_files import METRICS_FILE, append_jsonl, write_json

LAUNCH_FILE = "launch.json"


@dataclass(frozen=True)
class Launch:
    world_size: int
    batch_size: int  # per rank per micro-step (rows, sequences or pairs: the job's unit)
    grad_accum: int
    mini_batch_size: int | None = None  # GradCache chunks of a rank's batch (contrastive); None: none

    @property
    def global_batch(self) -> int:
        return self.world_size * self.batch_size * self.grad_accum


# A job's rule for keeping `recorded.global_batch` on `world_size` ranks; it raises RecipeError when it cannot.
Resize = Callable[[Launch, int], Launch]


def world_size() -> int:
    """Ranks of this launch (torchrun and deepspeed set WORLD_SIZE; a plain process is one)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def more_accumulation(recorded: Launch, world: int) -> Launch:
    """Each rank keeps its batch and accumulates more (or fewer) micro-batches per step."""
    share, rest = divmod(recorded.world_size * recorded.grad_accum, world)
    if rest:
        raise RecipeError(
            f"the run's global batch of {recorded.global_batch} ({recorded.world_size} ranks x "
            f"{recorded.batch_size} x {recorded.grad_accum} accumulated) does not divide among {world} ranks"
        )
    return replace(recorded, world_size=world, grad_accum=share)


def larger_batches(recorded: Launch, world: int) -> Launch:
    """Each rank takes a proportionally larger batch, computed in GradCache chunks no larger than a rank's
    batch was, so the loss and its in-batch negatives stay those of the recorded global batch."""
    rows, rest = divmod(recorded.world_size * recorded.batch_size, world)
    if rest:
        raise RecipeError(
            f"the run's global batch of {recorded.global_batch} ({recorded.world_size} ranks x "
            f"{recorded.batch_size}) does not divide among {world} ranks"
        )
    chunk = min(recorded.mini_batch_size or recorded.batch_size, recorded.batch_size)
    return replace(recorded, world_size=world, batch_size=rows, mini_batch_size=chunk)


def plan_launch(
    output_dir: Path, planned: Launch, *, resuming: bool, elastic: bool, zero: bool, resize: Resize
) -> Launch:
    """The launch to train with: `planned` (from the settings and this launch's world size) on a first start
    or on the recorded number of ranks; on another number of ranks, the recorded launch resized by the job's
    rule when `elastic` allows it. Call it on every rank before anything trains; the first rank records."""
    path = Path(output_dir) / LAUNCH_FILE
    recorded = Launch(**json.loads(path.read_text())) if resuming and path.is_file() else None
    if recorded is None or recorded.world_size == planned.world_size:
        launch = recorded or planned
    elif not elastic:
        raise RecipeError(
            f"{output_dir} was trained on {recorded.world_size} ranks and this launch has "
            f"{planned.world_size}; relaunch on {recorded.world_size}, or set train.elastic true to go on "
            "with the same global batch"
        )
    elif zero:
        raise RecipeError(
            f"{output_dir} holds DeepSpeed ZeRO checkpoints, partitioned over {recorded.world_size} ranks; "
            f"relaunch on {recorded.world_size} ranks (or convert the checkpoint with DeepSpeed's "
            "ds_to_universal.py first)"
        )
    else:
        launch = resize(recorded, planned.world_size)
        if int(os.environ.get("RANK", "0")) == 0:
            append_jsonl(
                Path(output_dir) / METRICS_FILE,
                {"event": "elastic_resume", "from": asdict(recorded), "to": asdict(launch)},
            )
            print(
                f"elastic resume: {asdict(recorded)} -> {asdict(launch)} (global batch {launch.global_batch})"
            )
    if int(os.environ.get("RANK", "0")) == 0:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        write_json(path, asdict(launch))
    return launch
