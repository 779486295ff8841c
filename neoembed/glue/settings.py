"""The fine-tuning protocol as typed settings, read from a YAML recipe (recipes/glue.yaml is the paper's).

The defaults here are the paper's protocol, so a run without a recipe follows it; a recipe may set any
field, and unknown or ill-typed fields are errors that name the field.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator

from neoembed.glue.tasks import PAPER_TASKS, GlueError, get_task
from neoembed.recipes import RecipeError, StrictSettings, load_recipe
from neoembed.training import OptimSettings, RunSettings, TrainingPrecision

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]


@dataclass(frozen=True)
class Hyperparameters:
    """One point of the grid."""

    batch_size: int
    learning_rate: float
    weight_decay: float

    @property
    def slug(self) -> str:
        return f"bs{self.batch_size}-lr{self.learning_rate:g}-wd{self.weight_decay:g}"


class Grid(StrictSettings):
    """The paper's hyperparameter grid: every combination is fine-tuned, the best dev score is kept."""

    batch_size: list[PositiveInt] = [4, 8, 16, 32]
    """Batch sizes searched with --grid."""
    lr: list[PositiveFloat] = [5e-6, 6e-6, 1e-5, 2e-5, 3e-5]
    """Learning rates searched with --grid."""
    weight_decay: list[NonNegativeFloat] = [1e-2, 1e-5]
    """Weight decays searched with --grid."""


class Transfer(StrictSettings):
    """Small tasks start from the best MNLI checkpoint (the backbone and dense layer; a new classifier)."""

    enabled: bool = True
    """Start the small tasks from the best MNLI run."""
    tasks: list[str] = ["rte", "mrpc", "stsb"]
    """The tasks that start from the MNLI run."""

    @field_validator("tasks")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        return [_task_name(n) for n in names]


def _task_name(name: str) -> str:
    try:
        return get_task(name).name
    except GlueError as err:
        raise ValueError(str(err)) from None


class GlueOptim(OptimSettings):
    """The paper's: AdamW (0.9, 0.95), linear warmup over 6% of the steps, then linear decay to 0."""

    lr: float = Field(default=2e-5, gt=0.0)
    """Learning rate without --grid."""
    weight_decay: float = Field(default=1e-2, ge=0.0)
    """Weight decay without --grid."""
    warmup_steps: float = Field(default=0.06, ge=0.0)
    """Linear warmup: optimizer steps, or below 1 a fraction of the run's steps."""


class GlueTrain(RunSettings):
    """Epochs with early stopping on the dev score, one run per grid point."""

    precision: TrainingPrecision = "fp32"
    """auto: bf16 autocast over fp32 weights where bf16 has hardware."""
    log_steps: int = Field(default=50, gt=0)
    """Log loss, learning rate and throughput every N steps (to metrics.jsonl)."""
    batch_size: PositiveInt = 32
    """Batch size without --grid."""
    eval_batch_size: PositiveInt = 64
    """Batch size of the dev-set evaluation."""
    max_epochs: PositiveFloat = 10
    """Max epochs (early stopping may end sooner)."""
    early_stopping_patience: PositiveInt = 2
    """Evaluations without improvement before stopping (unverified in the paper)."""
    eval_steps: PositiveInt | None = None
    """Evaluate (and early-stop) every N steps (default: once per epoch)."""


class GlueSettings(StrictSettings):
    tasks: list[str] = list(PAPER_TASKS)
    """What `--task all` runs."""
    grid: Grid = Grid()
    transfer: Transfer = Transfer()
    max_length: PositiveInt = 128
    """Max tokens per example, a sentence or a pair (unverified in the paper)."""
    max_train_samples: PositiveInt | None = None
    """Train on a seeded sample of N rows (for quick runs)."""
    max_eval_samples: PositiveInt | None = None
    """Evaluate on a seeded sample of N rows."""
    optim: GlueOptim = GlueOptim()
    train: GlueTrain = GlueTrain()

    @field_validator("tasks")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        return [_task_name(n) for n in names]

    def points(self, grid: bool) -> list[Hyperparameters]:
        """The grid's combinations, or the single configured point."""
        if not grid:
            return [Hyperparameters(self.train.batch_size, self.optim.lr, self.optim.weight_decay)]
        g = self.grid
        return [
            Hyperparameters(b, lr, wd) for b, lr, wd in itertools.product(g.batch_size, g.lr, g.weight_decay)
        ]

    def protocol(self) -> dict[str, Any]:
        """The fields a finished run's result depends on (besides its grid point): results produced under
        another protocol are not mixed into one table."""
        protocol = self.model_dump(mode="json", exclude={"tasks", "grid", "transfer"})
        for section, fields in PER_POINT_OR_CADENCE.items():
            for field in fields:
                protocol[section].pop(field)
        return protocol


# Fields that do not change a finished run's result: the grid point's own values, logging, and how the
# process runs.
PER_POINT_OR_CADENCE = {
    "optim": ("lr", "weight_decay"),
    "train": ("batch_size", "log_steps", "threads", "num_workers", "compile"),
}


def load_settings(recipe: Path | None = None, overrides: dict | None = None) -> GlueSettings:
    """The protocol from `recipe` (None: the defaults above, the paper's) with `{"dotted.field": value}`
    overrides; errors name the recipe and the field."""
    try:
        return load_recipe(recipe, GlueSettings, overrides)
    except RecipeError as err:
        raise GlueError(str(err)) from None
