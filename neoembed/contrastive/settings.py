"""Typed settings of `neoembed contrastive`: the sections of a contrastive recipe."""

from __future__ import annotations

from typing import Annotated, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from neoembed.contrastive.losses import check_kind
from neoembed.data import HELDOUT_CORPUS, HELDOUT_QUERIES, HELDOUT_TERMS, BuildConfig, ColumnMap, set_name
from neoembed.recipes import StrictSettings
from neoembed.training import OptimSettings, TrainSettings


class PromptSettings(StrictSettings):
    """Instruction prompts prepended to a source's texts, in training and evaluation alike."""

    query: str | None = None
    """Prepended to queries; None: the `default` entry's (and no prompt without one)."""
    document: str | None = None
    """Prepended to the positive and the hard negatives; None: the `default` entry's."""


class DataSettings(StrictSettings):
    path: str
    """A finished `neoembed build-data` output directory, or your own pairs: a .jsonl, .json, .csv, .tsv or
    .parquet file, a folder of them, or a datasets save_to_disk folder (built under train.output_dir first,
    one anchor in ten held out as its test split)."""
    columns: ColumnMap = Field(default_factory=dict)
    """Your pairs' columns where they are not anchor/query, positive, negative(s): e.g.
    query=question,positive=answer."""
    build: BuildConfig | None = None
    """How `neoembed contrastive` builds data.path where it is missing: `neoembed build-data` fields (out, the
    recipe's data.path; sources, max_rows, mine, ...); None, or a data.path other than its out: a missing build
    is an error."""
    sources: list[str] | None = None
    """Sources of the build to train on; None: every source."""
    alpha: float = Field(default=0.5, ge=0.0)
    """Each step's source is sampled with probability ~ rows^alpha."""
    max_negatives: int = Field(default=8, ge=0)
    """Hard-negative columns used per row."""
    max_rows: int | None = Field(default=None, gt=0)
    """Rows read per source (quick runs); None: all."""
    prompts: dict[str, PromptSettings] = Field(default_factory=dict)
    """Instruction prompts by source name or `default`: {name: {query: ..., document: ...}}."""

    @model_validator(mode="after")
    def _build_names_its_output(self):
        if self.build is not None and self.build.out is None:
            raise ValueError("data.build needs `out`, the directory it builds (the recipe's data.path)")
        return self


class LoraSettings(StrictSettings):
    """LoRA adapters (peft) instead of full fine-tuning; the export merges them into the weights."""

    r: int = Field(default=16, gt=0)
    """Adapter rank."""
    alpha: float = Field(default=32.0, gt=0.0)
    """Adapter scaling numerator (the update is scaled by alpha / r)."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout on the adapters' input."""
    target_modules: list[str] | None = None
    """Modules given adapters; None: peft's default for the architecture, else every linear."""


class ModelSettings(StrictSettings):
    base: str = "minilm"
    """The encoder: a sentence-transformers dir, a plain HF encoder dir or hub id, or minilm."""
    pooling: Literal["mean", "cls", "max", "lasttoken"] = "mean"
    """Pooling of a plain encoder's token states (a sentence-transformers dir keeps its own)."""
    max_length: int = Field(default=512, gt=1)
    """Tokens per text in training and evaluation (longer texts are truncated)."""
    trust_remote_code: bool = False
    """Run a hub model's own code (e.g. NomicBERT); NeoBERT needs none after `import neoembed`."""
    lora: LoraSettings | None = None
    """LoRA adapters instead of full fine-tuning; None: every weight trains."""


BASE_TEACHER = "base"  # loss.distill.teacher: the model being fine-tuned, before training


class DistillSettings(StrictSettings):
    """The settings of `loss.kind: distill`, distillation from a teacher embedder added to InfoNCE: loss =
    loss.infonce_weight x InfoNCE + weight x the distillation term. The teacher embeds every distinct training
    text once, into a cache beside the build (resumed after a kill); its texts are the records' raw texts,
    without the student's prompts."""

    teacher: str = "minilm"
    """Any sentence-transformers model: a directory, a hub id, or minilm; `base`: the model being fine-tuned as
    it was before training, which keeps its geometry (a regulariser against forgetting, with target scores)."""
    target: Literal["scores", "embedding"] = "scores"
    """scores: KL between the teacher's and the student's softmax over each query's in-batch candidates (the
    InfoNCE candidates, duplicates masked alike); embedding: the student's embedding against the teacher's
    (through a learned linear projection, not exported, where the dimensions differ)."""
    weight: float = Field(default=1.0, gt=0.0)
    """Weight of the distillation term in the loss."""
    metric: Literal["cosine", "mse"] = "cosine"
    """Target embedding: 1 - cosine, or mean squared error."""
    temperature: float | None = Field(default=None, gt=0.0)
    """Target scores, both sides; None: loss.temperature."""
    max_length: int | None = Field(default=None, gt=1)
    """The teacher's truncation; None: the teacher's own."""
    batch_size: int = Field(default=64, gt=0)
    """Teacher encoding batch."""
    chunk_rows: int = Field(default=4096, gt=0)
    """Texts embedded between two appends to the teacher cache."""


