"""Settings of each `neoembed bench` command: the CLI options are generated from these fields
(`neoembed.cli.options`), and each bench's `run` takes its settings object.

This module imports no torch: the CLI builds its options from it at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from neoembed.compilation import InferenceCompile
from neoembed.data import ColumnMap
from neoembed.recipes import CommaSeparated, StrictSettings


def _available(device: str) -> str:
    """A CUDA device that is not there is a bad value; `auto` is resolved when the bench runs."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError("no CUDA device is available here")
    return device


Device = Annotated[str, AfterValidator(_available), Field(description="cpu, cuda, cuda:N, or auto.")]
TorchThreads = Annotated[int, Field(ge=1, description="torch CPU threads.")]


def resolve_device(device: str) -> str:
    """`auto` is CUDA when present, else the CPU."""
    from neoembed.precision import default_device

    return default_device() if device == "auto" else device


InferenceBackend = Literal["torch-fp32", "torch-bf16", "onnx-fp32", "onnx-int8"]


def _distinct(backends: tuple[str, ...]) -> tuple[str, ...]:
    repeated = sorted({b for b in backends if backends.count(b) > 1})
    if repeated:
        raise ValueError(f"{', '.join(repeated)} given more than once")
    return backends


# bench encode/serve --backends
InferenceBackends = Annotated[CommaSeparated[tuple[InferenceBackend, ...]], AfterValidator(_distinct)]


def auto_training_precision() -> str:
    """The precision `train.precision: auto` trains in here: bf16 where it has hardware (CUDA, or a CPU with
    bf16 units), else fp32."""
    from neoembed.precision import resolve_precision

    return "bf16" if resolve_precision("auto").train_bf16 else "fp32"


class BenchSettings(StrictSettings):
    model_config = ConfigDict(frozen=True)


