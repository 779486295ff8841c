"""Rotary position embeddings in NeoBERT's convention: interleaved pairs, computed in fp32.

NeoBERT rotates adjacent pairs (x[2i], x[2i+1]) as one complex number, not the two halves of the head
("rotate-half"). The tables are plain tensors computed from the config on the device that asks for them, never
registered buffers: a buffer would be cast by `.to(bf16)` and left uninitialised by meta-device loading, the
two ways the release's complex buffer produced wrong or NaN outputs.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS


class RotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.rope_type = config.rope_parameters.get("rope_type", "default")
        self._inv_freq: dict[tuple, tuple[torch.Tensor, float]] = {}

    def _inverse_frequencies(self, device: torch.device, seq_len: int) -> tuple[torch.Tensor, float]:
        # Only dynamic NTK scaling depends on the length; the others are cached per device.
        key = (device, seq_len if self.rope_type == "dynamic" else None)
        if key not in self._inv_freq:
            if self.rope_type == "default":
                theta = self.config.rope_parameters["rope_theta"]
                dim = self.config.head_dim
                exponents = torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim
                self._inv_freq[key] = (1.0 / theta**exponents, 1.0)
            else:
                inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[self.rope_type](
                    self.config, device, seq_len=seq_len
                )
                self._inv_freq[key] = (inv_freq.to(device=device, dtype=torch.float32), attention_factor)
        return self._inv_freq[key]

    @torch.no_grad()
    def forward(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 (cos, sin) tables of shape `position_ids.shape + (head_dim // 2,)`."""
        seq_len = int(position_ids.max()) + 1 if self.rope_type == "dynamic" else self.config.max_length
        inv_freq, attention_factor = self._inverse_frequencies(position_ids.device, seq_len)
        angles = position_ids.to(torch.float32).unsqueeze(-1) * inv_freq
        return angles.cos() * attention_factor, angles.sin() * attention_factor


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of `x` (..., heads, head_dim) by tables (..., 1, head_dim // 2), in fp32."""
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs.unbind(-1)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)
