"""LoRA through peft: adapters on the encoder's linear layers for training, merged into the weights for export.

Adapters are added with sentence-transformers' `add_adapter` (the transformers/peft integration), so the
trainer's checkpoints hold only the adapter weights and load back (resume) through sentence-transformers' own
adapter loading. The export merges them, leaving a plain sentence-transformers directory.
"""

from __future__ import annotations

from neoembed.contrastive.model import BaseModelError
from neoembed.contrastive.settings import LoraSettings


def default_targets(model_type: str) -> list[str] | str:
    """peft's per-architecture default (query/value for BERT, RoBERTa, ...), else every linear layer of the
    encoder (NeoBERT: qkv, wo, ffn.w12, ffn.w3; ModernBERT: Wqkv, Wo, Wi, ...)."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    targets = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type)
    return "all-linear" if targets is None else list(targets)


def add_lora(model, settings: LoraSettings) -> None:
    """Add a trainable LoRA adapter to `model`'s transformer; every base weight is frozen."""
    from peft import LoraConfig

    transformer = model[0].auto_model
    targets = settings.target_modules or default_targets(transformer.config.model_type)
    config = LoraConfig(
        r=settings.r,
        # peft annotates lora_alpha as int, but only divides it by r (its scaling): a float scales as asked.
        lora_alpha=settings.alpha,  # type: ignore[arg-type]
        lora_dropout=settings.dropout,
        target_modules=targets,
    )
    try:
        model.add_adapter(config)
    except ValueError as err:  # e.g. target modules that match no layer
        raise BaseModelError(f"model.lora.target_modules {targets!r}: {err}") from err


def has_adapters(model) -> bool:
    return bool(getattr(model[0].auto_model, "_hf_peft_config_loaded", False))


def merge_adapters(model) -> None:
    """Fold every LoRA adapter into its base layer's weight and put the base layer back in its place.

    Written here because peft merges only through its tuner object (`PeftModel.merge_and_unload`), which the
    transformers integration that sentence-transformers uses does not keep; this loop is what that method does
    with the same layer-level calls (`merge`, `get_base_layer`)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    transformer = model[0].auto_model
    for name, module in list(transformer.named_modules()):
        if isinstance(module, BaseTunerLayer):
            module.merge()
            parent, _, child = name.rpartition(".")
            setattr(transformer.get_submodule(parent), child, module.get_base_layer())
    del transformer.peft_config
    transformer._hf_peft_config_loaded = False
