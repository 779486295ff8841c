"""The memory of training steps: how many token slots a step of `bench pretrain` can hold on this machine,
estimated before it runs, and the peak a run of steps took, measured while it runs (`PeakMemory`).

A step of the 250M model at the CPU's default budget grew to 23 GB resident and was killed by the kernel on a
24 GiB machine. The estimate below (weights, gradients and AdamW state, plus activations kept for backward
per token) sizes the default budget to the memory available, and stops a budget the user gave that cannot fit
with a message instead of an OOM kill.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from neoembed.errors import InputError

HEADROOM = 0.8  # of the available memory a step may plan to use
STATE_BYTES_PER_PARAM = 16  # fp32 weights, gradients and AdamW's two moments


@dataclass(frozen=True)
class StepMemory:
    """The memory a training step needs: a fixed part and a part per token slot."""

    fixed_bytes: float
    bytes_per_token: float

    def needs(self, tokens: int) -> float:
        return self.fixed_bytes + self.bytes_per_token * tokens


def step_memory(config, max_length: int, *, value_bytes: int, scores: bool) -> StepMemory:
    """Estimated memory of an MLM step of a NeoBERT `config`. Per token and layer backward keeps about
    12 x hidden + 6 x ffn values (norms, q/k/v, attention output, residuals, SwiGLU's gate, value and product);
    where attention materialises its scores (SDPA on the CPU), also 2 x heads x max_length of them.
    `value_bytes`: 2 under bf16 autocast, else 4. For the 250M model at 8,192 slots of 512 tokens in fp32 on
    the CPU this gives 35 GB, above the 23 GB at which the kernel killed that step on a 24 GiB machine."""
    hidden, ffn, layers = config.hidden_size, config.ffn_hidden_size, config.num_hidden_layers
    vocab = config.vocab_size
    parameters = (
        2 * vocab * hidden + vocab + hidden + layers * (4 * hidden * hidden + 3 * hidden * ffn + 2 * hidden)
    )
    per_layer = 12 * hidden + 6 * ffn + (2 * config.num_attention_heads * max_length if scores else 0)
    return StepMemory(parameters * STATE_BYTES_PER_PARAM, layers * per_layer * value_bytes)


@dataclass(frozen=True)
class TokenBudget:
    tokens: int
    note: str | None  # why it differs from the requested budget


def fit_token_budget(
    requested: int, explicit: bool, max_length: int, memory: StepMemory, available_bytes: float
) -> TokenBudget:
    """The requested budget where it fits in HEADROOM of `available_bytes`; else, for a default budget, the
    most whole rows that fit; an explicit budget that does not fit, or not even one row, is an InputError."""
    usable = available_bytes * HEADROOM
    if memory.needs(requested) <= usable:
        return TokenBudget(requested, None)
    gib = 2**30
    need = f"about {memory.needs(requested) / gib:.1f} GiB for {requested:,} token slots"
    have = f"{available_bytes / gib:.1f} GiB available"
    rows = int((usable - memory.fixed_bytes) // (memory.bytes_per_token * max_length))
    if explicit or rows < 1:
        one_row = memory.needs(max_length) / gib
        raise InputError(
            f"a training step needs {need} ({one_row:.1f} GiB for one {max_length}-token row); {have}: "
            "give a smaller --token-budget or --max-length, or --config small",
            param="--token-budget",
        )
    tokens = rows * max_length
    return TokenBudget(tokens, f"token budget lowered from {requested:,} to {tokens:,}: {need}, {have}")


def available_memory(device: str) -> float:
    """Bytes a step can still take: the GPU's free memory, or the kernel's MemAvailable (/proc/meminfo)."""
    import torch

    if device.startswith("cuda"):
        return float(torch.cuda.mem_get_info(torch.device(device))[0])
    return float(_proc_bytes("/proc/meminfo", "MemAvailable"))


def _proc_bytes(path: str, field: str) -> int:
    """A size field ("Name:   123 kB") of a /proc file (/proc/meminfo, /proc/self/status), in bytes."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{path} has no {field}")


class PeakMemory:
    """The peak memory of what runs after it is made, on `device`: on CUDA torch's max_memory_allocated (every
    live tensor: weights, gradients, optimiser state, activations); on the CPU how far the resident set's
    peak rose above the resident set at the start (the kernel's VmHWM, reset here by writing 5 to
    /proc/self/clear_refs), so imports and libraries loaded before do not count. Hand-written: torch counts
    no CPU allocations, and tracemalloc sees Python's allocations, not torch's."""

    def __init__(self, device: str) -> None:
        import torch

        self.device, self.cuda = device, device.startswith("cuda")
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)
            self.meaning = "torch.cuda.max_memory_allocated over training"
        else:
            Path("/proc/self/clear_refs").write_text("5")
            self.start = _proc_bytes("/proc/self/status", "VmRSS")
            self.meaning = "peak resident set's rise over training"

    def peak_bytes(self) -> int:
        import torch

        if self.cuda:
            return torch.cuda.max_memory_allocated(self.device)
        return _proc_bytes("/proc/self/status", "VmHWM") - self.start
