"""The quickstart: the whole toolkit end to end on the embedded default (WordNet and all-MiniLM-L6-v2).

Every step runs the same `neoembed` command a user would type, under one run directory:

1. `build-data`   WordNet and manual-page training pairs (no mined negatives: the recipe uses none)
2. `pretrain`     a small NeoBERT, masked language modelling on WordNet text (the packaged pretrain-cpu recipe:
                  its word embeddings start from all-MiniLM-L6-v2's token embeddings)
3. `contrastive`  that NeoBERT fine-tuned by the contrastive-neobert-cpu recipe (InfoNCE plus distillation of
                  all-MiniLM-L6-v2's in-batch scores) into `neobert-embed`
4. `contrastive`  all-MiniLM-L6-v2 fine-tuned by the contrastive-cpu recipe into `minilm-embed`
5. `mteb-eval`    base and fine-tuned models and bm25 on the held-out WordNet tasks and FOLDOC, one table
6. `index build`  a FAISS index of WordNet glosses embedded by the fine-tuned MiniLM, then `search`
7. a fresh Python process loads `SentenceTransformer("neobert-embed")`

`Sizes` holds every knob that sets the run's length: `DEFAULT` takes about 7.5 minutes on two CPU
cores, `SMOKE` is the same pipeline at toy sizes for the integration test. `QuickstartSettings` is what the
`neoembed quickstart` command can be told: the run directory and which of the two.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import ConfigDict
from rich.console import Console

from neoembed.contrastive import ContrastiveResult, ContrastiveSettings
from neoembed.pretrain import PretrainSettings
from neoembed.quickstart.examples import LOAD_SNIPPET, SearchedQuery, search_queries, write_gloss_corpus
from neoembed.quickstart.steps import Ran, Step, command_line, printed_lines, run_command, run_steps
from neoembed.quickstart.summary import format_searches, write_summary
from neoembed.recipes import StrictSettings, override_args
from neoembed.workflow import MINILM_RECIPE, NEOBERT_RECIPE

# The build's sources: the manual pages (technical prose) keep the fine-tuned MiniLM above its base on FOLDOC,
# which WordNet alone does not in 2 seeds of 3 (docs/benchmarks/quickstart.md, issue 47).
SOURCES = ("wordnet", "manpages")
LOCAL_TASKS = (
    "WordNetExampleDefinitionRetrieval",
    "WordNetDefinitionRetrieval",
    "WordNetSynonymPairClassification",
    "WordNetPOSClassification",
    "FOLDOCDefinitionRetrieval",  # a source the training data never came from
)
SEARCH_QUERIES = 3  # held-out example sentences searched in the index


@dataclass
class Built:
    path: str
    rows_read: int
    rows_out: int
    sources: dict[str, int]  # rows out per source


@dataclass
class Pretrained:
    model: str
    heldout_loss: list[tuple[int, float]]  # (step, held-out MLM loss)


@dataclass
class Evaluated:
    table: str  # mteb-eval's comparison table (markdown)


@dataclass
class Indexed:
    manifest: dict  # the index's manifest.json
    searches: list[SearchedQuery]  # each held-out query with its expected synset and hits


@dataclass
class Loaded:
    script: str
    output: str


@dataclass(frozen=True)
class Sizes:
    data_rows: int = 10_000  # pairs read per source by build-data
    pretrain_steps: int | None = None  # None: the recipe's
    neobert_steps: int = 400
    neobert_batch_size: int = 64  # rows per contrastive step; every text in a batch distinct
    minilm_steps: int = 100
    minilm_batch_size: int = 32
    tasks: tuple[str, ...] = LOCAL_TASKS
    # The index uses the run's best embedder, the fine-tuned MiniLM; 5k glosses (those searched among them)
    # keep the step to about half a minute on 2 cores.
    index_documents: int | None = 5_000  # None: every WordNet gloss
    index_model: str = "minilm-embed"
    tune_queries: int = 1000


DEFAULT = Sizes()
SMOKE = Sizes(
    data_rows=300,
    pretrain_steps=4,
    neobert_steps=4,
    minilm_steps=2,
    neobert_batch_size=8,
    minilm_batch_size=8,
    tasks=("WordNetDefinitionRetrieval",),
    index_documents=400,
    tune_queries=50,
)


class QuickstartSettings(StrictSettings):
    """`neoembed quickstart`'s options."""

    model_config = ConfigDict(frozen=True)

    run_dir: Path = Path("runs/quickstart")
    """Where every step writes its outputs."""
    smoke: bool = False
    """Toy sizes: the same steps in a couple of minutes, as a check."""

    @property
    def sizes(self) -> Sizes:
        return SMOKE if self.smoke else DEFAULT


