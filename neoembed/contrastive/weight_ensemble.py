"""Weight-space ensembling with the base model: the export is a weighted average of the fine-tuned and the base
weights (WiSE-FT, Wortsman et al. 2022, "Robust fine-tuning of zero-shot models").

Fine-tuning a mature embedder on one narrow source (WordNet glosses) moves it towards that source and away
from others: on the cross-source FOLDOC set the fine-tuned MiniLM scores below its base. Averaging the two sets
of weights keeps most of the gain on the training distribution and recovers, often exceeds, the base model on
other text (docs/contrastive.md has the measured curve). Hand-written: neither sentence-transformers nor peft
offers weight averaging with the starting point, and it is one weighted sum per tensor.
"""

from __future__ import annotations

import torch

from neoembed.contrastive.lora import has_adapters, merge_adapters
from neoembed.contrastive.model import build_model
from neoembed.errors import RunError


class WeightMix:
    """The fine-tuned weights of `model` (or of a checkpoint, `retune`) and those of the base it was trained
    from (reloaded from `base` as `build_model` loads it), set on `model` mixed at any base weight: (1 - w) x
    fine-tuned + w x base. LoRA adapters are merged into the weights first."""

    def __init__(self, model, base: str, pooling: str, max_length: int, trust_remote_code: bool) -> None:
        if has_adapters(model):
            merge_adapters(model)
        self.model = model
        self.reference = build_model(base, pooling, max_length, trust_remote_code).state_dict()
        state = model.state_dict()
        mismatched = [
            k for k, v in state.items() if k not in self.reference or self.reference[k].shape != v.shape
        ]
        if mismatched:
            raise RunError(
                f"export.base_weight: the fine-tuned model and its base {base!r} differ in {mismatched[:3]}; "
                "their weights cannot be averaged"
            )
        self.retune(state)

    def retune(self, state: dict[str, torch.Tensor]) -> None:
        """Mix `state` (another checkpoint of the same run, by `model.state_dict()`'s names) from now on."""
        self.tuned = {k: v.detach().clone() for k, v in state.items() if v.is_floating_point()}

    def apply(self, base_weight: float) -> None:
        with torch.no_grad():
            for name, tensor in self.model.state_dict().items():
                if name in self.tuned:
                    reference = self.reference[name].to(tensor.device, tensor.dtype)
                    tensor.copy_(self.tuned[name].lerp(reference, base_weight))
