"""Attention backends for NeoBERT, over two batch layouts, and the one decision of which to use.

- `PaddedBatch`: (batch, length, heads, head_dim) tensors and a key-padding mask; SDPA with a boolean mask, or an
  explicit softmax ("eager") when the caller wants the attention weights.
- `VarlenBatch`: (tokens, heads, head_dim) tensors holding only real tokens, sequence boundaries in `cu_seqlens`.
  Used for unpadded inference/training and for packed pretraining rows: a token only ever attends to tokens of
  its own sequence. On CUDA in bf16/fp16 it runs flash-attn's or torch's varlen kernel; elsewhere, SDPA over
  groups of similar-length sequences.

`choose_backend` and `varlen_kernel_for` are pure functions of the device, dtypes, autocast state and which fused
kernels import, so every CUDA decision is testable on a CPU.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

HALF_DTYPES = (torch.float16, torch.bfloat16)
FUSED_VARLEN_KERNELS = ("flash_attn", "torch_varlen")  # in order of preference


@functools.cache
def _varlen_kernel_imports() -> dict[str, Callable | Exception]:
    """Each fused varlen kernel: its function, or the exception importing it raised. Imported once.

    A real import, not `find_spec`: a flash-attn wheel built for another torch or CUDA is found but fails to
    import (an undefined symbol), and must then fall back to torch's kernel rather than fail in every layer."""
    kernels: dict[str, Callable | Exception] = {}
    try:
        from flash_attn import flash_attn_varlen_func

        kernels["flash_attn"] = flash_attn_varlen_func
    except Exception as err:  # ImportError, OSError from the extension, RuntimeError from its CUDA checks
        kernels["flash_attn"] = err
    try:
        from torch.nn.attention.varlen import varlen_attn

        kernels["torch_varlen"] = varlen_attn
    except Exception as err:
        kernels["torch_varlen"] = err
    return kernels


@torch.compiler.assume_constant_result  # torch.compile reads it once instead of tracing the imports
def importable_kernels() -> frozenset[str]:
    """The fused varlen kernels that import here (whether a CUDA device exists is decided separately)."""
    return frozenset(name for name, kernel in _varlen_kernel_imports().items() if callable(kernel))


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """Autocast's dtype when autocast is on for this device type, else None. (Under bf16 autocast the
    embedding output is fp32, but every matmul and attention computes in bf16.)"""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


def varlen_kernel_for(device_type: str, dtype: torch.dtype, importable: frozenset[str]) -> str:
    """The varlen kernel for tensors computed in `dtype` on `device_type`: a fused CUDA kernel where one
    applies (they take bf16/fp16 only), else SDPA over groups of sequences."""
    if device_type == "cuda" and dtype in HALF_DTYPES:
        for kernel in FUSED_VARLEN_KERNELS:
            if kernel in importable:
                return kernel
    return "sdpa_per_sequence"