class Quickstart:
    """The steps, bound to one run directory and one set of sizes."""

    def __init__(self, run_dir: Path, sizes: Sizes, console: Console):
        self.run_dir = run_dir
        self.sizes = sizes
        self.console = console
        self.threads = str(len(os.sched_getaffinity(0)))

    def steps(self) -> list[Step]:
        return [
            self._step("data", "WordNet and manual-page training pairs", self.build_data, Built),
            self._step(
                "pretrain", "a small NeoBERT pretrained with MLM on WordNet text", self.pretrain, Pretrained
            ),
            self._step(
                "neobert-embed",
                "fine-tune the pretrained NeoBERT with InfoNCE and distillation from all-MiniLM-L6-v2",
                self.fine_tune_neobert,
                ContrastiveResult,
            ),
            self._step(
                "minilm-embed",
                f"fine-tune all-MiniLM-L6-v2 with the {MINILM_RECIPE} recipe",
                self.fine_tune_minilm,
                ContrastiveResult,
            ),
            self._step(
                "evaluate",
                "base and fine-tuned models and bm25 on held-out WordNet tasks and FOLDOC",
                self.evaluate,
                Evaluated,
            ),
            self._step(
                "index",
                f"FAISS index of WordNet glosses, embedded by {self.sizes.index_model}",
                self.index,
                Indexed,
            ),
            self._step(
                "load", 'SentenceTransformer("neobert-embed") in a fresh Python process', self.load, Loaded
            ),
        ]

    def _step(self, name: str, description: str, run, result_type: type) -> Step:
        """A step that also records the commands it ran, for the summary."""

        def run_and_record(run_dir: Path) -> Ran:
            self._current, self._commands = name, list[str]()
            return Ran(run(run_dir), self._commands)

        return Step(name, description, run_and_record, result_type)

    def _run(self, args: list, **kwargs) -> str:
        """Run a command of the current step (see run_command), logging to logs/<step>.log."""
        self._commands.append(command_line(args, kwargs.get("program", "neoembed")))
        return run_command(args, self.run_dir / "logs" / f"{self._current}.log", self.console, **kwargs)

    def build_data(self, run_dir: Path) -> Built:
        out = run_dir / "data"
        self._run(
            # No mining: both fine-tunes train on (query, positive) pairs alone (the recipe's max_negatives: 0),
            # and mining was three quarters of this step (docs/benchmarks/quickstart.md).
            [
                "build-data",
                "--out",
                out,
                "--sources",
                ",".join(SOURCES),
                "--max-rows",
                self.sizes.data_rows,
                "--no-mine",
            ]
        )
        stats = json.loads((out / "stats.json").read_text())
        total, rows = stats["total"], {name: s["rows_out"] for name, s in stats["sources"].items()}
        return Built(str(out), total["rows_read"], total["rows_out"], rows)

    def pretrain(self, run_dir: Path) -> Pretrained:
        out = run_dir / "pretrain"
        args = ["pretrain", "--recipe", "pretrain-cpu"]
        args += override_args(
            PretrainSettings, (lambda r: r.train.output_dir, out), (lambda r: r.train.threads, self.threads)
        )
        if steps := self.sizes.pretrain_steps:
            args += override_args(
                PretrainSettings,
                (lambda r: r.train.max_steps, steps),
                (lambda r: r.train.log_steps, steps),
                (lambda r: r.train.eval_steps, steps),
                (lambda r: r.train.save_steps, steps),
            )
        self._run(args)
        # A stable, readable name for the later steps and the table (the trainer writes <out>/final).
        model = run_dir / "neobert-pretrained"
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(out / "final", model)
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        held_out = [(m["step"], round(m["eval_loss"], 3)) for m in metrics if "eval_loss" in m]
        return Pretrained(str(model), held_out)

    def fine_tune_neobert(self, run_dir: Path) -> ContrastiveResult:
        base, sizes = run_dir / "neobert-pretrained", self.sizes
        return self._fine_tune(
            "neobert-embed", NEOBERT_RECIPE, base, sizes.neobert_steps, sizes.neobert_batch_size
        )

    def fine_tune_minilm(self, run_dir: Path) -> ContrastiveResult:
        sizes = self.sizes
        return self._fine_tune(
            "minilm-embed", MINILM_RECIPE, "minilm", sizes.minilm_steps, sizes.minilm_batch_size
        )

    def _fine_tune(self, name: str, recipe: str, base, steps: int, batch_size: int) -> ContrastiveResult:
        out = self.run_dir / "contrastive" / name
        save_every = max(1, steps // 2)
        log_every = math.gcd(10, save_every)  # the recipe logs every 10 steps; each save must be a log step
        args = ["contrastive", "--recipe", recipe, "--steps", steps]
        args += override_args(
            ContrastiveSettings,
            (lambda r: r.model.base, base),
            (lambda r: r.data.path, self.run_dir / "data"),
            (lambda r: r.train.output_dir, out),
            (lambda r: r.export.path, self.run_dir / name),
            (lambda r: r.train.threads, self.threads),
            (lambda r: r.train.batch_size, batch_size),
            (lambda r: r.train.save_steps, save_every),
            (lambda r: r.train.log_steps, log_every),
            # No held-out scoring inside the run: the evaluate step scores every model on the same sets and more.
            (lambda r: r.eval.sets, "[]"),
        )
        self._run(args)
        return ContrastiveResult.read(out / "summary.json")

    def evaluate(self, run_dir: Path) -> Evaluated:
        out = run_dir / "mteb"
        models = [
            run_dir / "neobert-pretrained",
            run_dir / "neobert-embed",
            "minilm",
            run_dir / "minilm-embed",
        ]
        args = ["mteb-eval", *[a for m in [*models, "bm25"] for a in ("-m", m)]]
        # Each fine-tuned model against its own base, and the lexical baseline against the best model.
        pairs = ["neobert-embed:neobert-pretrained", "minilm-embed:all-MiniLM-L6-v2", "bm25:best"]
        args += [a for pair in pairs for a in ("--compare", pair)]
        args += ["-t", ",".join(self.sizes.tasks), "-o", out, "--threads", self.threads]
        self._run(args)
        return Evaluated((out / "summary.md").read_text().split("\n\n")[0])

    def index(self, run_dir: Path) -> Indexed:
        queries = search_queries(SEARCH_QUERIES)
        corpus: str | Path = "wordnet"  # every synset: "lemmas: gloss"
        if self.sizes.index_documents:
            corpus = write_gloss_corpus(run_dir / "glosses.jsonl", self.sizes.index_documents, queries)
        out = run_dir / "index"
        model = run_dir / self.sizes.index_model
        args: list[object] = ["index", "build", "--corpus", corpus, "--model", model, "--out", out]
        args += ["--tune-queries", self.sizes.tune_queries, "--threads", self.threads]
        self._run(args)
        search = ["search", "--index", out, "-k", 10, "--json", *[q.text for q in queries]]
        text = self._run(search, echo=False)
        results = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        searches = [q.with_hits(r["hits"]) for q, r in zip(queries, results, strict=True)]
        self.console.print(format_searches(searches), highlight=False)
        return Indexed(json.loads((out / "manifest.json").read_text()), searches)

    def load(self, run_dir: Path) -> Loaded:
        script = run_dir / "use_neobert_embed.py"
        script.write_text(LOAD_SNIPPET)
        output = self._run([script.name], cwd=run_dir, program="python")
        return Loaded(str(script), "\n".join(printed_lines(output)))


def run_quickstart(run_dir: Path, sizes: Sizes = DEFAULT, console: Console | None = None) -> Path:
    """Run every step under `run_dir` (resuming finished ones); write and print summary.md; return its path."""
    console = console or Console(soft_wrap=True)  # long commands and titles stay on one line
    results = run_steps(Quickstart(run_dir, sizes, console).steps(), run_dir, console)
    return write_summary(run_dir, results, console)
