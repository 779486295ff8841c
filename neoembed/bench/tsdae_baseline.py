"""The plain sentence-transformers baseline of `neoembed bench adapt`: TSDAE (Wang et al. 2021), the library's
answer to "documents and no labels", as its documentation writes it: `DenoisingAutoEncoderLoss` with the
decoder tied to the encoder, inputs with 60% of their words deleted, learning rate 3e-5, batch 8, constant
schedule. The deletion is done here on whitespace words: the library's `DenoisingAutoEncoderDataset` tokenises
with nltk's punkt model, which is downloaded at run time (not possible offline) and not a dependency.
"""

from __future__ import annotations

import random
from pathlib import Path

from neoembed.bench.st_baseline import Budget, Trained

LEARNING_RATE = 3e-5
BATCH_SIZE = 8
DELETE_RATIO = 0.6


def delete_words(text: str, rng: random.Random) -> str:
    """`text` with each word deleted with probability DELETE_RATIO (one word kept at least)."""
    words = text.split()
    kept = [word for word in words if rng.random() >= DELETE_RATIO]
    return " ".join(kept) if kept else rng.choice(words)


def train(
    base: str, documents: list[str], out: Path, export: Path, budget: Budget, max_length: int
) -> Trained:
    """TSDAE on `documents` within `budget` (steps, or minutes of steps), saved to `export`; returns the steps
    taken, the trainer's runtime in minutes and `export`."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

    from neoembed.embedder import load_embedder
    from neoembed.run_files import METRICS_FILE
    from neoembed.training import MetricsLog, TimeBudget, precision_arguments

    model = load_embedder(base)
    model.model_card_data.local_files_only = True
    declared, model.max_seq_length = model.max_seq_length, max_length
    rng = random.Random(budget.seed)
    dataset = Dataset.from_dict({"damaged": [delete_words(d, rng) for d in documents], "original": documents})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out),
        learning_rate=LEARNING_RATE,
        per_device_train_batch_size=BATCH_SIZE,
        lr_scheduler_type="constant",
        seed=budget.seed,
        max_steps=budget.steps or -1,  # -1: the library's epochs, cut by the time budget
        save_strategy="no",
        **precision_arguments(budget.precision),
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        loss=DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True),
        callbacks=[MetricsLog(out / METRICS_FILE)] + ([TimeBudget(budget.minutes)] if budget.minutes else []),
    )
    result = trainer.train()
    model.max_seq_length = declared
    model.save(str(export))
    return Trained(result.global_step, result.metrics["train_runtime"] / 60, str(export))
