"""MLM batches: tokenised documents laid out as packed or padded rows, masked deterministically.

Batch `i` of a run is a pure function of (seed, i): which rows it holds (a seeded permutation per pass over the
rows, per length bucket) and which tokens are masked (a generator seeded by i). That is what makes a resumed
run continue the exact same loss curve, and what lets ranks take disjoint batches with no shared state.

- packed: documents are concatenated into rows of at most `max_length` tokens (a longer document is split
  into pieces); a batch is all its rows' pieces back to back, with `cu_seqlens` marking each piece, so no
  piece attends to another and positions restart per piece. No padding is computed.
- padded (the paper's): one document per row, truncated to `max_length`, padded to a multiple of 8.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

PAD_MULTIPLE = 8


def tokenize_documents(documents, tokenizer, *, truncate_to: int | None, num_proc: int | None = None):
    """Add `input_ids` ([CLS] ... [SEP]) and `length` columns; truncate when `truncate_to` is given."""

    def encode(batch):
        ids = tokenizer(
            batch["text"],
            add_special_tokens=True,
            truncation=truncate_to is not None,
            max_length=truncate_to,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        return {"input_ids": ids, "length": [len(x) for x in ids]}

    return documents.map(encode, batched=True, remove_columns=["text"], num_proc=num_proc, desc="tokenising")


@dataclass
class RowPlan:
    """Rows as lists of pieces (document, start, end), stored flat: row r is pieces[offsets[r]:offsets[r+1]]."""

    piece_doc: np.ndarray
    piece_start: np.ndarray
    piece_end: np.ndarray
    offsets: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    def pieces(self, row: int) -> list[tuple[int, int, int]]:
        span = slice(self.offsets[row], self.offsets[row + 1])
        return list(
            zip(self.piece_doc[span].tolist(), self.piece_start[span].tolist(), self.piece_end[span].tolist())
        )


def plan_rows(lengths: np.ndarray, doc_ids: np.ndarray, max_length: int, packed: bool) -> RowPlan:
    """Lay out documents `doc_ids` (with token counts `lengths`) as rows, in document order.

    Packed: pieces of at most `max_length` tokens fill each row greedily. Padded: one (truncated) document
    per row.
    """
    docs, starts, ends, offsets = [], [], [], [0]
    used = 0
    for doc, length in zip(doc_ids.tolist(), lengths.tolist()):
        if not packed:
            docs.append(doc), starts.append(0), ends.append(min(length, max_length))
            offsets.append(len(docs))
            continue
        for start in range(0, length, max_length):
            end = min(start + max_length, length)
            if used and used + (end - start) > max_length:
                offsets.append(len(docs))
                used = 0
            docs.append(doc), starts.append(start), ends.append(end)
            used += end - start
    if packed and used:
        offsets.append(len(docs))
    return RowPlan(np.array(docs, dtype=np.int64), np.array(starts), np.array(ends), np.array(offsets))


def mask_tokens(
    ids: torch.Tensor,
    special: torch.Tensor,
    *,
    rate: float,
    mode: str,
    mask_token_id: int,
    vocab_size: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Select `rate` of the non-special tokens; return (inputs, labels) with labels -100 elsewhere.

    mode "mask": every selected token becomes [MASK] (the release). "80-10-10": 80% [MASK], 10% a random
    token, 10% unchanged (BERT). Hand-written rather than transformers' collator so the draw is a pure function
    of the generator we seed per batch.
    """
    selected = (torch.rand(ids.shape, generator=generator) < rate) & ~special
    labels = torch.where(selected, ids, torch.full_like(ids, -100))
    inputs = ids.clone()
    if mode == "mask":
        inputs[selected] = mask_token_id
        return inputs, labels
    draw = torch.rand(ids.shape, generator=generator)
    inputs[selected & (draw < 0.8)] = mask_token_id
    randomized = selected & (draw >= 0.8) & (draw < 0.9)
    inputs[randomized] = torch.randint(vocab_size, ids.shape, generator=generator)[randomized]
    return inputs, labels


