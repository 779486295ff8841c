"""`neoembed bench contrastive`: neoembed's shipped CPU recipe against plain sentence-transformers, each
fine-tuning the same base model on the same default WordNet build for the same CPU time budget, scored with
BM25 and the base model in one mteb run (`neoembed.evaluation.runner`), and checked against the recipe's
goals (`goal_checks`: better than the base on held-out retrieval, a margin over the baseline on FOLDOC, and
part-of-speech accuracy kept).

- Data: the build a user gets from `neoembed build-data` (every WordNet pair kind, mined negatives), at
  `rows` rows, built once under the output directory (the builder resumes and reuses a finished build).
- neoembed: the packaged recipe (`contrastive-cpu` unless told), with `--set` overrides.
- sentence-transformers: `neoembed.bench.st_baseline`, on the same records' (query, positive) columns.
- Tasks, all held out from training: WordNet example -> definition and lemma -> definition, FOLDOC term ->
  definition (a source no training build reads), and WordNet part-of-speech classification (does fine-tuning
  keep what the base model knew?).

With `--neobert DIR` a pretrained NeoBERT goes through the same neoembed recipe and gets its rows too.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from neoembed.bench.report import Report, Table, WrittenReport, write_report
from neoembed.bench.settings import ContrastiveBench
from neoembed.errors import InputError
from neoembed.run_files import METRICS_FILE, write_json

EXAMPLE_TASK = "WordNetExampleDefinitionRetrieval"
LEMMA_TASK = "WordNetDefinitionRetrieval"
FOLDOC_TASK = "FOLDOCDefinitionRetrieval"
POS_TASK = "WordNetPOSClassification"
COLUMNS = {
    EXAMPLE_TASK: "WordNet example->definition nDCG@10",
    LEMMA_TASK: "WordNet lemma->definition nDCG@10",
    FOLDOC_TASK: "FOLDOC term->definition nDCG@10",
    POS_TASK: "WordNet POS accuracy",
}
# The goals the neoembed recipe is held to (see `goal_checks`).
FOLDOC_MARGIN = 0.02  # relative gain over the sentence-transformers baseline on the cross-source set
POS_POINTS = 2.0  # largest drop from the base model, in accuracy points (x 100)
# A score exactly at a bound meets it despite float rounding (67.6 -> 65.6 is a 2.0000000000000018 drop).
EPSILON = 1e-9
# Fields the bench sets itself: overriding one would break "same data, base, budget and threads".
BENCH_FIELDS = (
    "data.path",
    "model.base",
    "train.output_dir",
    "train.max_minutes",
    "train.threads",
    "export.path",
)


@dataclass(frozen=True)
class Check:
    target: str
    met: bool
    figures: str

    def line(self) -> str:
        return f"{self.target}: {self.figures}: {'met' if self.met else 'NOT met'}"


def goal_checks(
    scores: dict[str, dict[str, float | None]], base: str, neoembed: str, baseline: str
) -> list[Check]:
    """The recipe's goals checked over `scores` (model -> task -> main score in [0, 1]) of the base model, the
    neoembed fine-tune and the sentence-transformers baseline. A missing score fails its check."""

    def check(target: str, task: str, other: str, passes: Callable[[float, float], bool]) -> Check:
        ours, theirs = scores[neoembed].get(task), scores[other].get(task)
        if ours is None or theirs is None:
            return Check(target, False, "a score is missing (see mteb/mteb_eval.jsonl)")
        name = "base" if other == base else "ST"
        if task == POS_TASK:
            figures = f"{100 * ours:.1f} vs {name} {100 * theirs:.1f} ({100 * (ours - theirs):+.1f} points)"
        else:
            change = f" ({ours / theirs - 1:+.2%})" if theirs else ""
            figures = f"{ours:.4f} vs {name} {theirs:.4f}{change}"
        return Check(target, passes(ours, theirs), figures)

    return [
        check("neoembed improves WordNet example->definition over base", EXAMPLE_TASK, base,
              lambda ours, theirs: ours > theirs),
        check("neoembed improves FOLDOC over base", FOLDOC_TASK, base, lambda ours, theirs: ours > theirs),
        check(f"neoembed beats the ST baseline on FOLDOC by >= {FOLDOC_MARGIN:.0%} relative", FOLDOC_TASK,
              baseline, lambda ours, theirs: ours >= (1 + FOLDOC_MARGIN) * theirs - EPSILON),
        check("neoembed does not lose to the ST baseline on WordNet example->definition", EXAMPLE_TASK,
              baseline, lambda ours, theirs: ours >= theirs),
        check(f"neoembed POS accuracy within {POS_POINTS:g} points of base", POS_TASK, base,
              lambda ours, theirs: 100 * (theirs - ours) <= POS_POINTS + EPSILON),
    ]  # fmt: skip


def default_build(out: Path, rows: int) -> Path:
    """`neoembed build-data --sources wordnet --max-rows rows --out out` with its defaults (every pair kind,
    mined negatives); a finished build with the same inputs is reused as it is."""
    from neoembed.data import BuildConfig, build

    build(BuildConfig(out=out, sources=("wordnet",), max_rows=rows))
    return out


def data_identity(data: Path) -> str:
    """A build's content identity: its stats.json (written last, holding the build's hash)."""
    stats = data / "stats.json"
    if not stats.is_file():
        raise InputError(f"{data}: no stats.json; not a finished neoembed build-data output", param="--data")
    return hashlib.sha256(stats.read_bytes()).hexdigest()[:16]


def reuse_or_train(run_dir: Path, identity: dict, fresh: bool, train: Callable[[], dict]) -> dict:
    """The result recorded by a finished run in `run_dir` with the same `identity`, else train afresh (a
    resumed run would get a second time budget)."""
    marker = run_dir / "bench-run.json"
    identity = json.loads(json.dumps(identity))  # as it reads back from the marker
    if not fresh and marker.is_file():
        recorded = json.loads(marker.read_text())
        if recorded["identity"] == identity:
            return {**recorded["result"], "reused": True}
    shutil.rmtree(run_dir, ignore_errors=True)
    result = train()
    write_json(marker, {"identity": identity, "result": result})
    return result


def neoembed_settings(
    recipe: Path, base: str, data: Path, run_dir: Path, minutes: float, threads: int, overrides: dict
):
    """The recipe with the user's overrides, then the fields every compared model shares."""
    from neoembed.contrastive import ContrastiveSettings
    from neoembed.recipes import load_recipe

    fixed = sorted(set(overrides) & set(BENCH_FIELDS))
    if fixed:
        raise InputError(
            f"--set {', '.join(fixed)}: set by the bench (--data, --model, --minutes, --threads, --out) so that "
            "every compared model shares it",
            param="--set",
        )
    return load_recipe(
        recipe,
        ContrastiveSettings,
        {
            **overrides,
            "data.path": str(data),
            "model.base": base,
            "train.output_dir": str(run_dir),
            "train.max_minutes": minutes,
            "train.threads": threads,
            "export.path": str(run_dir / f"{run_dir.name}-model"),
        },
    )


