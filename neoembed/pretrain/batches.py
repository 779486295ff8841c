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


def tokenize_documents(documents, tokenizer, *, truncate_to: int | None):
    """Add `input_ids` ([CLS] ... [SEP]) and `length` columns; truncate when `truncate_to` is given.

    Ids are stored as uint16 when the vocabulary fits (30522 does): a quarter of datasets' default int64 on disk.
    Large corpora are tokenised by several processes.
    """
    import os

    import datasets

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

    id_type = "uint16" if len(tokenizer) <= 2**16 else "int32"
    features = datasets.Features(
        {"input_ids": datasets.Sequence(datasets.Value(id_type)), "length": datasets.Value("int32")}
    )
    num_proc = min(8, os.cpu_count() or 1) if len(documents) > 200_000 else None
    return documents.map(
        encode, batched=True, remove_columns=["text"], features=features, num_proc=num_proc, desc="tokenising"
    )


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

    Packed: the documents' tokens form one stream cut into rows every `max_length` tokens (every row full but
    the last); a piece is the part of a document inside one row, so a document crossing a row boundary becomes
    two pieces. Padded: one document per row, truncated. Vectorised: no Python loop over documents.
    """
    lengths, doc_ids = np.asarray(lengths, dtype=np.int64), np.asarray(doc_ids, dtype=np.int64)
    if not packed:
        ends = np.minimum(lengths, max_length)
        return RowPlan(doc_ids, np.zeros_like(ends), ends, np.arange(len(doc_ids) + 1))
    doc_starts = np.concatenate([[0], np.cumsum(lengths)])
    total = int(doc_starts[-1])
    row_starts = np.arange(0, total, max_length)
    bounds = np.union1d(doc_starts, np.append(row_starts, total))  # sorted, unique stream offsets
    piece_starts, piece_ends = bounds[:-1], bounds[1:]
    owner = np.searchsorted(doc_starts, piece_starts, side="right") - 1  # index into doc_ids
    piece_row = piece_starts // max_length
    offsets = np.searchsorted(piece_row, np.arange(len(row_starts) + 1))
    local_start = piece_starts - doc_starts[owner]
    return RowPlan(doc_ids[owner], local_start, local_start + (piece_ends - piece_starts), offsets)


def padded_width(longest: int) -> int:
    """Padded batch width: the longest sequence rounded up to a multiple of 8, as in the paper."""
    return -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE


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
        if self.item_bucket is None or self.item_rank is None:  # set together: one bucket, or several
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
        width = padded_width(max(len(p) for p in pieces))
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


def unwrap_single(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
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


def batch_counts(batch: dict[str, torch.Tensor], row_length: int) -> torch.Tensor:
    """(real tokens, token slots, sum of squared sequence lengths, predicted tokens) of a packed or padded MLM
    batch, as one int64 tensor on the batch's device (read them with a single `.tolist()` per step).

    Token slots are what the layout computes: a padded batch's rows x width; a packed batch's rows x
    `row_length` (every packed row is full but the stream's last, so rows = ceil(tokens / row_length)).
    """
    labels = batch["labels"]
    mask = batch.get("attention_mask")
    if mask is not None:
        lengths = mask.sum(dim=1)
        slots = torch.tensor(mask.numel(), device=mask.device)
    else:
        lengths = batch["cu_seqlens"].diff()
        tokens = batch["input_ids"].numel()
        slots = torch.tensor(-(-tokens // row_length) * row_length, device=lengths.device)
    lengths = lengths.to(torch.int64)
    return torch.stack([lengths.sum(), slots, (lengths**2).sum(), (labels != -100).sum().to(lengths.device)])
