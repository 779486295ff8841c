"""InfoNCE over cosine similarity with in-batch and hard negatives, cross-rank gathering and GradCache.

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

A distillation term (`neoembed.contrastive.distill`) can be added to InfoNCE, each with its weight: it scores
the same (gathered, duplicate-masked) batch, so it composes with GradCache, gathering and Matryoshka as
InfoNCE does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from sentence_transformers.base.losses.gradcache import CachedLossMixin
from sentence_transformers.util import all_gather, all_gather_with_grad, get_rank, get_world_size
from torch import Tensor, nn


class InfoNCELoss(CachedLossMixin, nn.Module):
    """-log softmax of the positive among the distinct candidate texts of the (gathered) batch.

    Columns: query, positive, then any number of hard-negative columns (all scored against every query).
    `symmetric` adds the document-to-query term (each positive against every query), averaged with the
    query-to-document term. `mini_batch_size` turns on GradCache: embeddings are computed without a graph in
    chunks, the loss is taken on the cached embeddings, and each chunk is re-embedded with gradients; the
    gradients equal the uncached loss's. `gather` concatenates the embeddings of every rank (with gradients)
    before scoring, so 2 ranks x batch b score like 1 rank x batch 2b.

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
        - `ScoreDistillation` and `EmbeddingDistillation` (`distill`) add a teacher's term on the same batch.
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
        distill: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if weight == 0 and distill is None:
            raise ValueError("an InfoNCE weight of 0 needs a distillation term")
        self.model = model
        self.scale = 1.0 / temperature
        self.symmetric = symmetric
        self.gather = gather
        self.cached = mini_batch_size is not None
        self.mini_batch_size = mini_batch_size or 0
        # CachedLossMixin says True for the class; MatryoshkaLoss reads it to pick how it wraps this loss.
        self.uses_gradient_cache = self.cached
        self.weight = weight
        self.distill = distill  # called as distill(batch, reps, keys); carries its own `weight`
        self.components: dict[str, Tensor] = {}  # weighted terms summed since `pop_components`

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Sequence[Tensor]) -> Tensor:
        """`labels`: per column, the `text_key`s of its texts (int64, one per row)."""
        features, keys = list(sentence_features), list(labels if labels is not None else ())
        if len(features) < 2:
            raise ValueError(f"InfoNCE needs query and positive columns, got {len(features)} column(s)")
        if len(keys) != len(features):
            raise ValueError(
                f"InfoNCELoss needs the text keys of each of its {len(features)} columns as labels, got "
                f"{len(keys)}: train with neoembed.contrastive.train.ContrastiveTrainer"
            )
        if self.cached:
            return self.forward_cached(features, keys)
        reps = [[self.model(f)["sentence_embedding"]] for f in features]
        return self.calculate_loss(reps, keys)

    def _gather(self, tensor: Tensor, with_grad: bool) -> Tensor:
        if not self.gather or get_world_size() == 1:
            return tensor
        return all_gather_with_grad(tensor) if with_grad else all_gather(tensor)

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: list[Tensor] | None = None, *, with_backward: bool = False
    ) -> Tensor:
        keys = labels
        columns = [torch.cat(r) for r in reps]
        batch = self.in_batch(columns, keys)
        terms = {}
        if self.weight:
            terms["infonce"] = self.weight * self.infonce(batch)
        if self.distill is not None:
            terms["distill"] = self.distill.weight * self.distill(batch, columns, keys)
            for name, value in terms.items():
                self.components[name] = self.components.get(name, 0.0) + value.detach()
        loss = sum(terms.values())
        if with_backward:
            loss.backward()
            loss = loss.detach()
        return loss

    def in_batch(self, columns: list[Tensor], keys: list[Tensor]) -> InBatch:
        """This rank's queries and every rank's documents, normalised, with their keys."""
        local_queries = columns[0]
        batch = local_queries.shape[0]
        queries = F.normalize(self._gather(local_queries, True), dim=-1)
        docs = F.normalize(torch.cat([self._gather(c, True) for c in columns[1:]]), dim=-1)
        offset = get_rank() * batch if queries.shape[0] > batch else 0
        return InBatch(
            queries=queries,
            docs=docs,
            query_keys=self._gather(keys[0], False),
            doc_keys=torch.cat([self._gather(k, False) for k in keys[1:]]),
            rows=torch.arange(offset, offset + batch, device=queries.device),
        )

    def infonce(self, batch: InBatch) -> Tensor:
        rows = batch.rows
        loss = F.cross_entropy(batch.scores(self.scale).masked_fill(batch.duplicates(), -torch.inf), rows)
        if self.symmetric:
            scores = self.scale * batch.docs[rows] @ batch.queries.T  # each positive against every query
            masked = scores.masked_fill(
                _duplicates(batch.query_keys, batch.query_keys[rows], rows), -torch.inf
            )
            loss = (loss + F.cross_entropy(masked, rows)) / 2
        return loss

    def pop_components(self) -> dict[str, Tensor]:
        """The weighted InfoNCE and distillation terms since the last call (summed over Matryoshka
        dimensions, unweighted by them), for the training log; empty without distillation."""
        components, self.components = self.components, {}
        return components

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "temperature": 1.0 / self.scale,
            "symmetric": self.symmetric,
            "gather": self.gather,
            "mini_batch_size": self.mini_batch_size or None,
            **({"weight": self.weight, "distill": self.distill.get_config_dict()} if self.distill else {}),
        }


