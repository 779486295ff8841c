"""Turn a base model name into a SentenceTransformer to fine-tune, refusing what is not a text encoder.

A sentence-transformers directory (or `minilm`) loads as it is; a plain transformers encoder directory or hub
id gets a Transformer + Pooling (+ Normalize) stack. NeoBERT loads through the Auto classes because
`import neoembed` registered it.
"""

from __future__ import annotations

from pathlib import Path

from neoembed.embedder import EmbedderError, load_embedder, resolve_model_name, set_max_seq_length
from neoembed.errors import InputError


class BaseModelError(InputError):
    """A base model that cannot be fine-tuned as an encoder; the message says why."""


def _is_sentence_transformers_dir(name: str) -> bool:
    return (Path(name) / "modules.json").exists()


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")


def check_trainable(name: str) -> None:
    """Refuse a local directory holding an ONNX graph and no torch weights: ONNX Runtime serves it, nothing
    here can train it."""
    path = Path(resolve_model_name(name))
    if not (path / "onnx").is_dir() and not any(path.glob("*.onnx")):
        return
    if not any(next(path.rglob(pattern), None) for pattern in WEIGHT_FILES):
        raise BaseModelError(
            f"model.base {name!r} holds an ONNX graph and no trainable weights (safetensors); train the model "
            "directory it was exported from",
            param="model.base",
        )


def check_encoder(config, name: str) -> None:
    """Refuse decoder-only and encoder-decoder models: InfoNCE here pools a bidirectional encoder."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = getattr(config, "model_type", "")
    decoder_only = model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in (
        MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )
    if getattr(config, "is_encoder_decoder", False) or getattr(config, "is_decoder", False) or decoder_only:
        raise BaseModelError(
            f"model.base {name!r} is a {model_type or 'non-encoder'} model (decoder or encoder-decoder); "
            "contrastive fine-tuning needs an encoder such as BERT, RoBERTa, ModernBERT or NeoBERT"
        )


def build_model(base: str, pooling: str, max_length: int, trust_remote_code: bool = False):
    """A SentenceTransformer for `base` with sequences truncated at `max_length`."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import AutoConfig

    check_trainable(base)
    resolved = resolve_model_name(base)
    try:
        if _is_sentence_transformers_dir(resolved):
            model = load_embedder(resolved, trust_remote_code=trust_remote_code)
        else:
            config = AutoConfig.from_pretrained(resolved, trust_remote_code=trust_remote_code)
            check_encoder(config, base)
            remote = {"trust_remote_code": trust_remote_code}
            transformer = Transformer(
                resolved, model_kwargs=remote, config_kwargs=remote, processor_kwargs=remote
            )
            dim = transformer.get_embedding_dimension()
            model = SentenceTransformer(modules=[transformer, Pooling(dim, pooling), Normalize()])
    except (OSError, ValueError, KeyError, EmbedderError) as err:
        if isinstance(err, BaseModelError):
            raise
        raise BaseModelError(f"model.base {base!r} cannot be loaded: {err}") from err
    config = model[0].auto_model.config
    check_encoder(config, base)
    set_max_seq_length(model, max_length, name=base, what="model.max_length", error=BaseModelError)
    return model
