"""What every contrastive loss is to the trainer: built from the recipe, prepared once the run has recorded it,
called on a batch's embeddings and keys, saved and resumed with the checkpoints, and described by a `config`.

`ContrastiveLoss` does the part every loss shares, as sentence-transformers' cached losses do it: GradCache
through the library's `CachedLossMixin` (`loss.mini_batch_size`), gathering the embeddings of every rank with
their gradients (`loss.gather`), and the batch as InfoNCE scores it (`InBatch`: normalised queries against every
document column, each text's key, the mask of repeated texts). A loss adds its `terms`, from the batch.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from sentence_transformers.base.losses.gradcache import CachedLossMixin
from sentence_transformers.util import all_gather, all_gather_with_grad, get_rank, get_world_size
from torch import Tensor, nn

if TYPE_CHECKING:
    import numpy as np
    from transformers import TrainingArguments

    from neoembed.contrastive.settings import ContrastiveSettings


@dataclass
class TrainingRun:
    """What a loss may prepare with once the run has recorded its recipe (`ContrastiveLoss.prepare`)."""

    sources: dict  # source name -> its training dataset
    keys: dict[str, np.ndarray]  # source name -> its (rows, text columns) text keys
    args: TrainingArguments  # the run's device, ranks and which process goes first
    resuming: bool  # checkpoints of this run exist: what they trained on must not change


class ContrastiveLoss(CachedLossMixin, nn.Module):
    """Base of the losses `loss.kind` names. A subclass implements `from_recipe`, `terms` and `config`; it
    overrides `prepare` and `save_checkpoint` / `load_checkpoint` where it has work or state of its own.

    Columns: query, positive, then any number of hard-negative columns; the labels are each column's text keys
    (`data.normalize.text_key`, int64), which `ContrastiveTrainer` passes.
    """

    logs_terms = False  # whether the training log shows each of `terms` beside the loss

    def __init__(self, model, gather: bool = True, mini_batch_size: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.gather = gather
        self.cached = mini_batch_size is not None
        self.mini_batch_size = mini_batch_size or 0
        # CachedLossMixin says True for the class; MatryoshkaLoss reads it to pick how it wraps this loss.
        self.uses_gradient_cache = self.cached
        self.components: dict[str, Tensor] = {}  # weighted terms summed since `pop_components`

    @classmethod
    def from_recipe(cls, settings: ContrastiveSettings, model, world_size: int) -> ContrastiveLoss:
        """The loss `settings` describe, for `model` trained on `world_size` ranks. Called before the run
        records its recipe: refuse a recipe this loss cannot train here."""
        raise NotImplementedError

    def prepare(self, run: TrainingRun) -> None:
        """Work the loss needs done once the run has recorded its recipe, before the first step."""

    def terms(self, batch: InBatch, columns: list[Tensor], keys: list[Tensor]) -> dict[str, Tensor]:
        """The weighted terms whose sum is the loss: `batch` as InfoNCE scores it, and each column's raw
        embeddings and text keys (this rank's)."""
        raise NotImplementedError

    @property
    def config(self) -> dict[str, Any]:
        """The loss's settings as the model card states them."""
        raise NotImplementedError

    def get_config_dict(self) -> dict[str, Any]:
        """sentence-transformers' name for `config`: the library's card prints it."""
        return self.config

    def save_checkpoint(self, checkpoint: Path) -> None:
        """Save into a checkpoint what the loss trains besides the model (the Trainer saves the model)."""

    def load_checkpoint(self, checkpoint: Path) -> None:
        """Load what `save_checkpoint` saved."""

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Sequence[Tensor]) -> Tensor:
        """`labels`: per column, the `text_key`s of its texts (int64, one per row)."""
        features, keys = list(sentence_features), list(labels if labels is not None else ())
        name = type(self).__name__
        if len(features) < 2:
            raise ValueError(f"{name} needs query and positive columns, got {len(features)} column(s)")
        if len(keys) != len(features):
            raise ValueError(
                f"{name} needs the text keys of each of its {len(features)} columns as labels, got "
                f"{len(keys)}: train with neoembed.contrastive.train.ContrastiveTrainer"
            )
        if self.cached:
            # CachedLossMixin types labels as one Tensor; it passes them to `calculate_loss` unchanged.
            return self.forward_cached(features, keys)  # type: ignore[arg-type]
        reps = [[self.model(f)["sentence_embedding"]] for f in features]
        return self.calculate_loss(reps, keys)

    def calculate_loss(  # type: ignore[override]  # the mixin's labels: one Tensor; ours: one per column
        self, reps: list[list[Tensor]], labels: list[Tensor] | None = None, *, with_backward: bool = False
    ) -> Tensor:
        keys = labels
        assert keys is not None  # `forward` checked every column has its keys; MatryoshkaLoss passes them on
        columns = [torch.cat(r) for r in reps]
        terms = self.terms(self.in_batch(columns, keys), columns, keys)
        if self.logs_terms:
            for name, value in terms.items():
                self.components[name] = self.components.get(name, 0.0) + value.detach()
        loss: Tensor = functools.reduce(operator.add, terms.values())
        if with_backward:
            loss.backward()
            loss = loss.detach()
        return loss

    def _gather(self, tensor: Tensor, with_grad: bool) -> Tensor:
        if not self.gather or get_world_size() == 1:
            return tensor
        return all_gather_with_grad(tensor) if with_grad else all_gather(tensor)

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

    def pop_components(self) -> dict[str, Tensor]:
        """The weighted terms since the last call (summed over Matryoshka dimensions, unweighted by them), for
        the training log; empty where the loss does not log its terms."""
        components, self.components = self.components, {}
        return components


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
        """The (batch, documents) candidates that do not count: repeats of a text (see `duplicates`)."""
        return duplicates(self.doc_keys, self.doc_keys[self.rows], self.rows)


def duplicates(candidate_keys: Tensor, target_keys: Tensor, targets: Tensor) -> Tensor:
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
    model, loss: ContrastiveLoss, dims: list[int], weights: list[float] | None = None
) -> nn.Module:
    """`loss` summed (weighted) over the embeddings truncated to each of `dims` and re-normalised.

    sentence-transformers' MatryoshkaLoss fits as it is: without caching it truncates the model's output per
    dimension (one forward pass), and with GradCache it wraps `calculate_loss`, which receives the truncated
    cached embeddings and gathers them across ranks itself; both paths are tested against each other and
    against 2 ranks.
    """
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss

    return MatryoshkaLoss(model, loss, dims, weights)
