"""Typed settings of `neoembed adapt`: where the documents are, how pairs are made from them, and the
contrastive sections (model, loss, optim, train, eval, export) the adaptation trains with."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, get_args

from pydantic import Field

from neoembed.contrastive import (
    ContrastiveOptim,
    ContrastiveTrain,
    EvalSettings,
    ExportSettings,
    LossSettings,
    ModelSettings,
    PromptSettings,
)
from neoembed.recipes import StrictSettings

if TYPE_CHECKING:
    from neoembed.adapt.corpus import Corpus

Method = Literal["crop", "lead", "terms"]


class CorpusSettings(StrictSettings):
    path: str
    """The documents: a .txt file (one a line), .jsonl (a JSON object a line) or .parquet file."""
    field: str = "text"
    """The text field of a .jsonl or .parquet corpus."""
    min_words: int = Field(default=8, gt=0)
    """Shorter documents are left out (a crop of fewer words says little)."""
    min_documents: int = Field(default=200, gt=0)
    """Fewer usable documents than this is an error: too few to adapt on, or to select on."""
    selection: int = Field(default=300, gt=0)
    """Documents held out as the selection split (at most a fifth of the corpus): their pseudo queries choose
    the WiSE-FT weight and are scored during training; never trained on, never reported."""
    eval_texts: list[str] = Field(default_factory=list)
    """Files of evaluation queries (.txt a line, .jsonl a `text` field) no document may be: such documents are
    left out and counted, as are FOLDOC's and the Jargon File's held-out terms (the leakage guard; documents of
    an evaluation's corpus are allowed: they are what a user searches)."""

    def read(self, evaluated: frozenset[int]) -> Corpus:
        """The documents these settings name, cleaned, guarded and split (`read_corpus`); `evaluated`: the
        texts no selection document may be."""
        from neoembed.adapt.corpus import read_corpus

        return read_corpus(
            Path(self.path),
            field=self.field,
            min_words=self.min_words,
            min_documents=self.min_documents,
            selection=self.selection,
            evaluated=evaluated,
            eval_texts=tuple(Path(p) for p in self.eval_texts),
        )


class PairSettings(StrictSettings):
    """How documents become (query, positive) pairs (`adapt.pairs`)."""

    methods: list[Method] = Field(default_factory=lambda: list(get_args(Method)), min_length=1)
    """crop: two random spans of a document; lead: its first sentence -> the rest; terms: its rarest words ->
    the document. Each is a training source of its own."""
    crop_ratio: tuple[Annotated[float, Field(gt=0.0, le=1.0)], Annotated[float, Field(gt=0.0, le=1.0)]] = (
        0.2,
        0.6,
    )
    """Each crop is this share of the document's words, drawn uniformly between the two."""
    term_words: int = Field(default=2, gt=0)
    """Words of a terms query."""
    negatives: int = Field(default=0, ge=0)
    """Hard negatives per pair, mined with the base model among the positives of the pair's method
    (`adapt.negatives`); each is one more text encoded per pair in every step. 0: in-batch negatives only."""
    negative_margin: float = Field(default=0.95, gt=0.0, le=1.0)
    """A candidate the base model scores above this x the pair's positive is not taken as a negative (the
    positive-aware rule: on pseudo pairs most such candidates are other true answers)."""
    clusters: Literal["auto"] | Annotated[int, Field(ge=0)] = 0
    """Topic clusters every training batch is drawn from (`adapt.clusters`): the documents are clustered once
    with the base model, and each step's pairs come from one cluster, so its in-batch negatives share a topic.
    auto: as many as give each cluster about 4 batches of a method's pairs; 0 or 1: batches across the corpus."""
    alpha: float = Field(default=1.0, ge=0.0)
    """Each step's method is sampled with probability ~ its pairs^alpha."""
    prompts: dict[str, PromptSettings] = Field(default_factory=dict)
    """Instruction prompts by method name or `default`, as data.prompts of a contrastive recipe."""


class AdaptTrain(ContrastiveTrain):
    output_dir: str = "runs/adapt"
    """The run: pairs/, selection/, train/ (checkpoints, metrics.jsonl) and model/ (the adapted embedder)."""


class AdaptSettings(StrictSettings):
    corpus: CorpusSettings
    pairs: PairSettings = Field(default_factory=PairSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    loss: LossSettings = Field(default_factory=LossSettings)
    optim: ContrastiveOptim = Field(default_factory=ContrastiveOptim)
    train: AdaptTrain = Field(default_factory=AdaptTrain)
    eval: EvalSettings = Field(default_factory=lambda: EvalSettings(sets=[]))
    """Held-out sets scored before, during and after adapting, besides the selection split."""
    export: ExportSettings = Field(default_factory=ExportSettings)
