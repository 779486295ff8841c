"""The paper's learning-rate schedule, as a multiplier of the peak rate."""

from __future__ import annotations

import math


def lr_multiplier(
    step: int, *, warmup_steps: int, total_steps: int, decay_fraction: float = 0.9, min_ratio: float = 0.1
) -> float:
    """Linear warmup to the peak, cosine decay to `min_ratio` of it by `decay_fraction` of the steps,
    then constant. transformers' `cosine_with_min_lr` decays over all steps, hence this small function."""
    if step < warmup_steps:
        return step / warmup_steps
    decay_end = max(warmup_steps + 1, int(decay_fraction * total_steps))
    if step >= decay_end:
        return min_ratio
    progress = (step - warmup_steps) / (decay_end - warmup_steps)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
