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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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
    """

    def __init__(
        self,
        model,
        temperature: float = 0.07,
        symmetric: bool = False,
        gather: bool = True,
        mini_batch_size: int | None = None,
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.model = model
        self.scale = 1.0 / temperature
        self.symmetric = symmetric
        self.gather = gather
        self.cached = mini_batch_size is not None
        self.mini_batch_size = mini_batch_size or 0
        # CachedLossMixin says True for the class; MatryoshkaLoss reads it to pick how it wraps this loss.
        self.uses_gradient_cache = self.cached

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
        local_queries = torch.cat(reps[0])
        batch = local_queries.shape[0]
        queries = F.normalize(self._gather(local_queries, True), dim=-1)
        docs = F.normalize(torch.cat([self._gather(torch.cat(r), True) for r in reps[1:]]), dim=-1)
        query_keys = self._gather(keys[0], False)
        doc_keys = torch.cat([self._gather(k, False) for k in keys[1:]])
        world_batch = queries.shape[0]
        offset = get_rank() * batch if world_batch > batch else 0
        rows = torch.arange(offset, offset + batch, device=queries.device)

        scores = self.scale * queries[rows] @ docs.T  # (batch, world_batch x columns); column i = positive i
        loss = F.cross_entropy(
            scores.masked_fill(_duplicates(doc_keys, doc_keys[rows], rows), -torch.inf), rows
        )
        if self.symmetric:
            scores = self.scale * docs[rows] @ queries.T  # each positive against every query
            masked = scores.masked_fill(_duplicates(query_keys, query_keys[rows], rows), -torch.inf)
            loss = (loss + F.cross_entropy(masked, rows)) / 2
        if with_backward:
            loss.backward()
            loss = loss.detach()
        return loss

    def get_config_dict(self) -> dict:
        return {
            "temperature": 1.0 / self.scale,
            "symmetric": self.symmetric,
            "gather": self.gather,
            "mini_batch_size": self.mini_batch_size or None,
        }


def _duplicates(candidate_keys: Tensor, target_keys: Tensor, targets: Tensor) -> Tensor:
    """(rows, candidates) mask of candidates that repeat a text: copies of the row's target (not the target
    itself) and every later copy of any text already seen at a lower candidate index."""
    columns = torch.arange(candidate_keys.numel(), device=candidate_keys.device)
    unique, inverse = torch.unique(candidate_keys, return_inverse=True)
    first = torch.full_like(unique, candidate_keys.numel()).scatter_reduce(0, inverse, columns, "amin")
    repeated = first[inverse] != columns  # this text was seen at an earlier column
    copies_of_target = candidate_keys[None, :] == target_keys[:, None]
    mask = copies_of_target | repeated[None, :]
    mask[torch.arange(len(targets), device=mask.device), targets] = False
    return mask


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