class LossSettings(StrictSettings):
    """The loss `kind` names (`contrastive/losses/`), the settings of the shipped kinds, and what wraps any kind:
    Matryoshka dimensions, the pull toward the starting weights."""

    # Unset, it is left out of the recorded recipe: the recipes and runs recorded before `kind` existed keep
    # their identity (a resume's check, the benches' reuse of a run).
    kind: str | None = Field(default=None, exclude_if=lambda kind: kind is None)
    """The loss trained: infonce (InfoNCE alone) or distill (InfoNCE plus distillation from a teacher, set in
    loss.distill); unset: distill where loss.distill is set, else infonce."""
    temperature: float = Field(default=0.07, gt=0.0)
    """InfoNCE scores are cosine similarities divided by this."""
    infonce_weight: float = Field(default=1.0, ge=0.0)
    """Weight of the InfoNCE term; 0 with distill: distillation alone."""
    distill: DistillSettings | None = None
    """Settings of kind distill (the teacher, its target and weight); None with kind infonce."""
    base_pull: float = Field(default=0.0, ge=0.0)
    """L2 pull toward the starting weights (L2-SP, Li et al. 2018), a regulariser against forgetting: adds
    base_pull x the sum over trained weights of (weight - its value before training)^2. 0: off."""
    symmetric: bool = False
    """Add the document-to-query term."""
    gather: bool = True
    """Score against the embeddings of every rank (more negatives on several devices)."""
    mini_batch_size: int | None = Field(default=None, gt=0)
    """GradCache chunk size (large batches in little memory); None: no caching."""
    matryoshka_dims: list[Annotated[int, Field(gt=0)]] | None = None
    """e.g. [384, 256, 128, 64]: InfoNCE summed over embeddings truncated to each size (Matryoshka); None: off."""
    matryoshka_weights: list[float] | None = None
    """One weight per Matryoshka dimension; None: 1 each."""

    @property
    def trained_kind(self) -> str:
        """The kind of loss trained: `kind`, or where unset the one loss.distill implies."""
        return self.kind or ("distill" if self.distill is not None else "infonce")

    @model_validator(mode="before")
    @classmethod
    def _distill_defaults(cls, value):
        """Kind distill without loss.distill: the default distillation settings."""
        if isinstance(value, dict) and value.get("kind") == "distill" and value.get("distill") is None:
            return {**value, "distill": {}}
        return value

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str | None) -> str | None:
        return kind if kind is None else check_kind(kind)

    @model_validator(mode="after")
    def _weights_match_dims(self):
        if self.matryoshka_weights is not None and len(self.matryoshka_weights) != len(
            self.matryoshka_dims or []
        ):
            raise ValueError("matryoshka_weights needs one weight per entry of matryoshka_dims")
        return self

    @model_validator(mode="after")
    def _losses_fit(self):
        if self.distill is not None and self.trained_kind != "distill":
            raise ValueError(f"distill is for kind distill, not {self.kind}: remove it, or set kind distill")
        if self.distill is None and self.trained_kind == "distill":
            raise ValueError("kind distill needs distill, the settings of its teacher")
        if self.infonce_weight == 0 and self.trained_kind == "infonce":
            raise ValueError("infonce_weight 0 leaves no loss: set distill, or a positive infonce_weight")
        if self.distill and self.distill.target == "embedding" and self.matryoshka_dims:
            # Matryoshka hands the loss truncated, re-normalised embeddings: nothing a teacher's full
            # embedding (or one projection) can be compared with at every size. The scores target can.
            raise ValueError(
                "distill.target embedding does not combine with matryoshka_dims; use distill.target scores"
            )
        return self


class ContrastiveOptim(OptimSettings):
    """The paper's contrastive protocol: AdamW at 1e-4, betas (0.9, 0.95), weight decay 0.01, 2000 warmup steps."""

    schedule: Literal["linear", "cosine", "constant_with_warmup"] = "linear"
    """The learning rate after the warmup (the Trainer's lr_scheduler_type)."""


