"""Settings of the index functions and of the `neoembed index` / `neoembed search` verbs bound to them.

Each function takes its settings or the same fields as keyword arguments (`build_index(corpus, out,
threads=2)`), so a default, bound or help text is written here once. The fields the verbs share live in small
bases: threads (every verb), tuning (build, add, rebuild), reading and embedding a corpus (build, add), and
choosing a factory (build, rebuild). They are bases rather than nested sections so that a field keeps one
flat name as option and keyword argument alike (`--tune-queries`, `tune_queries=`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from neoembed.compilation import InferenceCompile
from neoembed.recipes import StrictSettings

Metric = Literal["cosine", "ip", "l2"]
InferenceDtype = Literal["auto", "float32", "bfloat16", "float16"]


class ThreadSettings(StrictSettings):
    """Threads for faiss and torch (every index verb)."""

    model_config = ConfigDict(frozen=True)

    threads: int | None = Field(None, ge=1)
    """faiss/torch threads (default: all CPUs this process may use)."""


class TuneSettings(ThreadSettings):
    """How an index is tuned after a build, add or rebuild."""

    tune_queries: int = Field(1000, ge=1)
    """Corpus documents used as held-out tuning queries."""
    seed: int = 0
    """Seed of the training sample and of the held-out tuning queries."""


class EmbedSettings(TuneSettings):
    """How corpus documents are read and embedded (build, add)."""

    batch_size: int = Field(64, ge=1)
    """Embedding batch size."""
    dtype: InferenceDtype = "auto"
    """Embedder dtype: auto (bfloat16 where it has hardware, else float32; checked against float32 on probe
    texts), float32, bfloat16 or float16."""
    compile: InferenceCompile = "auto"
    id_field: str = "id"
    """Field holding the document id."""
    text_field: str = "text"
    """Field holding the document text."""


class FactorySettings(StrictSettings):
    """How the FAISS index is chosen (build, rebuild)."""

    model_config = ConfigDict(frozen=True)

    factory: str = "auto"
    """'auto' (by corpus size and memory) or a FAISS factory string."""
    memory_gb: float | None = Field(None, gt=0)
    """Memory for the index (default: half of available)."""

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory_gb is None else int(self.memory_gb * 2**30)


class BuildSettings(EmbedSettings, FactorySettings):
    """`build_index` and `neoembed index build`."""

    model: str = "minilm"
    """Embedder: directory, hub id, or 'minilm'."""
    target_recall: float = Field(0.95, gt=0, le=1)
    """recall@10 against exact search to reach."""
    metric: Metric = "cosine"
    """Similarity; cosine normalises the vectors and ranks by inner product."""


class AddSettings(EmbedSettings):
    """`add_documents` and `neoembed index add`."""

    model: str | None = None
    """Embedder (default: the index's; must match it)."""


class RebuildSettings(TuneSettings, FactorySettings):
    """`rebuild_index` and `neoembed index rebuild`."""

    target_recall: float | None = Field(None, gt=0, le=1)
    """recall@10 to reach (default: the index's)."""


class SearchSettings(ThreadSettings):
    """`load_index` and `neoembed search`."""

    model: str | None = None
    """Query embedder (default: the index's; must match it)."""
    k: int = Field(10, ge=1)
    """Results per query."""
    compile: InferenceCompile = "auto"
    mmap: bool = True
    """Memory-map the index rather than read it into memory."""
    verify_checksums: bool = True
    """Read every file of the index at load to check it against the manifest's checksums (sizes are always
    checked); turn off for very large indexes loaded often."""


class ExportSettings(StrictSettings):
    """`export_index` and `neoembed index export`."""

    model_config = ConfigDict(frozen=True)

    format: Literal["parquet"] = "parquet"
    """Export format; parquet has the columns id, text, metadata (JSON) and vector."""
