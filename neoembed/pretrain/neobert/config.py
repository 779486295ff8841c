"""`NeoBERTConfig`: the released NeoBERT config.json fields plus neoembed's runtime options."""

from __future__ import annotations

from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.modeling_rope_utils import RopeParameters

ATTENTION_BACKENDS: tuple[str, ...] = ("auto", "sdpa", "eager", "unpadded")

# transformers' `attn_implementation` names and the `attn_backend` each selects, and back: the implementation
# transformers reports (`config._attn_implementation`) for each backend.
BACKEND_OF_IMPLEMENTATION = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "unpadded"}
IMPLEMENTATION_OF_BACKEND = {
    "auto": "sdpa",
    "sdpa": "sdpa",
    "eager": "eager",
    "unpadded": "flash_attention_2",
}

# RoPE scalings whose inverse frequencies transformers computes for us (ROPE_INIT_FUNCTIONS).
SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "yarn")


def swiglu_hidden_size(intermediate_size: int, multiple_of: int = 8) -> int:
    """Effective SwiGLU width: 2/3 of `intermediate_size`, rounded up to a multiple of 8 (3072 -> 2048)."""
    return multiple_of * ((int(2 * intermediate_size / 3) + multiple_of - 1) // multiple_of)


@strict
class NeoBERTConfig(PreTrainedConfig):
    r"""Configuration of a NeoBERT encoder.

    The first block of fields are the released checkpoint's config.json fields, with its defaults (the 250M
    model), so a released checkpoint directory loads unchanged. The second block are neoembed options:

    - `rope_parameters`: transformers' RoPE dict. `{"rope_type": "default", "rope_theta": 10000.0}` is the
      released model. For inputs longer than the trained length use YaRN, e.g.
      `{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}`
      (also accepted: `linear` and `dynamic`).
    - `attn_backend`: `auto` (unpadded when a batch has padding and unpadding pays, else padded SDPA), `sdpa`
      (padded; the mask is dropped when nothing is padded), `unpadded` (linear layers on real tokens only,
      attention per sequence via `cu_seqlens`: flash-attn's or torch's varlen kernel on CUDA in bf16/fp16,
      grouped SDPA elsewhere), or `eager` (explicit softmax; used automatically when attention weights are
      requested).
    - transformers' `attn_implementation` (`from_pretrained(..., attn_implementation=...)`,
      `set_attn_implementation`) selects a backend: `"eager"` -> `eager`, `"flash_attention_2"` -> `unpadded`
      (its varlen kernel, or torch's when flash-attn does not import, or grouped SDPA on CPU), `"sdpa"` ->
      `sdpa`, except that `auto` already counts as `"sdpa"` and is kept. Not requesting one keeps `attn_backend`;
      the model then reports `"sdpa"` for `auto`/`sdpa`, `"eager"` and `"flash_attention_2"` for the others.
    - `classifier_dropout`: dropout of the sequence-classification head.
    - `sparse_prediction`: with labels, the MLM head projects only the masked positions to the vocabulary and
      returns logits for those alone (ModernBERT's option of the same name); the loss is unchanged and the
      decoder's cost falls by the masking rate. Pretraining turns it on.
    """

    model_type = "neobert"
    # The release calls the context length `max_length`; sentence-transformers and others read the HF name.
    attribute_map = {"max_position_embeddings": "max_length", "rms_norm_eps": "norm_eps"}

    hidden_size: int = 768
    num_hidden_layers: int = 28
    num_attention_heads: int = 12
    dim_head: int | None = None
    intermediate_size: int = 3072
    vocab_size: int = 30522
    pad_token_id: int | None = 0
    max_length: int = 4096
    norm_eps: float = 1e-5
    embedding_init_range: float = 0.02
    decoder_init_range: float = 0.02
    classifier_init_range: float = 0.02

    rope_parameters: RopeParameters | dict | None = None
    attn_backend: str = "auto"
    classifier_dropout: float = 0.0
    sparse_prediction: bool = False

    def __post_init__(self, **kwargs):
        if self.dim_head is None:
            self.dim_head = self.hidden_size // self.num_attention_heads
        if self.rope_parameters is None:
            self.rope_parameters = {"rope_type": "default", "rope_theta": kwargs.pop("rope_theta", 10000.0)}
        super().__post_init__(**kwargs)

    @property
    def head_dim(self) -> int:
        assert self.dim_head is not None  # __post_init__ derives it when not given
        return self.dim_head

    @property
    def ffn_hidden_size(self) -> int:
        return swiglu_hidden_size(self.intermediate_size)

    def validate_architecture(self):
        """Called by `@strict` validation: reject configs the model cannot be built from, naming the field."""
        if self.dim_head * self.num_attention_heads != self.hidden_size:
            raise ValueError(
                f"dim_head ({self.dim_head}) x num_attention_heads ({self.num_attention_heads}) must equal "
                f"hidden_size ({self.hidden_size})"
            )
        if self.dim_head % 2:
            raise ValueError(f"dim_head must be even for rotary embeddings, got {self.dim_head}")
        if self.attn_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attn_backend must be one of {ATTENTION_BACKENDS}, got {self.attn_backend!r}")
        rope_type = (self.rope_parameters or {}).get("rope_type", "default")
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"rope_parameters.rope_type must be one of {SUPPORTED_ROPE_TYPES}, got {rope_type!r}"
            )


def backend_for_implementation(requested: str | None, backend: str) -> str:
    """The `attn_backend` a model runs when transformers' `attn_implementation` is `requested` (None: not
    requested) and the config says `backend`."""
    if requested is None or requested == IMPLEMENTATION_OF_BACKEND[backend]:
        return backend
    if requested not in BACKEND_OF_IMPLEMENTATION:
        raise ValueError(
            f"NeoBERT supports attn_implementation {sorted(BACKEND_OF_IMPLEMENTATION)}, got {requested!r}"
        )
    return BACKEND_OF_IMPLEMENTATION[requested]


def tiny_config(**overrides) -> NeoBERTConfig:
    """A NeoBERT small enough for tests and CPU demos (2 layers x 64 hidden), same vocabulary."""
    fields: dict[str, Any] = dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=192, max_length=512
    )
    fields.update(overrides)
    return NeoBERTConfig(**fields)