class ContrastiveTrain(TrainSettings):
    output_dir: str = "runs/contrastive"
    """Checkpoints, metrics.jsonl, the recorded recipe, summary.json and (by default) the export."""
    max_steps: int = Field(default=2000, gt=0)
    """Optimisation steps."""
    batch_size: int = Field(default=32, gt=0)
    """Rows per device per micro-step."""
    eval_steps: int = Field(default=200, gt=0)
    """Score the held-out sets every N steps."""
    max_minutes: float | None = Field(default=None, gt=0.0)
    """Stop (and save) once training took this long."""


class HeldOutSet(StrictSettings):
    """A held-out retrieval set scored before, during and after training (nDCG@10, recall@k). A bare name,
    `wordnet` or `foldoc`, stands for `{kind: name}`."""

    kind: Literal["wordnet", "foldoc", "records", "manpages", "packages", "jargon", "files"]
    """files: your test set at `path`, a BEIR folder or the held-out split of a pairs file; wordnet: held-out
    example sentence -> definition; foldoc: FOLDOC computing term -> definition, a source
    no training build reads; records: a held-out build's query -> positive; manpages: a manual page's summary
    -> its description; packages: a Debian package's synopsis -> its description (manpages and packages are
    training sources too: score one only where the run does not train on it); jargon: a Jargon File term ->
    its definition, a source no training build reads."""
    path: str | None = None  # records: a build-data output holding held-out records; files: your test set
    source: str | None = None  # records: which source of it
    columns: ColumnMap = Field(default_factory=dict)  # files: a pairs file's columns, as data.columns
    name: str | None = None  # in metric names and reports; None: the kind (records: the source)
    queries: int | None = Field(
        default=None, gt=0
    )  # None: the set's own size (wordnet, records, manpages, packages 500; foldoc, jargon 300)
    corpus: int | None = Field(
        default=None, gt=0
    )  # None: wordnet 2,000, foldoc 1,500, records 2,000, manpages all, packages 2,000, jargon all

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value):
        """A bare kind stands for `{kind: name}`; any other bare string is the path of your test set."""
        if isinstance(value, str):
            return {"kind": value} if value in BARE_KINDS else {"kind": "files", "path": value}
        return value

    @model_validator(mode="after")
    def _check(self):
        if self.kind == "records" and not (self.path and self.source):
            raise ValueError("a records set needs path and source")
        if self.kind == "files" and (not self.path or self.source or self.queries or self.corpus):
            raise ValueError("a files set is your test set: give its path (and columns), nothing else")
        if self.kind not in ("records", "files") and (self.path or self.source):
            raise ValueError(f"path and source are for records and files sets, not {self.kind}")
        if self.columns and self.kind != "files":
            raise ValueError("columns maps a pairs file's columns: it is for files sets")
        # Only the full FOLDOC set is kept out of training builds (a smaller one is a prefix of it).
        if self.kind == "foldoc" and (
            (self.queries or 0) > HELDOUT_QUERIES or (self.corpus or 0) > HELDOUT_CORPUS
        ):
            raise ValueError(
                f"foldoc holds out {HELDOUT_QUERIES} queries and {HELDOUT_CORPUS} definitions from every "
                "training build; ask for at most those"
            )
        # Only the Jargon File's first terms are guarded as queries (a smaller set is a prefix of them).
        if self.kind == "jargon" and (self.queries or 0) > HELDOUT_TERMS:
            raise ValueError(
                f"jargon guards {HELDOUT_TERMS} held-out terms; ask for at most that many queries"
            )
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "records":
            assert self.source is not None  # the validator requires a records set's source
            return self.source
        if self.kind == "files":
            assert self.path is not None  # the validator requires a files set's path
            return set_name(self.path)
        return self.kind


BARE_KINDS = ("wordnet", "foldoc", "manpages", "packages", "jargon")  # kinds that need no other field
REPLACED_EVAL_FIELDS = ("kind", "path", "source", "queries", "corpus")


class EvalSettings(StrictSettings):
    """The held-out retrieval sets scored before, during and after training."""

    sets: list[HeldOutSet] = Field(
        default_factory=lambda: [HeldOutSet(kind="wordnet"), HeldOutSet(kind="foldoc")]
    )
    """e.g. [wordnet, foldoc] or [{kind: records, path: P, source: S}]; [] scores nothing. The first set's
    nDCG@10 is the run's evaluation score."""
    batch_size: int = Field(default=64, gt=0)
    """Texts per encoding batch when scoring."""

    @model_validator(mode="before")
    @classmethod
    def _replaced_fields(cls, value):
        """A recipe written for the single held-out set of earlier versions gets told the new form."""
        if not isinstance(value, dict) or not (old := [f for f in REPLACED_EVAL_FIELDS if f in value]):
            return value
        kind = value.get("kind", "wordnet")
        single = {f: value[f] for f in REPLACED_EVAL_FIELDS if f in value and f != "kind"}
        sets = [] if kind == "none" else [{"kind": kind, **single} if single else kind]
        if kind == "wordnet":
            sets.append("foldoc")
        suggestion = yaml.safe_dump({"sets": sets}, default_flow_style=True, sort_keys=False).strip()
        raise ValueError(
            f"{', '.join(f'eval.{f}' for f in old)}: replaced by eval.sets, a list of held-out sets "
            f"(foldoc is the cross-source one); for this recipe write `eval: {suggestion}`"
        )

    @model_validator(mode="after")
    def _distinct_names(self):
        labels = [s.label for s in self.sets]
        if twice := sorted({label for label in labels if labels.count(label) > 1}):
            raise ValueError(f"two held-out sets named {twice[0]!r}: give one a `name`")
        return self


