"""Registration of NeoBERT with the transformers Auto classes (run on `import neoembed`)."""

from __future__ import annotations

from .config import NeoBERTConfig
from .modeling import NeoBERTForMaskedLM, NeoBERTForSequenceClassification, NeoBERTModel


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
