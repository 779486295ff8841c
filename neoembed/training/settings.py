"""The training vocabulary every trainer speaks: `optim.*` and `train.*`, written once.

`neoembed pretrain`, `neoembed contrastive` and `neoembed glue` subclass these sections, changing defaults and
adding their own fields, so a field means the same in every recipe (`optim.eps`, `train.precision`, ...) and the
rules that hold between fields are checked in one place.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from neoembed.compilation import CompileSetting
from neoembed.recipes import PackagedFile, StrictSettings

TrainingPrecision = Literal["auto", "fp32", "bf16"]


class OptimSettings(StrictSettings):
    """AdamW, gradient clipping and linear warmup (the schedule after the warmup is each job's)."""

    lr: float = Field(default=1e-4, gt=0.0)
    """Peak learning rate."""
    weight_decay: float = Field(default=0.01, ge=0.0)
    """AdamW's decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW's beta1, beta2."""
    eps: float = Field(default=1e-8, gt=0.0)
    """AdamW's epsilon."""
    max_grad_norm: float = Field(default=1.0, gt=0.0)
    """Gradient clipping norm."""
    warmup_steps: float = Field(default=2000, ge=0.0)
    """Linear warmup: optimizer steps, or below 1 a fraction of the run's steps (as the Trainer reads it)."""


class RunSettings(StrictSettings):
    """How any training run executes: seed, precision, logging, threads, compilation, the launcher's engine."""

    seed: int = 0
    """Seed of the initial weights, the data order and dropout."""
    precision: TrainingPrecision = "auto"
    """auto: bf16 autocast over fp32 weights where bf16 has hardware (CUDA; CPUs with AVX512-BF16/AMX where it
    measured faster than fp32)."""
    grad_accum: int = Field(default=1, gt=0)
    """Micro-batches per optimizer step."""
    log_steps: int = Field(default=10, gt=0)
    """Log loss, learning rate and throughput every N steps (to metrics.jsonl)."""
    compile: CompileSetting = "auto"
    """torch.compile the encoder (NeoBERT: each block's work around attention; any other whole, with dynamic
    shapes). auto: on CUDA, where it pays; off on CPU (`compilation.compile_wanted` says why); true/false force it."""
    threads: int | None = Field(default=None, gt=0)
    """torch CPU threads (default: torch's)."""
    num_workers: int = Field(default=0, ge=0)
    """DataLoader worker processes."""
    deepspeed: PackagedFile | None = None
    """A DeepSpeed JSON config (e.g. deepspeed-zero2.json, packaged); needs neoembed[deepspeed]."""


class TrainSettings(RunSettings):
    """A run measured in optimizer steps that checkpoints and resumes: pretraining, contrastive fine-tuning."""

    output_dir: str = "runs/train"
    """Checkpoints, metrics.jsonl, the recorded recipe and the final model."""
    max_steps: int = Field(default=1000, gt=0)
    """Optimizer steps."""
    eval_steps: int = Field(default=100, gt=0)
    """Score the held-out data every N steps."""
    save_steps: int = Field(default=500, gt=0)
    """Checkpoint every N steps (a multiple of log_steps)."""
    keep_checkpoints: int = Field(default=2, gt=0)
    """Newest checkpoints kept."""
    elastic: bool = False
    """Let a resumed run go on with another number of ranks, keeping its global batch (launch.json)."""

    @model_validator(mode="after")
    def _saves_are_logged(self):
        # A NaN loss is caught when it is logged; every save step must also be a log step, so a diverged
        # model is never written as a checkpoint.
        if self.save_steps % self.log_steps:
            raise ValueError(
                f"save_steps ({self.save_steps}) must be a multiple of log_steps ({self.log_steps})"
            )
        return self