class SelectionSettings(StrictSettings):
    """The selection split that `export.base_weight: auto` chooses on: in-domain pairs held out of training,
    and general text from sources the run neither trains on nor is evaluated on. Their nDCG@10 count half each:
    the weight kept is the one that gains in-domain without losing elsewhere."""

    in_domain: int = Field(default=500, ge=0)
    """Rows of each training source held out of training for selection (a fixed pseudo-random choice by text
    key; rows sharing a text with them leave training too). 0: general text alone."""
    in_domain_sets: list[HeldOutSet] = Field(default_factory=list)
    """In-domain retrieval sets held out before training by whoever made the data (`neoembed adapt`: the pairs
    of its held-out documents), counted with the in-domain rows; refused, as a general set is, where they share
    a text with the training data or an evaluation set."""
    general: list[HeldOutSet] = Field(default_factory=lambda: [HeldOutSet(kind="manpages")])
    """Retrieval sets of general text, e.g. [manpages], [packages] or [{kind: records, path: P, source: S}];
    one that shares a text with the training data or an evaluation set is refused."""

    @model_validator(mode="after")
    def _something_to_select_on(self):
        if not self.in_domain and not self.in_domain_sets and not self.general:
            raise ValueError("in_domain 0 and no in-domain or general sets leave nothing to select on")
        return self


class ExportSettings(StrictSettings):
    path: str | None = None
    """The sentence-transformers directory written; None: <train.output_dir>/neobert-embed."""
    max_seq_length: Literal["train", "positions"] | Annotated[int, Field(gt=1)] = "train"
    """The input limit the export declares (where `encode` truncates, the longest input `neoembed serve`
    accepts): train is model.max_length, the length it was fine-tuned and evaluated at; positions every
    position the base model supports (NeoBERT's 4096); or a number of tokens."""
    base_weight: Annotated[float, Field(ge=0.0, le=1.0)] | Literal["auto"] = 0.0
    """Weight-space ensembling (WiSE-FT): the export is (1 - base_weight) x fine-tuned + base_weight x the
    base model's, keeping most of the gain on the training data and the base's strength on other text; auto:
    the candidate of base_weights scoring best on the selection split, recorded in the run and card."""
    base_weights: list[Annotated[float, Field(ge=0.0, le=1.0)]] = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    """The candidates export.base_weight auto chooses from."""
    checkpoints: Literal["last", "all"] = "last"
    """Whose weights export.base_weight auto mixes with the base: last, those training ended with; all, those
    and every earlier checkpoint kept (one each train.save_steps, train.keep_checkpoints of them), each at
    every candidate weight, so a schedule that trained past its best is cut back on the selection split."""
    selection: SelectionSettings = Field(default_factory=SelectionSettings)
    """The split export.base_weight auto chooses on."""

    @model_validator(mode="after")
    def _checkpoints_are_chosen_on_the_split(self):
        if self.checkpoints == "all" and self.base_weight != "auto":
            raise ValueError(
                "checkpoints all is chosen among on the selection split: set base_weight auto "
                "(candidates base_weights [0.0] keep the fine-tuned weights unmixed)"
            )
        return self


class ContrastiveSettings(StrictSettings):
    data: DataSettings
    model: ModelSettings = Field(default_factory=ModelSettings)
    loss: LossSettings = Field(default_factory=LossSettings)
    optim: ContrastiveOptim = Field(default_factory=ContrastiveOptim)
    train: ContrastiveTrain = Field(default_factory=ContrastiveTrain)
    eval: EvalSettings = Field(default_factory=EvalSettings)
    export: ExportSettings = Field(default_factory=ExportSettings)

    @model_validator(mode="after")
    def _checkpoints_hold_whole_weights(self):
        if self.export.checkpoints == "all" and self.model.lora:
            raise ValueError(
                "export.checkpoints all reads every checkpoint's whole weights; a LoRA run's checkpoints hold "
                "its adapters only: use export.checkpoints last with model.lora"
            )
        return self
