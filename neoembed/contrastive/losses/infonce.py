"""`loss.kind: infonce`: InfoNCE over cosine similarity with in-batch and hard negatives, each text once.

Why not sentence-transformers' `MultipleNegativesRankingLoss` / `CachedMultipleNegativesRankingLoss` as they
are: in sentence-transformers 6.2 both count every other column of the batch as a negative, including copies of
the row's own positive (the same document answering two queries, a hard negative that equals another row's
positive, or the padding rows use below), so the model is penalised for ranking a correct text first. This
loss keeps their structure (cosine / temperature, `all_gather_with_grad` across ranks, and the library's
`CachedLossMixin` for GradCache) and adds one rule: every distinct text counts once per row. A candidate that
is the same text as the row's positive is masked out (the positive itself stays), and repeated copies of any
other text are masked after their first occurrence. "The same text" is `data.normalize.text_key`, which the
build stores and the trainer passes as the loss's labels, one int64 tensor of keys per column: 8 bytes a text
to gather across ranks, no text transfer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from neoembed.contrastive.losses.base import ContrastiveLoss, InBatch, duplicates

if TYPE_CHECKING:
    from neoembed.contrastive.settings import ContrastiveSettings, LossSettings


class InfoNCELoss(ContrastiveLoss):
    """-log softmax of the positive among the distinct candidate texts of the (gathered) batch.

    Every query is scored against the positive and hard negatives of every row (and, with `gather`, of every
    rank), as cosine similarity / temperature; copies of a text count once. `symmetric` adds the
    document-to-query term (each positive against every query), averaged with the query-to-document term.

    Settings (the recipe's `loss` section):
        - `temperature` (0.07): the cosine similarities are divided by it; lower is sharper.
        - `infonce_weight` (1.0): the term's weight.
        - `symmetric` (false): add the document-to-query term.
        - `gather` (true): score against the embeddings of every rank, with their gradients: 2 ranks x batch b
          score like 1 rank x batch 2b.
        - `mini_batch_size` (unset): GradCache: embeddings are computed without a graph in chunks of this
          size, the loss is taken on them, and each chunk is re-embedded with gradients; the gradients equal
          the uncached loss's, in the memory of one chunk.

    When to use it: the default, for (query, relevant document) pairs, with or without mined hard negatives;
    the larger the batch, the more negatives. Add a teacher with `loss.kind: distill`.

    Requirements:
        1. (anchor, positive) pairs, optionally with hard negatives; every text's `text_key` as its label.
        2. Batches without repeated texts help (`HomogeneousBatchSampler`), but repeats are masked, not wrong.

    Inputs:
        +------------------------------------------------+------------------------------------------+
        | Texts                                          | Labels                                   |
        +================================================+==========================================+
        | (query, positive) pairs                        | one int64 tensor of text keys per column |
        +------------------------------------------------+------------------------------------------+
        | (query, positive, negative_1, ..., negative_n) | one int64 tensor of text keys per column |
        +------------------------------------------------+------------------------------------------+

    Relations:
        - sentence-transformers' `MultipleNegativesRankingLoss` (`CachedMultipleNegativesRankingLoss` with
          `mini_batch_size`) is the same loss without the duplicate mask.
        - `DistillationLoss` (`loss.kind: distill`) adds a teacher's term on the same batch.
        - `with_matryoshka` sums it over truncated embeddings.

    Example:
        ::

            loss = InfoNCELoss(model, temperature=0.05, mini_batch_size=32)
            trainer = ContrastiveTrainer(model=model, loss=loss, train_dataset=..., text_keys=..., ...)
            trainer.train()  # or `neoembed contrastive --recipe contrastive-cpu`
    """

    def __init__(
        self,
        model,
        temperature: float = 0.07,
        symmetric: bool = False,
        gather: bool = True,
        mini_batch_size: int | None = None,
        weight: float = 1.0,
    ) -> None:
        super().__init__(model, gather=gather, mini_batch_size=mini_batch_size)
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.scale = 1.0 / temperature
        self.symmetric = symmetric
        self.weight = weight

    @classmethod
    def from_recipe(cls, settings: ContrastiveSettings, model, world_size: int) -> InfoNCELoss:
        return cls(model, **infonce_arguments(settings.loss))

    def terms(self, batch: InBatch, columns: list[Tensor], keys: list[Tensor]) -> dict[str, Tensor]:
        return {"infonce": self.weight * self.infonce(batch)} if self.weight else {}

    def infonce(self, batch: InBatch) -> Tensor:
        rows = batch.rows
        loss = F.cross_entropy(batch.scores(self.scale).masked_fill(batch.duplicates(), -torch.inf), rows)
        if self.symmetric:
            scores = self.scale * batch.docs[rows] @ batch.queries.T  # each positive against every query
            masked = scores.masked_fill(
                duplicates(batch.query_keys, batch.query_keys[rows], rows), -torch.inf
            )
            loss = (loss + F.cross_entropy(masked, rows)) / 2
        return loss

    @property
    def config(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "symmetric": self.symmetric,
            "gather": self.gather,
            "mini_batch_size": self.mini_batch_size or None,
            "weight": self.weight,
        }


def infonce_arguments(loss: LossSettings) -> dict[str, Any]:
    """`InfoNCELoss`'s arguments from the recipe's `loss` section."""
    return {
        "temperature": loss.temperature,
        "symmetric": loss.symmetric,
        "gather": loss.gather,
        "mini_batch_size": loss.mini_batch_size,
        "weight": loss.infonce_weight,
    }