def tracing() -> bool:
    """Whether the forward is being traced into a fixed graph (an ONNX export, `torch.jit.trace`)."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def choose_backend(
    requested: str,
    *,
    device_type: str,
    dtype: torch.dtype,
    autocast_dtype: torch.dtype | None,
    importable: frozenset[str],
    has_padding: bool,
    output_attentions: bool,
    traced: bool = False,
) -> str:
    """The attention backend for a padded batch: "eager", "sdpa" or "unpadded".

    `requested` is the config's `attn_backend`; `autocast_dtype` is autocast's dtype when autocast is on for the
    device, else None. Attention weights need "eager". Under `auto`, a batch without padding runs padded SDPA
    (no mask, so SDPA may take its flash kernel); a batch with padding runs unpadded where that pays: on CPU
    (exact grouped SDPA), and on CUDA when a fused varlen kernel applies to the compute dtype. CUDA in fp32 has
    no varlen kernel, and grouping there would cost more than the padding.

    `traced` (see `tracing`): a traced graph fixes the shapes and Python values of the example batch, and the
    unpadded path's sequence plan is such values. A traced forward with padding therefore runs unpadded as
    `RepaddedBatch`: the linear layers see real tokens only, and attention is one padded SDPA per layer.
    """
    if output_attentions:
        return "eager"
    if traced:
        return "unpadded" if has_padding else "sdpa"
    if requested != "auto":
        return requested
    if not has_padding:
        return "sdpa"
    if device_type == "cpu":
        return "unpadded"
    kernel = varlen_kernel_for(device_type, autocast_dtype or dtype, importable)
    return "unpadded" if kernel != "sdpa_per_sequence" else "sdpa"


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
class RepaddedBatch:
    """Real tokens only, `(tokens, ...)`, whose attention runs padded: each call gathers q, k and v into
    (batch, length), runs one masked SDPA and gathers the real tokens out. Every step is a tensor operation,
    so it traces into a graph that takes any batch (an ONNX export), unlike `VarlenBatch`'s sequence plan.
    The linear layers, most of the FLOPs, then skip the padding, which is over half of a typical batch of
    short texts."""

    key_mask: torch.Tensor  # (batch, length) bool, True for real tokens
    token_index: torch.Tensor  # (tokens,) flat index of each real token in (batch * length)
    # (batch * length,) the real token each slot reads: its own, or for a padding slot the real token before
    # it (or the first). Padding slots are masked out as keys and dropped as queries, so what they hold does
    # not matter; gathers are cheaper than zero-filled scatters in the exported graph.
    slot_index: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.slot_index = (self.key_mask.flatten().long().cumsum(0) - 1).clamp(min=0)

    def attend(self, q, k, v) -> tuple[torch.Tensor, None]:
        """q, k, v: (tokens, heads, head_dim) -> (tokens, heads, head_dim)."""
        batch, length = self.key_mask.shape
        repadded = (t[self.slot_index].view(batch, length, *t.shape[1:]) for t in (q, k, v))
        out, _ = PaddedBatch(self.key_mask).attend(*repadded)
        return out.flatten(0, 1)[self.token_index], None


@dataclass
class SequenceGroup:
    """Sequences of similar length gathered into one (group, longest) SDPA call; built once per forward."""

    index: torch.Tensor  # (group, longest) token index of each slot; padding slots re-read a real token
    key_mask: torch.Tensor  # (group, 1, 1, longest) True for real slots
    real_slots: torch.Tensor  # flat indices of the real slots in (group * longest)
    targets: torch.Tensor  # token index of each real slot, in the same order


@dataclass
class VarlenBatch:
    cu_seqlens: torch.Tensor  # (sequences + 1,) int32 offsets of each sequence in the token dimension
    max_seqlen: int
    kernel: str = "sdpa_per_sequence"  # `varlen_kernel_for` the layers' compute dtype
    _plan: list | None = field(default=None, repr=False)  # grouped-SDPA plan, shared by every layer

    def attend(self, q, k, v) -> tuple[torch.Tensor, None]:
        """q, k, v: (tokens, heads, head_dim) -> (tokens, heads, head_dim); no attention across sequences."""
        if self.kernel in FUSED_VARLEN_KERNELS:
            fused = _varlen_kernel_imports()[self.kernel]
            assert callable(fused)  # FUSED_VARLEN_KERNELS names only kernels that imported
            cu, longest = self.cu_seqlens, self.max_seqlen
            return fused(q, k, v, cu, cu, longest, longest), None
        if self._plan is None:
            self._plan = plan_sequence_groups(self.cu_seqlens)
        return _attend_grouped(q, k, v, self._plan), None


def plan_sequence_groups(cu_seqlens: torch.Tensor) -> list[slice | SequenceGroup]:
    """How grouped SDPA covers the sequences: a slice per sequence long enough to run alone, a `SequenceGroup`
    per set of short ones. Computed once per forward (one device sync), then reused by every layer."""
    bounds = cu_seqlens.tolist()
    starts, lengths = bounds[:-1], [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    device = cu_seqlens.device
    plan: list[slice | SequenceGroup] = []
    for group in _length_groups(lengths):
        longest = lengths[group[0]]
        if len(group) == 1:
            plan.append(slice(starts[group[0]], starts[group[0]] + longest))
            continue
        offsets = torch.arange(longest, device=device)
        first = torch.tensor([starts[i] for i in group], device=device)[:, None]
        size = torch.tensor([lengths[i] for i in group], device=device)[:, None]
        real = offsets < size  # (group, longest)
        index = torch.where(real, first + offsets, first)
        real_slots = real.flatten().nonzero().squeeze(1)
        plan.append(SequenceGroup(index, real[:, None, None, :], real_slots, index.flatten()[real_slots]))
    return plan


def _attend_grouped(q, k, v, plan: list[slice | SequenceGroup]) -> torch.Tensor:
    """Exact varlen attention anywhere: each planned group is one masked SDPA call.

    Many short sequences (packed pretraining rows hold dozens) thus run as a few well-shaped calls instead of one
    tiny call each, and little padding is computed. CUDA in bf16/fp16 uses the fused varlen kernels instead.
    """
    out = torch.empty_like(q)
    for part in plan:
        if isinstance(part, slice):
            seq = [t[part].transpose(0, 1).unsqueeze(0) for t in (q, k, v)]  # (1, heads, len, head_dim)
            out[part] = F.scaled_dot_product_attention(*seq)[0].transpose(0, 1)
            continue
        # (group, heads, longest, head_dim) each
        q_group, k_group, v_group = (t[part.index].transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q_group, k_group, v_group, attn_mask=part.key_mask)
        out[part.targets] = attended.transpose(1, 2).flatten(0, 1)[part.real_slots]
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


def _kernel_status(name: str, cuda: bool, missing: str) -> str:
    kernel = _varlen_kernel_imports()[name]
    if callable(kernel):
        return "available (bf16/fp16)" if cuda else "imports, but needs a CUDA device"
    if name == "flash_attn" and importlib.util.find_spec("flash_attn") is not None:
        fallback = "torch varlen_attn" if "torch_varlen" in importable_kernels() else "grouped SDPA"
        return f"installed but fails to import ({type(kernel).__name__}: {kernel}); using {fallback} instead"
    return missing


def available_backends() -> dict[str, str]:
    """Each attention backend and whether it can run here, for `neoembed info`."""
    cuda = torch.cuda.is_available()
    return {
        "sdpa (padded)": "available",
        "eager (padded, returns weights)": "available",
        "unpadded: sdpa per sequence": "available",
        "unpadded: torch varlen_attn": _kernel_status("torch_varlen", cuda, "needs torch>=2.9 and CUDA"),
        "unpadded: flash-attn varlen": _kernel_status(
            "flash_attn", cuda, "not installed: `pip install neoembed[gpu]` (CUDA, bf16/fp16)"
        ),
    }
