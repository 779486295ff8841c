"""The plain sentence-transformers baselines of the seeded benches, as a user of the library would write them.

`bench contrastive`: the library's trainer and MultipleNegativesRankingLoss on a build's (query, positive)
pairs. Only the learning rate (5e-5), batch size (64) and warmup (10% of the schedule) are set, besides the
bench's budget (steps or minutes), seed, precision and the recipe's training length (`model.max_length`: the
same tokens a step for both, where the library's 256 made a step on the manual pages 4x dearer); everything else
is the library's default (linear decay, its batch sampler), and the saved model declares its own max length
again. The mined negatives of the records are left out: plain in-batch negatives. The bench's time budget and
metrics file are callbacks, which do not change what a step does.

`bench adapt`: TSDAE (Wang et al. 2021), the library's answer to "documents and no labels", as its
documentation writes it: `DenoisingAutoEncoderLoss` with the decoder tied to the encoder, inputs with 60% of
their words deleted, learning rate 3e-5, batch 8, constant schedule. The deletion is done here on whitespace
words: the library's `DenoisingAutoEncoderDataset` tokenises with nltk's punkt model, which is downloaded at
run time (not possible offline) and not a dependency.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neoembed.contrastive import SetScores

if TYPE_CHECKING:
    from transformers import TrainerCallback

LEARNING_RATE = 5e-5
BATCH_SIZE = 64
WARMUP = 0.1  # transformers 5 reads a warmup_steps below 1 as a fraction of the schedule
TSDAE_LEARNING_RATE = 3e-5
TSDAE_BATCH_SIZE = 8
DELETE_RATIO = 0.6


@dataclass(frozen=True)
class Budget:
    """What one training run of the bench gets, the same for the recipe and the baseline: a number of steps or
    minutes of them (not both), a seed, and a `train.precision`."""

    steps: int | None
    minutes: float | None
    seed: int
    precision: str


@dataclass(frozen=True)
class Trained:
    """What a finished training run of the grid recorded (in its marker), and whether it was reused."""

    steps: int
    train_minutes: float
    export: str
    eval_before: SetScores | None = None  # neoembed's runs: its own held-out scores before and after
    eval_after: SetScores | None = None
    reused: bool = False


def pairs(data: Path, sources: list[str] | None = None):
    """The (query, positive) columns of a finished build's `sources` (None: every source), as one dataset."""
    from datasets import concatenate_datasets

    from neoembed.data import load_records

    return concatenate_datasets(
        [records.select_columns(["query", "positive"]) for records in load_records(data, sources).values()]
    )


def fit(
    base: str,
    dataset,
    make_loss,
    out: Path,
    export: Path | None,
    budget: Budget,
    max_length: int,
    callbacks: Sequence[TrainerCallback] = (),
    **arguments,
) -> Trained:
    """`base` trained with the library's trainer on `dataset` and the loss `make_loss(model)` within `budget`
    (checkpoints and metrics.jsonl in `out`), on inputs cut at `max_length` tokens, saved to `export` (None:
    not saved). `callbacks`: the caller's, beside the metrics log (a bench's step clock); `arguments`: the
    method's own training arguments (learning rate, batch size, schedule)."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from neoembed.embedder import load_embedder
    from neoembed.run_files import METRICS_FILE
    from neoembed.training import MetricsLog, TimeBudget, precision_arguments

    model = load_embedder(base)
    model.model_card_data.local_files_only = True  # the saved model card: no Hub look-ups (offline here)
    declared, model.max_seq_length = model.max_seq_length, max_length
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out),
        seed=budget.seed,
        max_steps=budget.steps or -1,  # -1: the library's epochs (cut by a time budget)
        **precision_arguments(budget.precision),
        **arguments,
    )
    budgets = [TimeBudget(budget.minutes)] if budget.minutes else []
    callbacks = [MetricsLog(out / METRICS_FILE), *callbacks, *budgets]
    trainer = SentenceTransformerTrainer(model, args, dataset, loss=make_loss(model), callbacks=callbacks)
    result = trainer.train()
    model.max_seq_length = declared
    if export is not None:
        model.save(str(export))
    return Trained(result.global_step, result.metrics["train_runtime"] / 60, str(export or ""))


def train(base: str, data: Path, out: Path, export: Path, budget: Budget, max_length: int) -> Trained:
    """MultipleNegativesRankingLoss on the build in `data` (`fit`)."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    arguments: dict[str, Any] = {
        "learning_rate": LEARNING_RATE,
        "per_device_train_batch_size": BATCH_SIZE,
        "warmup_steps": WARMUP,
    }
    return fit(base, pairs(data), MultipleNegativesRankingLoss, out, export, budget, max_length, **arguments)


def delete_words(text: str, rng: random.Random) -> str:
    """`text` with each word deleted with probability DELETE_RATIO (one word kept at least)."""
    words = text.split()
    kept = [word for word in words if rng.random() >= DELETE_RATIO]
    return " ".join(kept) if kept else rng.choice(words)


def train_tsdae(
    base: str, documents: list[str], out: Path, export: Path, budget: Budget, max_length: int
) -> Trained:
    """TSDAE on `documents` within `budget` (`fit`)."""
    from datasets import Dataset
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

    rng = random.Random(budget.seed)
    dataset = Dataset.from_dict({"damaged": [delete_words(d, rng) for d in documents], "original": documents})
    loss = partial(DenoisingAutoEncoderLoss, tie_encoder_decoder=True)
    schedule = dict(lr_scheduler_type="constant", save_strategy="no")  # and no checkpoints
    arguments: dict[str, Any] = dict(
        learning_rate=TSDAE_LEARNING_RATE, per_device_train_batch_size=TSDAE_BATCH_SIZE, **schedule
    )
    return fit(base, dataset, loss, out, export, budget, max_length, **arguments)
