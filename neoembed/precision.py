"""One answer to "which precision here?" for training, inference and serving.

`resolve_precision(requested, device)` says which device runs the work, whether it has bf16 matrix units, the
dtype to cast weights to for inference, and the mixed-precision flags to hand the Trainer. Everything that picks
bf16/fp16 asks here, so `auto` means the same on every command.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from neoembed.errors import InputError

# Accepted spellings: the dtype names (serving, evaluation) and the recipes' short names.
_ALIASES = {
    "auto": "auto",
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}


@dataclass(frozen=True)
class Precision:
    device: str  # device type: "cuda", "cpu", "mps"
    bf16_supported: bool  # bf16 runs on matrix units here (not emulated)
    weight_dtype: torch.dtype  # inference: the dtype weights are cast to
    train_bf16: bool  # training: bf16 autocast over fp32 master weights (the Trainer's `bf16`)
    train_fp16: bool  # training: fp16 autocast with loss scaling (the Trainer's `fp16`)


def cpu_has_bf16_units(capability: str, avx512_bf16: bool, amx_tile: bool) -> bool:
    """Whether a CPU multiplies bf16 matrices in hardware (oneDNN's AVX512-BF16 or AMX kernels), from torch's
    reported capability ("AVX2", "AVX512", ...) and its ISA probes. Elsewhere torch emulates bf16 matmuls,
    often far slower than fp32 (about 1 GFLOP/s on an AVX2-only core)."""
    return capability == "AVX512" and (avx512_bf16 or amx_tile)


# "1" or "0" answers "does this CPU have bf16 matrix units?" instead of the hardware. The test suite sets it to
# run every dtype choice both ways on any machine (child processes, such as a server's, inherit it); a user
# can set 0 to keep `auto` in fp32 on a machine where bf16 is not wanted.
CPU_BF16_ENV = "NEOEMBED_CPU_BF16"


def cpu_bf16_units() -> bool:
    """Whether this CPU multiplies bf16 in hardware: the one place that asks, overridable by `CPU_BF16_ENV`."""
    override = os.environ.get(CPU_BF16_ENV)
    if override is not None:
        if override not in ("0", "1"):
            raise InputError(f"{CPU_BF16_ENV} must be 0 or 1, got {override!r}", param=CPU_BF16_ENV)
        return override == "1"
    return cpu_has_bf16_units(
        torch.backends.cpu.get_cpu_capability(),
        torch.cpu._is_avx512_bf16_supported(),
        torch.cpu._is_amx_tile_supported(),
    )


def bf16_supported(device: str) -> bool:
    if device == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device == "cpu":
        return cpu_bf16_units()
    return False


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def local_device() -> str:
    """This process's device: under a launcher with several ranks per machine, the GPU of its local rank."""
    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"


def synchronize(device: str) -> None:
    """Wait for the work queued on `device` (CUDA runs asynchronously), so a timer reads finished work."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def resolve_precision(requested: str = "auto", device: str | None = None) -> Precision:
    """The precision for `requested` ("auto", "float32", "bfloat16", "float16", or fp32/bf16/fp16) on `device`
    (a device string such as "cuda:1"; None: CUDA when present, else CPU).

    `auto`: inference in bf16 where it has hardware (a CUDA device that has it, or a CPU with AVX512-BF16/AMX),
    fp16 on older GPUs, fp32 elsewhere (`neoembed.probe` then checks a lower precision against fp32); training
    with bf16 autocast over fp32 master weights wherever bf16 has hardware (CUDA, or such a CPU), else fp32
    (fp16 training needs loss scaling and is only ever asked for explicitly).
    """
    name = _ALIASES.get(requested)
    if name is None:
        raise InputError(
            f"unknown precision {requested!r}; choose auto, float32, bfloat16 or float16", param="precision"
        )
    device_type = torch.device(device or default_device()).type
    bf16 = bf16_supported(device_type)
    if name == "auto":
        on_cuda = device_type == "cuda"
        weight_dtype = torch.bfloat16 if bf16 else torch.float16 if on_cuda else torch.float32
        return Precision(device_type, bf16, weight_dtype, train_bf16=bf16, train_fp16=False)
    if name == "bfloat16" and device_type == "cuda" and not bf16:
        raise InputError(
            f"bfloat16 was requested but {torch.cuda.get_device_name()} does not support it; "
            "use float16 or float32",
            param="precision",
        )
    weight_dtype = getattr(torch, name)
    return Precision(
        device_type, bf16, weight_dtype, train_bf16=name == "bfloat16", train_fp16=name == "float16"
    )
