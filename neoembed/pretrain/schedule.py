"""Learning-rate schedules as a multiplier of the peak rate: the paper's cosine, and warmup-stable-decay.

transformers' `cosine_with_min_lr` decays over all steps and its `warmup_stable_decay` needs the phase lengths
in steps and decays to zero by default; these small functions take the recipe's fractions instead.
"""

from __future__ import annotations

import math


def lr_multiplier(
    step: int, *, warmup_steps: int, total_steps: int, decay_fraction: float = 0.9, min_ratio: float = 0.1
) -> float:
    """Linear warmup to the peak, cosine decay to `min_ratio` of it by `decay_fraction` of the steps,
    then constant (the paper's schedule)."""
    if step < warmup_steps:
        return step / warmup_steps
    decay_end = max(warmup_steps + 1, int(decay_fraction * total_steps))
    if step >= decay_end:
        return min_ratio
    progress = (step - warmup_steps) / (decay_end - warmup_steps)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def wsd_multiplier(
    step: int,
    *,
    warmup_steps: int,
    total_steps: int,
    decay_steps_fraction: float = 0.1,
    min_ratio: float = 0.0,
) -> float:
    """Warmup-stable-decay: linear warmup, the peak held, then over the last `decay_steps_fraction` of the
    steps a 1-sqrt decay to `min_ratio` (the trapezoidal schedule ModernBERT trained with). A run stopped
    anywhere in the stable phase can be decayed later from its checkpoint."""
    if step < warmup_steps:
        return step / warmup_steps
    decay_start = max(warmup_steps, total_steps - int(decay_steps_fraction * total_steps))
    if step < decay_start:
        return 1.0
    progress = min(1.0, (step - decay_start) / max(1, total_steps - decay_start))
    return min_ratio + (1.0 - min_ratio) * (1.0 - math.sqrt(progress))
