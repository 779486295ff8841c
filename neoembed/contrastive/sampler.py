"""Homogeneous global batches: one source per optimisation step on every rank, sources drawn ~ rows^alpha.

Why not sentence-transformers' `MultiDatasetBatchSamplers.PROPORTIONAL`: it draws a source per yielded batch in
proportion to rows (not rows^alpha), and under DDP accelerate deals consecutive batches to different ranks, so
two ranks (and two accumulation micro-steps) train on different sources in the same optimisation step, which
mixes sources inside the gathered InfoNCE batch. This sampler draws one source per *group* of
world_size x grad_accum batches from a generator seeded only by (seed, epoch), so every rank computes the same
sequence, and accelerate's dealing (batch i -> rank i % world_size) hands each rank its part of the group.
Rows whose texts already occur in the group are deferred to the source's next group: no text repeats inside
a global batch. Texts are compared by their `data.normalize.text_key`, which the build stores in the records,
so the check holds 8 bytes a text in memory rather than the text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence, Sized
from typing import cast

import numpy as np
from sentence_transformers.base.sampler import MultiDatasetDefaultBatchSampler
from torch.utils.data import ConcatDataset

from neoembed.errors import InputError


class SamplerError(InputError):
    """A source that cannot fill a batch with distinct texts."""


def source_probabilities(rows: Sequence[int], alpha: float) -> np.ndarray:
    weights = np.asarray(rows, dtype=np.float64) ** alpha
    return weights / weights.sum()


class HomogeneousBatchSampler(MultiDatasetDefaultBatchSampler):
    """Yields per-rank batches of indices into the ConcatDataset of the sources (see the module docstring).

    `keys(source_index, row) -> sequence of ints` gives the keys of a row's texts for the duplicate check.
    """

    def __init__(
        self,
        dataset: ConcatDataset,
        batch_samplers,
        generator=None,
        seed: int = 0,
        *,
        alpha: float,
        world_size: int,
        grad_accum: int,
        keys: Callable[[int, int], Sequence[int]],
        names: Sequence[str] = (),
    ) -> None:
        super().__init__(dataset, batch_samplers, generator, seed)
        self.rows = [len(cast(Sized, d)) for d in dataset.datasets]  # the sources are datasets.Dataset
        self.names = list(names) or [str(i) for i in range(len(self.rows))]
        self.probabilities = source_probabilities(self.rows, alpha)
        self.offsets = np.concatenate([[0], np.cumsum(self.rows)[:-1]])
        self.batches_per_group = world_size * grad_accum
        self.group_rows = self.batch_size * self.batches_per_group
        self.keys = keys

    def __len__(self) -> int:
        """Per epoch: as many groups as the rows cover (at least one)."""
        return max(1, sum(self.rows) // self.group_rows) * self.batches_per_group

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        queues = [_RowQueue(n, rng) for n in self.rows]
        for _ in range(len(self) // self.batches_per_group):
            source = int(rng.choice(len(self.rows), p=self.probabilities))
            group = self._group(source, queues[source])
            offset = int(self.offsets[source])
            for start in range(0, self.group_rows, self.batch_size):
                yield [offset + i for i in group[start : start + self.batch_size]]

    def _group(self, source: int, queue: _RowQueue) -> list[int]:
        seen: set[int] = set()
        group: list[int] = []
        deferred: list[int] = []
        tried = 0
        while len(group) < self.group_rows:
            if tried > 2 * self.rows[source]:  # every row was tried at least once (the queue may wrap)
                raise SamplerError(
                    f"source {self.names[source]}: cannot fill a batch of {self.group_rows} rows whose texts "
                    f"are all distinct ({len(group)} found); lower train.batch_size or add rows"
                )
            row = queue.pop()
            tried += 1
            keys = self.keys(source, row)
            if seen.isdisjoint(keys):
                seen.update(keys)
                group.append(row)
            else:
                deferred.append(row)
        queue.push_front(deferred)
        return group


class _RowQueue:
    """Row indices of one source in a random order, reshuffled each time they run out."""

    def __init__(self, rows: int, rng: np.random.Generator) -> None:
        self.rows, self.rng = rows, rng
        self.pending: list[int] = []

    def pop(self) -> int:
        if not self.pending:
            self.pending = self.rng.permutation(self.rows).tolist()[::-1]
        return self.pending.pop()

    def push_front(self, rows: list[int]) -> None:
        self.pending.extend(reversed(rows))