def train_neoembed(settings) -> dict:
    from neoembed.contrastive import run_contrastive

    result = run_contrastive(settings)
    return {
        "steps": result.steps,
        "train_minutes": trainer_runtime(Path(settings.train.output_dir) / METRICS_FILE) / 60,
        "export": result.export,
        "eval_before": result.eval_before,
        "eval_after": result.eval_after,
    }


def trainer_runtime(metrics: Path) -> float:
    """Seconds of `trainer.train()` as the Trainer logged them at the end (in-training evaluations included)."""
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return next(r["train_runtime"] for r in reversed(records) if "train_runtime" in r)


def run(bench: ContrastiveBench) -> WrittenReport:
    from neoembed.bench import st_baseline
    from neoembed.evaluation import LOCAL_TASKS, EvalSettings, resolve_models, run_evaluation
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import parse_overrides

    recipe, overrides = (
        resolve_recipe(bench.recipe),
        parse_overrides([f"--{item}" for item in bench.overrides]),
    )
    minutes, threads, base, neobert, out_dir, fresh = (
        bench.minutes, bench.threads, bench.model, bench.neobert, bench.out, bench.fresh
    )  # fmt: skip
    torch.set_num_threads(threads)
    data = bench.data or default_build(out_dir / "data", bench.rows)
    data_id = data_identity(data)

    def neoembed_run(model: str, run_dir: Path) -> dict:
        settings = neoembed_settings(recipe, model, data, run_dir, minutes, threads, overrides)
        identity = {"recipe": settings.model_dump(mode="json"), "data": data_id}
        return reuse_or_train(run_dir, identity, fresh, lambda: train_neoembed(settings))

    st_dir = out_dir / "st-baseline"
    st_identity = {
        "base": base,
        "data": data_id,
        "minutes": minutes,
        "threads": threads,
        "settings": [st_baseline.LEARNING_RATE, st_baseline.BATCH_SIZE, st_baseline.WARMUP],
    }
    runs = {
        "neoembed": neoembed_run(base, out_dir / "neoembed"),
        "st-baseline": reuse_or_train(
            st_dir,
            st_identity,
            fresh,
            lambda: st_baseline.train(base, data, st_dir, minutes, st_dir / "st-baseline-model"),
        ),
    }
    if neobert:
        runs["neobert-neoembed"] = neoembed_run(neobert, out_dir / "neobert-neoembed")

    # Row label -> (model to load, the row of the base it was fine-tuned from, its training run).
    name = Path(base).name
    base_row, ours, theirs = f"{name} (base)", f"{name} neoembed ({recipe.stem})", f"{name} ST MNRL"
    models = {
        "BM25": ("bm25", None, None),
        base_row: (base, None, None),
        ours: (runs["neoembed"]["export"], base_row, "neoembed"),
        theirs: (runs["st-baseline"]["export"], base_row, "st-baseline"),
    }
    if neobert:
        models["NeoBERT (base)"] = (neobert, None, None)
        models[f"NeoBERT neoembed ({recipe.stem})"] = (
            runs["neobert-neoembed"]["export"],
            "NeoBERT (base)",
            "neobert-neoembed",
        )
    eval_settings = EvalSettings(max_length=128)
    # The base model first: the harness's paired differences are against the first model.
    order = [base_row, *(label for label in models if label != base_row)]
    specs = dict(zip(order, resolve_models([models[label][0] for label in order], eval_settings)))
    tasks = [LOCAL_TASKS[task]() for task in COLUMNS]
    report = run_evaluation(list(specs.values()), tasks, eval_settings, out_dir / "mteb")
    scores = {label: report.summary.scores[spec.label] for label, spec in specs.items()}

    table = [
        table_row(label, scores, reference, runs.get(run)) for label, (_, reference, run) in models.items()
    ]
    checks = goal_checks(scores, base_row, ours, theirs)
    columns = ["model", *COLUMNS.values(), "steps", "train minutes"]
    notes = (
        f"Fine-tuned rows: score (relative change vs their base). Each model trained for {minutes:g} minutes of "
        f"steps on {threads} CPU thread(s) on {data}; train minutes are the trainer's runtime, which for "
        "neoembed includes its in-training evaluations (the budget does not count them). ST MNRL: "
        "sentence-transformers' trainer and MultipleNegativesRankingLoss, lr 5e-5, batch 64, 10% warmup, "
        "(query, positive) pairs only. Paired differences vs the base with bootstrap intervals: "
        f"{out_dir / 'mteb' / 'summary.md'}."
    )
    report = Report(
        name="contrastive",
        title="neoembed bench contrastive",
        tables=[
            Table(
                table,
                columns,
                after=[notes, f"Recipe goals ({sum(c.met for c in checks)}/{len(checks)} met):"],
            )
        ],
        verdicts=[check.line() for check in checks],
        payload={
            "rows": table,
            "scores": scores,
            "checks": [asdict(check) for check in checks],
            "runs": runs,
            "data": str(data),
            "recipe": str(recipe),
            "overrides": overrides,
            "minutes": minutes,
            "threads": threads,
        },
    )
    return write_report(report, out_dir)


def table_row(label: str, scores: dict, from_base: str | None, trained: dict | None) -> dict:
    """One model's scores; a fine-tuned model's cells also give the relative change vs its base."""

    def cell(task: str) -> str:
        score = scores[label].get(task)
        if score is None:
            return "n/a" if label == "BM25" and task == POS_TASK else "missing"
        reference = scores[from_base].get(task) if from_base else None
        return f"{score:.4f} ({score / reference - 1:+.1%})" if reference else f"{score:.4f}"

    return {
        "model": label,
        **{column: cell(task) for task, column in COLUMNS.items()},
        "steps": trained["steps"] if trained else "",
        "train minutes": f"{trained['train_minutes']:.1f}" if trained else "",
    }
