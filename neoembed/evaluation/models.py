"""Load any model for MTEB under one uniform protocol.

A model name is one of:

- ``bm25``: mteb's lexical baseline (``mteb/baseline-bm25s``); it only runs retrieval-type tasks;
- a sentence-transformers directory, hub id, or the packaged ``minilm`` alias (through
  ``neoembed.embedder.load_embedder``);
- a plain Hugging Face encoder directory or hub id (``config.json``, no ``modules.json``), turned into an
  embedder by the protocol's pooling.

Every embedder then gets the same protocol (``EvalSettings``): max length, pooling, dtype, normalisation
and prompts (none unless given, as in the paper). The settings that change scores become the mteb
``experiment_kwargs`` of the model's ``ModelMeta``, so results under other settings never share a cache entry.
A directory exported by ``neoembed contrastive`` carries its own ModelMeta (``mteb_model_meta.json``: training
datasets, dimensions, ...), which becomes the base of that identity and is saved with the results.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field

from neoembed.compilation import CompileSetting, compile_for_inference
from neoembed.embedder import (
    MINILM_ALIASES,
    EmbedderError,
    load_embedder,
    packaged_minilm_path,
    position_limit,
    resolve_model_name,
)
from neoembed.errors import InputError
from neoembed.evaluation.model_meta import META_FILE, read_model_meta
from neoembed.finite import require_finite
from neoembed.recipes import StrictSettings

BM25_NAMES = ("bm25", "bm25s")
BM25_MTEB_NAME = "mteb/baseline-bm25s"


class ModelLoadError(InputError):
    """A model name that cannot be evaluated; the message says why."""


class EvalSettings(StrictSettings):
    """The uniform protocol applied to every embedder (bm25 ignores all but the prompts' absence); each field
    but the prompts is the `mteb-eval` option of the same name."""

    model_config = ConfigDict(frozen=True)

    max_length: int = Field(512, ge=1)
    """Max tokens per text (capped at the model's positions)."""
    batch_size: int = Field(32, ge=1)
    """Encoding batch size."""
    pooling: Literal["mean", "cls", "max", "lasttoken"] = "mean"
    """Pooling for every embedder (the paper's: mean)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype."""
    normalize: bool = True
    """L2-normalise embeddings."""
    prompts: dict[str, str] = Field(default_factory=dict)
    """mteb prompt keys: a task name, a task type, "query"/"document", or "<task or type>-<query|document>"."""

    def scoring_settings(self) -> dict[str, Any]:
        """The settings that can change scores (all but batch size): the cache namespace of a run."""
        return self.model_dump(exclude={"batch_size"})

    def encode_kwargs(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "show_progress_bar": False}


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model name, known before any weights are loaded."""

    label: str  # the column title in summaries
    kind: str  # "bm25" | "sentence-transformers" | "hf-encoder"
    source: str  # local directory or hub id to load from ("" for bm25)
    meta: Any  # mteb.ModelMeta: name + revision + experiment_kwargs = the cache identity

    @property
    def is_lexical(self) -> bool:
        return self.kind == "bm25"


def _fingerprint(directory: Path) -> str:
    """Content hash of a model directory (file names and bytes, model card and ModelMeta excluded): its cache
    revision."""
    digest = hashlib.sha256()
    for file in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = file.relative_to(directory).as_posix()
        if rel in ("README.md", META_FILE) or rel.startswith("."):
            continue
        digest.update(rel.encode())
        file_hash = hashlib.sha256()  # hashlib.file_digest would do, from Python 3.11 on
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                file_hash.update(block)
        digest.update(file_hash.digest())
    return digest.hexdigest()[:12]


def _local_kind(directory: Path) -> str:
    if (directory / "modules.json").is_file():
        return "sentence-transformers"
    if (directory / "config.json").is_file():
        return "hf-encoder"
    raise ModelLoadError(
        f"cannot load model {str(directory)!r}: the directory has neither modules.json "
        "(a sentence-transformers model) nor config.json (a transformers encoder)"
    )


def _hub_kind_and_revision(repo_id: str) -> tuple[str, str]:
    """Kind and commit of a hub model, from the files mteb's loaders will read (cached, or fetched when online)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

    problems = []
    for filename, kind in (("modules.json", "sentence-transformers"), ("config.json", "hf-encoder")):
        try:
            path = Path(hf_hub_download(repo_id, filename))
        except (EntryNotFoundError, LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as err:
            problems.append(f"{filename}: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        return kind, path.parent.name[:12]  # .../snapshots/<commit>/<file>
    raise ModelLoadError(
        f"cannot load model {repo_id!r}: it is not a local directory, not an alias "
        f"({', '.join(MINILM_ALIASES[:1] + BM25_NAMES[:1])}), and not loadable from the Hugging Face hub or "
        f"its local cache ({'; '.join(problems)})"
    )


def _is_packaged_minilm(path: Path) -> bool:
    try:
        return path.resolve() == packaged_minilm_path().resolve()
    except EmbedderError:  # the embedded extra is not installed
        return False


def _model_meta(name: str, revision: str, settings: EvalSettings | None, stored: Any = None) -> Any:
    """The cache identity: `stored` (an export's ModelMeta) or an empty meta, with name, revision and the
    protocol's scoring settings."""
    from neoembed.mteb_setup import mteb

    identity = {
        "name": name,
        "revision": revision,
        "experiment_kwargs": settings.scoring_settings() if settings else None,
    }
    if stored is not None:
        return stored.model_copy(update={k: v for k, v in identity.items() if k != "name"})
    return mteb.models.ModelMeta.create_empty(overwrites=identity)


def resolve_model(name: str, settings: EvalSettings) -> ModelSpec:
    """Resolve `name` to what will be loaded and its cache identity, without loading weights."""
    if name.lower() in BM25_NAMES:
        from neoembed.mteb_setup import mteb

        return ModelSpec(label="bm25", kind="bm25", source="", meta=mteb.get_model_meta(BM25_MTEB_NAME))
    try:
        resolved = resolve_model_name(name)
    except EmbedderError as err:
        raise ModelLoadError(str(err)) from err
    path = Path(resolved).expanduser()
    if path.is_dir():
        kind = _local_kind(path)
        if name in MINILM_ALIASES or _is_packaged_minilm(path):
            label, meta_name = "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"
        else:
            label, meta_name = path.resolve().name, f"local/{path.resolve().name}"
        meta = _model_meta(meta_name, _fingerprint(path), settings, read_model_meta(path))
        return ModelSpec(label, kind, str(path), meta)
    if path.exists():
        raise ModelLoadError(f"cannot load model {name!r}: {path} is a file, not a model directory")
    if name.count("/") != 1 or name.startswith((".", "/", "~")):
        raise ModelLoadError(
            f"cannot load model {name!r}: no such directory, and not a hub id of the form 'org/name' "
            f"(or one of: {', '.join(BM25_NAMES[:1] + MINILM_ALIASES[:1])})"
        )
    kind, revision = _hub_kind_and_revision(name)
    return ModelSpec(name, kind, name, _model_meta(name, revision, settings))


def apply_protocol(model, settings: EvalSettings):
    """Rebuild a SentenceTransformer with the protocol's pooling, normalisation, max length and dtype."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as st

    modules = []
    for module in model:
        if isinstance(module, st.Normalize):
            continue  # re-added below exactly when the protocol asks for it
        if isinstance(module, st.Pooling) and module.pooling_mode != settings.pooling:
            module = st.Pooling(module.embedding_dimension, pooling_mode=settings.pooling)
        modules.append(module)
    if settings.normalize:
        modules.append(st.Normalize())
    rebuilt = SentenceTransformer(modules=modules, device=str(model.device))
    limit = position_limit(rebuilt)
    rebuilt.max_seq_length = min(settings.max_length, limit) if limit else settings.max_length
    rebuilt.prompts = {}  # the protocol's prompts only: none unless given
    rebuilt.default_prompt_name = None
    return rebuilt.to(getattr(torch, settings.dtype))


def load_sentence_transformer(spec: ModelSpec, settings: EvalSettings, device: str | None = None):
    """The protocol-applied SentenceTransformer of an embedder spec (not bm25)."""
    if spec.kind == "sentence-transformers":
        try:
            model = load_embedder(spec.source, device=device)
        except EmbedderError as err:
            raise ModelLoadError(str(err)) from err
        return apply_protocol(model, settings)
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as st

    try:
        transformer = st.Transformer(spec.source, max_seq_length=settings.max_length)
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"cannot load encoder {spec.source!r}: {err}") from err
    dim = transformer.get_embedding_dimension()
    pooling = st.Pooling(dim, pooling_mode=settings.pooling)
    return apply_protocol(SentenceTransformer(modules=[transformer, pooling], device=device), settings)


def load_model(
    spec: ModelSpec, settings: EvalSettings, device: str | None = None, compile: CompileSetting = "auto"
):
    """An mteb model for `spec` whose `mteb_model_meta` is the spec's cache identity, compiled as `compile`
    says (`neoembed.compilation`)."""
    from neoembed.mteb_setup import mteb

    if spec.is_lexical:
        try:
            return mteb.get_model(BM25_MTEB_NAME)
        except ImportError as err:
            raise ModelLoadError(f"cannot load bm25: {err} (pip install 'mteb[bm25s]')") from err
    model = load_sentence_transformer(spec, settings, device)
    compile_for_inference(model, compile)
    wrapper = _finite_wrapper()(model)
    # Set directly rather than through the constructor: mteb validates prompt keys against its own task
    # registry, which does not know neoembed's local tasks.
    wrapper.model_prompts = dict(settings.prompts) or None
    wrapper.mteb_model_meta = spec.meta.model_copy(
        update={
            "embed_dim": spec.meta.embed_dim or wrapper.model.get_embedding_dimension(),
            "max_tokens": wrapper.model.max_seq_length,
            "similarity_fn_name": wrapper.mteb_model_meta.similarity_fn_name,
            "framework": ["Sentence Transformers", "PyTorch"],
        }
    )
    return wrapper


@functools.cache
def _finite_wrapper():
    """mteb's sentence-transformers wrapper whose every encode refuses non-finite vectors
    (`finite.NonFiniteVectors`, naming the task, split and rows), so a NaN embedding fails its task instead of
    scoring as a result. A class made on first use: mteb is imported only once a model is evaluated."""
    from neoembed.mteb_setup import mteb

    class FiniteEncoderWrapper(mteb.models.SentenceTransformerEncoderWrapper):
        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
            vectors = super().encode(
                inputs, task_metadata=task_metadata, hf_split=hf_split, hf_subset=hf_subset,
                prompt_type=prompt_type, **kwargs,
            )  # fmt: skip
            return require_finite(vectors, what=f"{task_metadata.name} ({hf_subset}, {hf_split})")

    return FiniteEncoderWrapper
