"""Typed settings of `neoembed pretrain`: the sections of a pretraining recipe."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from neoembed.recipes import StrictSettings
from neoembed.training import OptimSettings, TrainSettings


class CorpusSettings(StrictSettings):
    """Exactly one source: a Hugging Face dataset, local files, or the embedded WordNet text."""

    dataset: str | None = None
    """A hub dataset id, e.g. tiiuae/falcon-refinedweb."""
    config: str | None = None
    """The hub dataset's configuration."""
    split: str = "train"
    """The hub dataset's split."""
    revision: str | None = None
    """The hub dataset's revision (a commit or tag); None: the newest."""
    streaming: bool = False
    """Read a hub dataset lazily (RefinedWeb-size corpora); needs max_documents."""
    files: list[str] = Field(default_factory=list)
    """Local files or globs: .txt (a document per line), .jsonl, .parquet."""
    wordnet: bool = False
    """The glosses and examples of WordNet's training synsets (embedded, offline)."""
    text_column: str = "text"
    """The column holding each document's text."""
    max_documents: int | None = Field(default=None, gt=0)
    """Documents read; None: all."""
    heldout_fraction: float = Field(default=0.02, ge=0.0, lt=1.0)
    """Documents kept out of training for the held-out MLM loss."""

    @model_validator(mode="after")
    def _one_source(self):
        sources = [bool(self.dataset), bool(self.files), self.wordnet]
        if sum(sources) != 1:
            raise ValueError("set exactly one of dataset, files, wordnet")
        if self.streaming and not (self.dataset and self.max_documents):
            raise ValueError("streaming reads a hub dataset and needs max_documents")
        return self


class ModelSettings(StrictSettings):
    init_from: str | None = None
    """A NeoBERT checkpoint directory to continue (stage 2 starts from stage 1); None: from scratch."""
    config: dict[str, Any] = Field(default_factory=dict)
    """NeoBERTConfig fields for a model from scratch; {}: the released architecture."""
    tokenizer: str | None = None
    """A tokenizer path or hub id; None: the packaged bert-base-uncased vocabulary."""
    embeddings_from: str | None = None
    """A sentence-transformers teacher with the tokenizer's vocabulary (a directory, hub id or minilm) whose
    word-embedding table, reduced by PCA, initialises a from-scratch model's word embeddings
    (neoembed.pretrain.teacher_embeddings); None: random word embeddings."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, more compute)."""


class LengthBucket(StrictSettings):
    min_tokens: int = Field(ge=0)
    """Documents at least this many tokens long."""
    probability: float = Field(gt=0.0, le=1.0)
    """Chance that a batch is drawn from this bucket."""


class DataSettings(StrictSettings):
    max_length: int = Field(default=1024, gt=8)
    """Tokens per row (documents are truncated or packed to it)."""
    mode: Literal["packed", "padded"] = "packed"
    """packed: documents share rows, attention confined to each; padded: a document per row (the paper's)."""
    batch_size: int = Field(default=8, gt=0)
    """Rows (packed) or documents (padded) per device micro-batch."""
    mask_rate: float = Field(default=0.2, gt=0.0, lt=1.0)
    """Fraction of non-special tokens masked."""
    mask_mode: Literal["mask", "80-10-10"] = "mask"
    """mask: every selected token becomes [MASK] (the release); 80-10-10: BERT's."""
    length_buckets: list[LengthBucket] = Field(default_factory=list)
    """Stage 2: each batch drawn from one bucket of documents at least min_tokens long, with these
    probabilities, e.g. [{min_tokens: 0, probability: 0.2}, ...]; []: every document."""

    @model_validator(mode="after")
    def _buckets_sum_to_one(self):
        if self.length_buckets:
            total = sum(b.probability for b in self.length_buckets)
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"length_buckets probabilities must sum to 1, got {total:g}")
        return self


class PretrainOptim(OptimSettings):
    """The paper's AdamW (peak 6e-4, weight decay 0.1) and its schedule after the warmup."""

    lr: float = Field(default=6e-4, gt=0.0)
    """Peak learning rate."""
    weight_decay: float = Field(default=0.1, ge=0.0)
    """AdamW's decoupled weight decay."""
    schedule: Literal["cosine", "wsd"] = "cosine"
    """cosine: the paper's (decay to min_lr_ratio by decay_fraction of the steps, then constant); wsd:
    warmup-stable-decay (the peak held, then a 1-sqrt decay to min_lr_ratio over the last wsd_decay_fraction
    of the steps)."""
    decay_fraction: float = Field(default=0.9, gt=0.0, le=1.0)
    """cosine: the decay ends at this fraction of the steps."""
    wsd_decay_fraction: float = Field(default=0.1, gt=0.0, le=1.0)
    """wsd: the decay takes this last fraction of the steps."""
    min_lr_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    """The decay ends at this fraction of the peak (then constant)."""


class PretrainTrain(TrainSettings):
    output_dir: str = "runs/pretrain"
    """Checkpoints, metrics.jsonl, the recorded recipe and the final model (<output_dir>/final)."""
    keep_checkpoints: int = Field(default=3, gt=0)
    """Newest checkpoints kept."""
    eval_batches: int = Field(default=8, gt=0)
    """Held-out MLM batches scored at each evaluation."""
    peak_tflops: float | None = Field(default=None, gt=0.0)
    """Device peak for MFU; None: known GPUs in bf16."""


class PretrainSettings(StrictSettings):
    corpus: CorpusSettings
    model: ModelSettings = Field(default_factory=ModelSettings)
    data: DataSettings = Field(default_factory=DataSettings)
    optim: PretrainOptim = Field(default_factory=PretrainOptim)
    train: PretrainTrain = Field(default_factory=PretrainTrain)
