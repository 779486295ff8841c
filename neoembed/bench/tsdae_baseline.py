"""The plain sentence-transformers baseline of `neoembed bench adapt`: TSDAE (Wang et al. 2021), the library's
answer to "documents and no labels", as its documentation writes it: `DenoisingAutoEncoderLoss` with the
decoder tied to the encoder, inputs with 60% of their words deleted, learning rate 3e-5, batch 8, constant
schedule. The deletion is done here on whitespace words: the library's `DenoisingAutoEncoderDataset` tokenises
with nltk's punkt model, which is downloaded at run time (not possible offline) and not a dependency.
"""

from __future__ import annotations

import random
from pathlib import Path

from neoembed.bench.st_baseline import Budget, Trained, fit

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
    """TSDAE on `documents` within `budget` (`st_baseline.fit`)."""
    from datasets import Dataset
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

    rng = random.Random(budget.seed)
    dataset = Dataset.from_dict({"damaged": [delete_words(d, rng) for d in documents], "original": documents})
    return fit(
        base,
        dataset,
        lambda model: DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True),
        out,
        export,
        budget,
        max_length,
        learning_rate=LEARNING_RATE,
        per_device_train_batch_size=BATCH_SIZE,
        lr_scheduler_type="constant",
        save_strategy="no",
    )