class MLMBatches(torch.utils.data.Dataset):
    """Item i is micro-batch i of the run, ready for `NeoBERTForMaskedLM` (used with batch_size=1 loaders)."""

    def __init__(
        self,
        tokenized,
        *,
        max_length: int,
        packed: bool,
        batch_size: int,
        num_items: int,
        seed: int,
        mask_rate: float,
        mask_mode: str,
        tokenizer,
        length_buckets: list[tuple[int, float]] | None = None,
    ):
        self.tokenized = tokenized.with_format("numpy", columns=["input_ids"])
        self.packed = packed
        self.batch_size = batch_size
        self.num_items = num_items
        self.seed = seed
        self.mask_rate, self.mask_mode = mask_rate, mask_mode
        self.mask_token_id = tokenizer.mask_token_id
        self.vocab_size = len(tokenizer)
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)))
        self.pad_token_id = tokenizer.pad_token_id

        lengths = np.asarray(tokenized["length"])
        buckets = length_buckets or [(0, 1.0)]
        self.plans = []
        for min_tokens, _ in buckets:
            doc_ids = np.flatnonzero(lengths >= min_tokens)
            if len(doc_ids) == 0:
                raise ValueError(f"length bucket >= {min_tokens} tokens has no documents")
            self.plans.append(plan_rows(lengths[doc_ids], doc_ids, max_length, packed))
        # With several buckets: which bucket each item draws from, and how many earlier items drew from it
        # (a few bytes per item; with one bucket, item i simply takes the i-th slice of rows).
        self.item_bucket = self.item_rank = None
        if len(buckets) > 1:
            probabilities = np.array([p for _, p in buckets])
            rng = np.random.default_rng([seed, 0xB0C])
            self.item_bucket = rng.choice(len(buckets), size=num_items, p=probabilities / probabilities.sum())
            self.item_bucket = self.item_bucket.astype(np.int8)
            self.item_rank = np.zeros(num_items, dtype=np.int64)
            for b in range(len(buckets)):
                chosen = self.item_bucket == b
                self.item_rank[chosen] = np.arange(chosen.sum())

    def __len__(self) -> int:
        return self.num_items

    @lru_cache(maxsize=8)  # noqa: B019  (a few passes' permutations, per dataset object)
    def _permutation(self, bucket: int, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, bucket, epoch]).permutation(self.plans[bucket].num_rows)

    def rows_of(self, item: int) -> tuple[int, list[int]]:
        """(bucket, row indices) of micro-batch `item`: the next rows of that bucket's shuffled stream."""
        if self.item_bucket is None:
            bucket, rank = 0, item
        else:
            bucket, rank = int(self.item_bucket[item]), int(self.item_rank[item])
        plan = self.plans[bucket]
        first = rank * self.batch_size
        rows = []
        for position in range(first, first + self.batch_size):
            epoch, offset = divmod(position, plan.num_rows)
            rows.append(int(self._permutation(bucket, epoch)[offset]))
        return bucket, rows

    def _piece_ids(self, doc: int, start: int, end: int) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.tokenized[doc]["input_ids"][start:end], dtype=np.int64))

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        bucket, rows = self.rows_of(item)
        plan = self.plans[bucket]
        pieces = [self._piece_ids(*piece) for row in rows for piece in plan.pieces(row)]
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + item)
        if self.packed:
            ids = torch.cat(pieces)
            lengths = torch.tensor([len(p) for p in pieces])
            cu_seqlens = torch.nn.functional.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
            inputs, labels = self._mask(ids, generator)
            return {"input_ids": inputs[None], "labels": labels[None], "cu_seqlens": cu_seqlens}
        width = -(-max(len(p) for p in pieces) // PAD_MULTIPLE) * PAD_MULTIPLE
        ids = torch.full((len(pieces), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(pieces), width, dtype=torch.long)
        for row, piece in enumerate(pieces):
            ids[row, : len(piece)] = piece
            attention_mask[row, : len(piece)] = 1
        inputs, labels = self._mask(ids, generator)
        return {"input_ids": inputs, "labels": labels, "attention_mask": attention_mask}

    def _mask(self, ids: torch.Tensor, generator: torch.Generator):
        special = torch.isin(ids, self.special_ids)  # [CLS], [SEP], [PAD] are never selected
        return mask_tokens(
            ids,
            special,
            rate=self.mask_rate,
            mode=self.mask_mode,
            mask_token_id=self.mask_token_id,
            vocab_size=self.vocab_size,
            generator=generator,
        )


def unwrap_single(items: list[dict]) -> dict:
    """Collate for loaders with batch_size=1 over `MLMBatches`: each item already is a batch."""
    (batch,) = items
    return batch


def packed_to_padded(batch: dict[str, torch.Tensor], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """The same sequences, inputs and labels as a packed batch, as a padded batch (one sequence per row).

    For checking that the two layouts train the same model: their losses must agree.
    """
    cu = batch["cu_seqlens"].tolist()
    inputs, labels = batch["input_ids"].reshape(-1), batch["labels"].reshape(-1)
    spans = list(zip(cu[:-1], cu[1:]))
    width = max(end - start for start, end in spans)
    ids = torch.full((len(spans), width), pad_token_id, dtype=inputs.dtype)
    padded_labels = torch.full((len(spans), width), -100, dtype=labels.dtype)
    attention_mask = torch.zeros(len(spans), width, dtype=torch.long)
    for row, (start, end) in enumerate(spans):
        ids[row, : end - start] = inputs[start:end]
        padded_labels[row, : end - start] = labels[start:end]
        attention_mask[row, : end - start] = 1
    return {"input_ids": ids, "labels": padded_labels, "attention_mask": attention_mask}
