"""The NeoBERT backbone (config, modeling, attention backends, RoPE) and MLM pretraining."""

from neoembed.pretrain.config import NeoBERTConfig, tiny_config
from neoembed.pretrain.modeling import (
    NeoBERTForMaskedLM,
    NeoBERTForSequenceClassification,
    NeoBERTModel,
    NeoBERTPreTrainedModel,
)

__all__ = [
    "NeoBERTConfig",
    "NeoBERTForMaskedLM",
    "NeoBERTForSequenceClassification",
    "NeoBERTModel",
    "NeoBERTPreTrainedModel",
    "register_auto_classes",
    "tiny_config",
]


def register_auto_classes() -> None:
    """Make `model_type: neobert` loadable by AutoConfig/AutoModel/AutoModelFor{MaskedLM,SequenceClassification}
    (and so by sentence-transformers' Transformer module) without remote code. Idempotent."""
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForMaskedLM,
        AutoModelForSequenceClassification,
    )

    AutoConfig.register("neobert", NeoBERTConfig, exist_ok=True)
    AutoModel.register(NeoBERTConfig, NeoBERTModel, exist_ok=True)
    AutoModelForMaskedLM.register(NeoBERTConfig, NeoBERTForMaskedLM, exist_ok=True)
    AutoModelForSequenceClassification.register(
        NeoBERTConfig, NeoBERTForSequenceClassification, exist_ok=True
    )
