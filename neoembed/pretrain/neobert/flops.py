"""Model FLOPs of encoder forwards and MLM training batches, and device peak FLOP/s, for MFU.

MFU = model FLOPs of the real tokens trained / (seconds x device peak). Padding and recomputation are not
model FLOPs, so a padded batch and the same sequences packed have the same FLOPs; the faster layout has the
higher MFU.
"""

from __future__ import annotations

import time

import torch

from neoembed.precision import synchronize

from .config import NeoBERTConfig

# Dense bf16/fp16 tensor-core peaks (TFLOP/s, no sparsity) by a substring of `torch.cuda.get_device_name()`.
# Checked in order, so more specific names come first: the H100 NVL (835) and PCIe (756) parts before the SXM
# one (989), whose name is just "NVIDIA H100 80GB HBM3".
KNOWN_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("GH200", 989.0),
    ("H200 NVL", 835.0),
    ("H200", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
)


def known_peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a GPU named `device_name`, or None for a GPU not in the table."""
    for key, tflops in KNOWN_PEAK_TFLOPS:
        if key in device_name:
            return tflops
    return None


def device_peak_flops(override_tflops: float | None, half_precision: bool) -> float | None:
    """FLOP/s for MFU: the override when given, else the table's peak for this CUDA device when training in
    bf16/fp16 (the table holds no fp32 peaks), else None (no MFU)."""
    if override_tflops:
        return override_tflops * 1e12
    if half_precision and torch.cuda.is_available():
        tflops = known_peak_tflops(torch.cuda.get_device_name())
        return tflops * 1e12 if tflops else None
    return None


def measured_matmul_flops(device: str, dtype: torch.dtype, repeats: int = 5) -> float:
    """FLOP/s of a square matmul in `dtype` here, the best of `repeats`: the peak on devices not in the table."""
    size = 4096 if device.startswith("cuda") else 2048
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    best = float("inf")
    for _ in range(repeats + 1):  # the first warms up
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def device_peak(device: str, dtype: torch.dtype, override_tflops: float | None) -> tuple[float, str]:
    """(peak FLOP/s, where it came from): the override, the table of known GPUs (bf16), or a measured matmul."""
    half = device.startswith("cuda") and dtype == torch.bfloat16
    known = device_peak_flops(override_tflops, half_precision=half)
    if known:
        source = (
            "--peak-tflops" if override_tflops else f"{torch.cuda.get_device_name()}: dense bf16 peak (table)"
        )
        return known, source
    return measured_matmul_flops(device, dtype), f"measured {str(dtype).removeprefix('torch.')} matmul"


def forward_flops(config: NeoBERTConfig, tokens: float, sum_squared_lengths: float) -> float:
    """Encoder forward FLOPs of a batch: 2 x the matmul parameters each of its `tokens` goes through, and
    attention's 4 x layers x hidden x sum(L^2) over its sequences of lengths L (QK^T and AV, each 2 L^2 hidden)."""
    hidden, layers, ffn = config.hidden_size, config.num_hidden_layers, config.ffn_hidden_size
    per_layer = 4 * hidden * hidden + 3 * hidden * ffn  # qkv + wo, w12 + w3
    return 2 * layers * per_layer * tokens + 4 * layers * hidden * sum_squared_lengths


def training_flops(config: NeoBERTConfig, tokens: float, sum_squared_lengths: float, decoded: float) -> float:
    """Forward plus backward FLOPs of an MLM batch: 3 x the encoder's forward, and the MLM decoder for the
    `decoded` tokens only (sparse prediction: the masked ones)."""
    decoder = 2 * config.hidden_size * config.vocab_size * decoded
    return 3 * (forward_flops(config, tokens, sum_squared_lengths) + decoder)
