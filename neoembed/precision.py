"""One answer to "which precision here?" for training, inference and serving.

`resolve_precision(requested, device)` says which device runs the work, whether it has bf16 matrix units, the
dtype to cast weights to for inference, and the mixed-precision flags to hand the Trainer. Everything that picks
bf16/fp16 asks here, so `auto` means the same on every command.

On a CPU, instructions are not speed: a 2-core Xeon with AVX512-BF16 and no AMX multiplied bf16 matrices at
0.62x its fp32 rate, a Zen 4 at 2.8x. So `auto` takes bf16 on a CPU only where a short matmul in both dtypes
says it is faster (`cpu_bf16_choice`), timed once per CPU model, flags, torch version and thread count and
remembered in the cache folder.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from neoembed.cache import cache_root
from neoembed.errors import InputError
from neoembed.run_files import write_json

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
    why: str = ""  # for `auto` on a CPU: what decided ("2.8x fp32 on this CPU"), for the first line


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


# The instruction-set extensions that decide which kernels run (bf16 units, AMX), as /proc/cpuinfo names them.
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")
TIMING_FILE = "cpu-bf16-speed.json"  # in the cache folder: measured bf16/fp32 matmul speed per machine kind
TIMED_SIZE = 1024  # the square matmul timed: milliseconds per dtype, as `neoembed info` times it


def _cpuinfo(field: str) -> str | None:
    """The first `field : value` of /proc/cpuinfo, None where there is none."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next(
        (line.split(":", 1)[1].strip() for line in lines if line.split(":")[0].strip() == field), None
    )


def cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown"


def cpu_flags() -> str:
    """The `CPU_FLAGS` this CPU has, space-separated."""
    flags = set((_cpuinfo("flags") or "").split())
    return " ".join(flag for flag in CPU_FLAGS if flag in flags) or "none of " + ", ".join(CPU_FLAGS)


def measure_bf16_speedup(size: int = TIMED_SIZE, repeats: int = 5) -> float:
    """bf16 matmul throughput over fp32's on this CPU at torch's thread count: the best of `repeats`
    alternating runs of each (about a tenth of a second in all)."""
    left, right = torch.randn(size, size), torch.randn(size, size)
    pairs = {torch.float32: (left, right), torch.bfloat16: (left.bfloat16(), right.bfloat16())}
    best = dict.fromkeys(pairs, float("inf"))
    for a, b in pairs.values():
        a @ b  # the first call allocates and picks kernels
    for _ in range(repeats):
        for dtype, (a, b) in pairs.items():
            start = time.perf_counter()
            a @ b
            best[dtype] = min(best[dtype], time.perf_counter() - start)
    return best[torch.float32] / best[torch.bfloat16]


@dataclass(frozen=True)
class CpuBf16:
    """Whether `auto` computes in bf16 on this CPU, and why."""

    use: bool
    why: str

    @property
    def line(self) -> str:
        """`bf16: 2.8x fp32 on this CPU`, `fp32: bf16 runs at 0.62x here`, ...: what the first line says."""
        return f"{'bf16' if self.use else 'fp32'}: {self.why}"


def cpu_bf16_choice() -> CpuBf16:
    """bf16 where this CPU multiplies in it faster than in fp32, measured (`measure_bf16_speedup`) once per
    machine kind and remembered (`TIMING_FILE`); `CPU_BF16_ENV` decides instead where it is set."""
    if os.environ.get(CPU_BF16_ENV) is not None:
        forced = cpu_bf16_units()
        return CpuBf16(forced, f"set by {CPU_BF16_ENV}={int(forced)}")
    if not cpu_bf16_units():
        return CpuBf16(False, "no bf16 matrix units on this CPU")
    speedup = _remembered_speedup(cpu_name(), cpu_flags(), torch.__version__, torch.get_num_threads())
    if speedup >= 1.0:
        return CpuBf16(True, f"{speedup:.1f}x fp32 on this CPU")
    return CpuBf16(False, f"bf16 runs at {speedup:.2f}x here")


@functools.cache
def _remembered_speedup(cpu: str, flags: str, torch_version: str, threads: int) -> float:
    """The measured speedup of this machine kind: from the cache folder, else measured now and written there."""
    path = cache_root() / TIMING_FILE
    key = f"{cpu} | {flags} | torch {torch_version} | {threads} threads"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known.get(key), dict) or not isinstance(known[key].get("speedup"), float):
        known[key] = {"speedup": round(measure_bf16_speedup(), 3), "measured": time.strftime("%Y-%m-%d")}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, known)
    return known[key]["speedup"]


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

    `auto`: inference in bf16 where it has hardware (a CUDA device that has it, or a CPU with AVX512-BF16/AMX
    on which bf16 measured faster than fp32, `cpu_bf16_choice`), fp16 on older GPUs, fp32 elsewhere
    (`neoembed.probe` then checks a lower precision against fp32); training with bf16 autocast over fp32
    master weights wherever inference takes bf16, else fp32 (fp16 training needs loss scaling and is only ever
    asked for explicitly).
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
        use, why = bf16, ""
        if device_type == "cpu":
            choice = cpu_bf16_choice()
            use, why = choice.use, choice.why
        weight_dtype = torch.bfloat16 if use else torch.float16 if on_cuda else torch.float32
        return Precision(device_type, bf16, weight_dtype, train_bf16=use, train_fp16=False, why=why)
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
