"""Attention backends for NeoBERT, over two batch layouts.

- `PaddedBatch`: (batch, length, heads, head_dim) tensors and a key-padding mask; SDPA with a boolean mask, or an
  explicit softmax ("eager") when the caller wants the attention weights.
- `VarlenBatch`: (tokens, heads, head_dim) tensors holding only real tokens, sequence boundaries in `cu_seqlens`.
  Used for unpadded inference/training and for packed pretraining rows: a token only ever attends to tokens of
  its own sequence. On CUDA it runs flash-attn's or torch's varlen kernel; elsewhere, SDPA per sequence.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PaddedBatch:
    key_mask: torch.Tensor | None  # (batch, length) bool, True for real tokens; None when nothing is padded
    eager: bool = False

    def attend(self, q, k, v) -> tuple[torch.Tensor, torch.Tensor | None]:
        """q, k, v: (batch, length, heads, head_dim) -> output of the same shape, and weights when eager."""
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        mask = None if self.key_mask is None else self.key_mask[:, None, None, :]
        if self.eager:
            scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = scores.softmax(dim=-1)
            out = weights.type_as(v) @ v
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2), weights


@dataclass
class VarlenBatch:
    cu_seqlens: torch.Tensor  # (sequences + 1,) int32 offsets of each sequence in the token dimension
    max_seqlen: int
    _bounds: list[int] | None = None  # cu_seqlens as Python ints, read once per forward (a device sync)

    def attend(self, q, k, v) -> tuple[torch.Tensor, None]:
        """q, k, v: (tokens, heads, head_dim) -> (tokens, heads, head_dim); no attention across sequences."""
        kernel = varlen_kernel(q)
        if kernel == "flash_attn":
            from flash_attn import flash_attn_varlen_func

            cu = self.cu_seqlens
            return flash_attn_varlen_func(q, k, v, cu, cu, self.max_seqlen, self.max_seqlen), None
        if kernel == "torch_varlen":
            from torch.nn.attention.varlen import varlen_attn

            cu = self.cu_seqlens
            return varlen_attn(q, k, v, cu, cu, self.max_seqlen, self.max_seqlen), None
        if self._bounds is None:
            self._bounds = self.cu_seqlens.tolist()
        return _attend_per_sequence(q, k, v, self._bounds), None


def _attend_per_sequence(q, k, v, bounds: list[int]) -> torch.Tensor:
    """Exact varlen attention anywhere: sequences of similar length share one masked SDPA call.

    Sequences are taken longest first and grouped while a group's padding stays under MAX_GROUP_PADDING of
    its slots; each group is gathered into a (group, heads, longest, head_dim) batch whose key mask keeps every
    sequence to itself. Many short sequences (packed pretraining rows) thus run as a few well-shaped calls
    instead of one tiny call each, and little padding is computed. CUDA uses the fused varlen kernels instead.
    """
    starts, lengths = bounds[:-1], [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    out = torch.empty_like(q)
    for group in _length_groups(lengths):
        longest = lengths[group[0]]
        if len(group) == 1:
            span = slice(starts[group[0]], starts[group[0]] + longest)
            seq = [t[span].transpose(0, 1).unsqueeze(0) for t in (q, k, v)]  # (1, heads, len, head_dim)
            out[span] = F.scaled_dot_product_attention(*seq)[0].transpose(0, 1)
            continue
        offsets = torch.arange(longest, device=q.device)
        first = torch.tensor([starts[i] for i in group], device=q.device)[:, None]
        size = torch.tensor([lengths[i] for i in group], device=q.device)[:, None]
        real = offsets < size  # (group, longest)
        index = torch.where(real, first + offsets, first)  # padding slots re-read a real token; masked out
        gathered = [t[index].transpose(1, 2) for t in (q, k, v)]  # (group, heads, longest, head_dim)
        attended = F.scaled_dot_product_attention(*gathered, attn_mask=real[:, None, None, :])
        out[index[real]] = attended.transpose(1, 2)[real]
    return out


MAX_GROUP_PADDING = 0.2
# Sequences longer than this give one SDPA call enough work on their own; shorter ones are dominated by
# per-call overhead (packed pretraining rows hold dozens of them) and are grouped.
GROUP_UP_TO = 128


def _length_groups(lengths: list[int]) -> list[list[int]]:
    """Sequence indices, longest first: each sequence longer than GROUP_UP_TO alone, shorter ones grouped
    while padding to the group's longest wastes at most MAX_GROUP_PADDING of the group's slots."""
    groups: list[list[int]] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if lengths[i] == 0:
            continue
        if groups and lengths[groups[-1][0]] <= GROUP_UP_TO:
            slots = lengths[groups[-1][0]] * (len(groups[-1]) + 1)
            if slots * (1 - MAX_GROUP_PADDING) <= real + lengths[i]:
                groups[-1].append(i)
                real += lengths[i]
                continue
        groups.append([i])
        real = lengths[i]
    return groups


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _torch_has_varlen() -> bool:
    return _has_module("torch.nn.attention.varlen")


def varlen_kernel(q: torch.Tensor) -> str:
    """The varlen kernel for these tensors: a fused CUDA kernel where one applies, else per-sequence SDPA."""
    if q.device.type == "cuda" and q.dtype in (torch.float16, torch.bfloat16):
        if _has_module("flash_attn"):
            return "flash_attn"
        if _torch_has_varlen():
            return "torch_varlen"
    return "sdpa_per_sequence"


def available_backends() -> dict[str, str]:
    """Each attention backend and whether it can run here, for `neoembed info`."""
    cuda = torch.cuda.is_available()
    return {
        "sdpa (padded)": "available",
        "eager (padded, returns weights)": "available",
        "unpadded: sdpa per sequence": "available",
        "unpadded: torch varlen_attn": (
            "available" if cuda and _torch_has_varlen() else "needs CUDA and torch>=2.9 (bf16/fp16)"
        ),
        "unpadded: flash-attn varlen": (
            "available"
            if cuda and _has_module("flash_attn")
            else "needs CUDA and `pip install neoembed[gpu]` (bf16/fp16)"
        ),
    }