@dataclass
class InBatch:
    """A batch as InfoNCE scores it: this rank's queries against the documents of every rank's batch."""

    queries: Tensor  # (world batch, dim), L2-normalised
    docs: Tensor  # (world batch x document columns, dim), L2-normalised; docs[rows[i]] is query i's positive
    query_keys: Tensor  # text keys of `queries`
    doc_keys: Tensor  # text keys of `docs`
    rows: Tensor  # this rank's rows of the gathered batch

    def scores(self, scale: float) -> Tensor:
        """(batch, documents) cosine x scale of this rank's queries against every document."""
        return scale * self.queries[self.rows] @ self.docs.T

    def duplicates(self) -> Tensor:
        """The (batch, documents) candidates that do not count: repeats of a text (see `_duplicates`)."""
        return _duplicates(self.doc_keys, self.doc_keys[self.rows], self.rows)


def _duplicates(candidate_keys: Tensor, target_keys: Tensor, targets: Tensor) -> Tensor:
    """(rows, candidates) mask of candidates that repeat a text: copies of the row's target (not the target
    itself) and every later copy of any text already seen at a lower candidate index."""
    repeated = ~first_occurrences(candidate_keys)  # this text was seen at an earlier column
    copies_of_target = candidate_keys[None, :] == target_keys[:, None]
    mask = copies_of_target | repeated[None, :]
    mask[torch.arange(len(targets), device=mask.device), targets] = False
    return mask


def first_occurrences(keys: Tensor) -> Tensor:
    """Boolean mask of the positions holding the first occurrence of their key."""
    positions = torch.arange(keys.numel(), device=keys.device)
    unique, inverse = torch.unique(keys, return_inverse=True)
    first = torch.full_like(unique, keys.numel()).scatter_reduce(0, inverse, positions, "amin")
    return first[inverse] == positions


def with_matryoshka(
    model, loss: InfoNCELoss, dims: list[int], weights: list[float] | None = None
) -> nn.Module:
    """`loss` summed (weighted) over the embeddings truncated to each of `dims` and re-normalised.

    sentence-transformers' MatryoshkaLoss fits as it is: without caching it truncates the model's output per
    dimension (one forward pass), and with GradCache it wraps `calculate_loss`, which receives the truncated
    cached embeddings and gathers them across ranks itself; both paths are tested against each other and
    against 2 ranks.
    """
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss

    return MatryoshkaLoss(model, loss, dims, weights)