class EncodeBench(BenchSettings):
    configs: CommaSeparated[tuple[Literal["tiny", "full"], ...]] = ("tiny", "full")
    """NeoBERT sizes: tiny (2x64) and/or full (28x768, 250M)."""
    dtypes: CommaSeparated[tuple[Literal["auto", "fp32", "bf16"], ...]] = ("auto",)
    """fp32 and/or bf16 weights (norms and RoPE stay fp32); auto: fp32, plus bf16 where it has hardware (CUDA,
    or a CPU with AVX512-BF16/AMX)."""
    lengths: CommaSeparated[tuple[Annotated[int, Field(ge=1)], ...]] = ()
    """Fixed sequence lengths (default 128,512,1024; with --compare 512,1024,2048,4096)."""
    mixed: CommaSeparated[tuple[int, int]] = (16, 512)
    """MIN,MAX token lengths of the mixed-length batch."""
    compare: Literal["modernbert"] | None = None
    """modernbert: also time transformers' ModernBERT-base (random weights) on the same batches."""
    repeats: int = Field(2, ge=1)
    """Timed runs per path; the best is kept."""
    threads: TorchThreads = 2
    device: Device = "auto"
    compile: InferenceCompile = "auto"
    tokens_per_batch: int = Field(0, ge=0)
    """Tokens per timed batch (0: 8192 tiny, 2048 full on CPU; 65536 on CUDA)."""
    out: Path = Path("runs/bench/encode")
    """Directory for encode.json and encode.md."""
    backends: InferenceBackends = ()
    """Instead of the NeoBERT paths: compare inference backends of --model on WordNet glosses, e.g.
    torch-fp32,torch-bf16,onnx-fp32,onnx-int8 (writes encode-backends.json/.md)."""
    model: str = "minilm"
    """With --backends: the embedder."""
    texts: int = Field(1024, ge=64)
    """With --backends: WordNet synsets (at least 64, so the probe has queries and each gloss 10 neighbours);
    their glosses are timed, their example sentences are the queries."""
    batch_size: int = Field(32, ge=1)
    """With --backends: texts per batch."""

    @field_validator("dtypes")
    @classmethod
    def _auto_alone(cls, dtypes: tuple[str, ...]) -> tuple[str, ...]:
        if "auto" in dtypes and len(dtypes) > 1:
            raise ValueError("auto stands alone; otherwise give fp32 and/or bf16")
        return dtypes

    @field_validator("mixed")
    @classmethod
    def _ordered(cls, mixed: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= mixed[0] <= mixed[1]:
            raise ValueError(f"need 1 <= MIN <= MAX, got {mixed[0]},{mixed[1]}")
        return mixed


class IndexBench(BenchSettings):
    n: int = Field(200_000, ge=0)
    """Synthetic structured vectors in the base set (0: skip)."""
    dim: int = Field(384, ge=8)
    """Dimension of the synthetic vectors."""
    queries: int = Field(1000, ge=10)
    """Held-out queries per vector set."""
    target_recall: float = Field(0.95, gt=0, le=1)
    """recall@10 each candidate is tuned to reach."""
    threads: int = Field(2, ge=1)
    """faiss and torch threads."""
    wordnet: bool = True
    """Also bench the WordNet glosses embedded by --model."""
    wordnet_index: Path = Path("runs/index/wordnet-minilm")
    """WordNet index to read vectors from (built if missing)."""
    model: str = "minilm"
    """Embedder for the WordNet set."""
    out: Path = Path("runs/bench/index")
    """Directory for index.json and index.md."""


class BuildDataBench(BenchSettings):
    rows: int = Field(1_000_000, ge=0)
    """Synthetic rows for normalisation + dedup (0 skips)."""
    long_rows: int = Field(20_000, ge=0)
    """GitHubIssues-shaped long rows staged beside them."""
    encode_texts: int = Field(1200, ge=0)
    """Texts the teacher encodes for its rate (0 skips)."""
    search_pool: int = Field(100_000, ge=0)
    """Pool of the timed part search (0 skips)."""
    search_queries: int = Field(20_000, ge=1)
    """Queries of the timed part search."""
    project_pairs: int = Field(9_000_000, ge=1)
    """Pairs of the projected build."""
    gpu_tokens_per_s: float = Field(1e6, gt=0)
    """Assumed H100 teacher tokens/s, for the projection."""
    gpu_gflop_per_s: float = Field(20_000, gt=0)
    """Assumed H100 flat-search GFLOP/s, for the projection."""
    mining_rows: int = Field(0, ge=0)
    """WordNet rows to mine end to end (0 skips)."""
    dtypes: CommaSeparated[tuple[Literal["float32", "bfloat16"], ...]] = ("float32", "bfloat16")
    """Teacher dtypes to compare for mining."""
    pairs_rows: CommaSeparated[tuple[Annotated[int, Field(ge=1)], ...]] = ()
    """Sizes of synthetic pairs files to build whole, each in a child process, for their peak RSS (e.g.
    1000000,10000000); none: skipped."""
    threads: int = Field(2, ge=1)
    """torch and faiss threads."""
    batch_size: int = Field(128, ge=1)
    """Teacher encoding batch size."""
    keep: bool = False
    """Keep the generated data and builds under OUT/work."""
    out: Path = Path("runs/bench/build-data")
    """Directory for build-data.json and .md."""


class MtebBench(BenchSettings):
    model: str = "minilm"
    """Embedder to time (any `mteb-eval --model` except bm25)."""
    batch_size: int = Field(32, ge=1)
    """Encoding batch size (harness and direct alike)."""
    repeats: int = Field(3, ge=1)
    """Timed runs per side, alternated; the best is kept."""
    threads: TorchThreads = 2
    out: Path = Path("runs/bench/mteb")
    """Directory for mteb.json and mteb.md."""


class ServeBench(BenchSettings):
    models: CommaSeparated[tuple[str, ...]] = Field(("minilm", "neobert"), min_length=1)
    """Embedders to serve and to call directly; 'neobert' is a quickstart-size NeoBERT export."""
    texts: int = Field(4096, ge=16)
    """WordNet glosses to embed per round."""
    texts_per_request: int = Field(16, ge=1)
    """Texts in each client request."""
    clients: int = Field(16, ge=1)
    """Concurrent clients."""
    openai_processes: int | None = Field(None, ge=1)
    """Processes the openai clients are spread over (default: a quarter of the cores, at least 1)."""
    repeats: int = Field(2, ge=1)
    """Rounds per side, alternated; the best is kept."""
    threads: int = Field(2, ge=1)
    """torch CPU threads, in the server and for direct encode."""
    direct_batch_sizes: CommaSeparated[tuple[Annotated[int, Field(ge=1)], ...]] = Field(
        (32, 64, 128, 256, 512, 1024), min_length=1
    )
    """encode batch sizes to time; the fastest is the ratios' baseline."""
    health_requests: int = Field(600, ge=1)
    """Requests of the health round, in which one more client polls /health every 20 ms."""
    health_clients: int = Field(24, ge=1)
    """Concurrent clients of the health round."""
    backends: InferenceBackends = Field(("torch-fp32",), min_length=1)
    """Serve each model on each of these, e.g. torch-fp32,torch-bf16,onnx-fp32,onnx-int8 (ONNX from an
    export made under --out; torch-bf16 is skipped, with the reason, on a CPU without bf16 units)."""
    out: Path = Path("runs/bench/serve")
    """Directory for serve.json, serve.md and logs."""


class PretrainBench(BenchSettings):
    config: Literal["small", "full"] = "small"
    """small (4 x 256) or full (the 250M NeoBERT)."""
    max_length: int = Field(512, ge=16)
    """Row length of both layouts."""
    token_budget: int = Field(0, ge=0)
    """Token slots per step in both layouts (0: 8192 on CPU, 32768 on CUDA)."""
    steps: int = Field(5, ge=1)
    """Timed training steps per layout."""
    warmup_steps: int = Field(1, ge=0)
    """Untimed steps per layout first (use 3 with --compile)."""
    device: Device = "auto"
    dtype: Literal["auto", "fp32", "bf16"] = "auto"
    """fp32, bf16 (autocast over fp32 weights), or auto (bf16 on GPUs)."""
    compile: bool = False
    """Compile the blocks (torch.compile)."""
    threads: TorchThreads = 2
    peak_tflops: float = Field(0.0, ge=0.0)
    """Device peak for MFU (0: the known-GPU table in bf16, else a measured matmul)."""
    out: Path = Path("runs/bench/pretrain")
    """Directory for pretrain.json and pretrain.md."""


class ContrastiveBench(BenchSettings):
    data: Path | None = None
    """A finished build-data output to train on (default: the default WordNet build, under --out), or your
    pairs file, built as `neoembed contrastive --data.path` builds it, its held-out split then scored first."""
    columns: ColumnMap = Field(default_factory=dict)
    """Your pairs file's columns where they are not anchor/query, positive: e.g. query=question,positive=answer."""
    test: str | None = None
    """Your test set, scored first: a BEIR folder or a pairs file (default: --data's held-out split, where
    --data is a pairs file)."""
    rows: int = Field(20000, ge=100)
    """Rows a source of the default WordNet + manual pages build (build-data --max-rows)."""
    recipe: str = "contrastive-cpu"
    """neoembed's recipe: a packaged name or a YAML file."""
    overrides: tuple[str, ...] = ()
    """KEY=VALUE override of the neoembed recipe (e.g. optim.lr=5e-5); repeatable."""
    steps: int | None = Field(None, ge=1)
    """Optimizer steps per run, the same for every model (default: the recipe's train.max_steps; with --speed:
    the timed steps after the warm-up, default 5)."""
    minutes: float | None = Field(None, ge=0.01)
    """A time budget per run instead of steps (a faster precision then gets more steps, which mixes two
    effects)."""
    seeds: int = Field(3, ge=1)
    """Runs per model and precision, seeds 0..N-1: a result is their mean, with its spread."""
    precisions: CommaSeparated[tuple[Literal["fp32", "bf16"], ...]] = ()
    """train.precision of the runs (default: fp32, and bf16 where the CPU has bf16 units)."""
    threads: int = Field(1, ge=1)
    """torch CPU threads, for every model (1 on a shared machine)."""
    model: str = "minilm"
    """Base model both trainers fine-tune."""
    neobert: str | None = None
    """A pretrained NeoBERT directory to run the recipe on too."""
    fresh: bool = False
    """Retrain instead of reusing finished runs under --out."""
    speed: bool = False
    """Instead of the quality grid: training pairs/s and peak memory of neoembed contrastive against
    sentence-transformers' CachedMultipleNegativesRankingLoss on the same pairs, global batch, GradCache
    mini-batch, precision and device (writes contrastive-speed.json and .md)."""
    batch_size: int = Field(256, ge=2)
    """With --speed: the global batch of both trainers."""
    mini_batch_size: int = Field(32, ge=1)
    """With --speed: the GradCache mini-batch of both trainers."""
    warmup_steps: int = Field(2, ge=1)
    """With --speed: untimed steps before the timed ones (compilation, first allocations)."""
    out: Path = Path("runs/bench/contrastive")
    """Directory for contrastive.json and .md."""

    @field_validator("overrides")
    @classmethod
    def _key_value(cls, items: tuple[str, ...]) -> tuple[str, ...]:
        malformed = [item for item in items if "=" not in item]
        if malformed:
            raise ValueError(f"{malformed[0]!r}: expected KEY=VALUE")
        return items

    @model_validator(mode="after")
    def _one_budget(self):
        if self.steps is not None and self.minutes is not None:
            raise ValueError("give --steps or --minutes, not both")
        if self.speed and self.minutes is not None:
            raise ValueError("--speed times a number of --steps, not --minutes")
        return self

    def run_precisions(self) -> tuple[str, ...]:
        """--precisions, or each the machine trains in: fp32, and bf16 where `auto` trains in it."""
        return self.precisions or tuple(dict.fromkeys(("fp32", auto_training_precision())))


ScaleJob = Literal["build-data", "pretrain", "contrastive"]


class ScaleBench(BenchSettings):
    jobs: CommaSeparated[tuple[ScaleJob, ...]] = get_args(ScaleJob)
    """Jobs timed on 1 rank and on `ranks` ranks (torchrun, gloo, one thread each)."""
    ranks: int = Field(2, ge=2)
    """Ranks of the parallel run (each takes one thread: give at most as many as the machine has cores)."""
    texts: int = Field(2048, ge=64)
    """build-data: WordNet glosses the mining teacher encodes, split among the ranks."""
    steps: int = Field(30, ge=5)
    """pretrain and contrastive: optimizer steps per run (the first few are left out of the rates)."""
    out: Path = Path("runs/bench/scale")
    """Output directory (scale.json, scale.md, the runs)."""


class AdaptBench(BenchSettings):
    recipe: str = "adapt-cpu"
    """neoembed adapt's recipe: a packaged name or a YAML file."""
    overrides: tuple[str, ...] = ()
    """KEY=VALUE override of the recipe (e.g. optim.lr=5e-5); repeatable."""
    model: str = "minilm"
    """The base model both methods adapt."""
    corpora: CommaSeparated[tuple[Literal["foldoc", "packages", "jargon"], ...]] = (
        "foldoc",
        "packages",
        "jargon",
    )
    """The corpora adapted on: FOLDOC's definitions, Debian package descriptions, the Jargon File's."""
    packages: int = Field(10_000, ge=100)
    """Package descriptions in the second corpus."""
    baselines: CommaSeparated[tuple[Literal["st", "tsdae"], ...]] = ("st", "tsdae")
    """The sentence-transformers runs beside each adaptation: st (MNRL on its pairs for as many steps), tsdae
    (TSDAE on its documents for as many minutes); leave one out to save its training time."""
    seeds: int = Field(3, ge=1)
    """Runs per method, corpus and precision, seeds 0..N-1: a result is their mean, with its spread."""
    precisions: CommaSeparated[tuple[Literal["fp32", "bf16"], ...]] = ()
    """train.precision of the runs (default: the one `auto` trains in here, bf16 where the CPU has bf16 units,
    else fp32)."""
    threads: int = Field(2, ge=1)
    """torch CPU threads, for every run."""
    fresh: bool = False
    """Retrain instead of reusing finished runs under --out."""
    out: Path = Path("runs/bench/adapt")
    """Directory for adapt.json and .md, the corpora, the runs and their scores."""

    def run_precisions(self) -> tuple[str, ...]:
        """--precisions, or the one `auto` trains in here."""
        return self.precisions or (auto_training_precision(),)
