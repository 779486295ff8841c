"""The one job skeleton every trainer fills in: pretraining, contrastive fine-tuning and each GLUE grid point.

`run_job` runs the steps every training job shares, in this order, so they are read once:

1. lock the run directory: one launch writes it at a time (`run_lock`; GLUE's runner also holds a lock of its
   own on the output directory above its grid points' run directories);
2. set up the process: torch threads and the seed, before anything is built (`configure_process`);
3. `job.prepare()`: the job's data, model and Trainer (its arguments from `trainer_arguments`), and the
   checkpoint to resume from (`open_run` records the recipe, or checks a resumed run's against it);
4. train from that checkpoint, or only restore a run that had finished (`train_or_restore`);
5. `job.finish(prepared)`: save, export and report; its return value is the job's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from neoembed.training.checkpoints import train_or_restore
from neoembed.training.process import configure_process
from neoembed.training.run_dir import run_lock
from neoembed.training.settings import RunSettings

R = TypeVar("R", covariant=True)


@dataclass
class Prepared:
    """What `Job.prepare` hands to training: the Trainer, and the checkpoint to resume from (None: start)."""

    trainer: Any
    resume: str | None = None


class Job(Protocol, Generic[R]):
    """A trainer's own steps; `run_job` runs the shared ones around them."""

    def prepare(self) -> Prepared: ...

    def finish(self, prepared: Prepared) -> R: ...


def run_job(job: Job[R], run: RunSettings, output_dir: Path) -> R:
    """Run `job` in `output_dir` under the settings `run` (threads, seed): the steps of the module's docstring."""
    with run_lock(Path(output_dir)):
        configure_process(run)
        prepared = job.prepare()
        train_or_restore(prepared.trainer, prepared.resume)
        return job.finish(prepared)
