"""`neoembed bench contrastive`: neoembed's shipped CPU recipe against plain sentence-transformers, each
fine-tuning the same base model on the same default WordNet build with the same budget, seed and precision, in
every precision the machine trains in and over several seeds, all scored with BM25 and the base model in one
mteb run (`neoembed.evaluation.runner`). One run is an anecdote: each result is the mean over seeds with its
spread, and each comparison a paired bootstrap over the tasks' queries of the seed-averaged scores
(`significance.mean_of`). `goal_checks` holds the recipe to its targets.

- Data: the build contrastive-cpu's header makes (`build-data --sources wordnet,manpages`: every WordNet pair
  kind and the manual pages, mined negatives), at most `rows` rows a source, built once under the output
  directory (the builder resumes and reuses a finished build).
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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from neoembed.bench import st_baseline
from neoembed.bench.report import Report, Row, Table, WrittenReport, met_text, write_report
from neoembed.bench.seeds import AVERAGE, Scores, SeedAverages
from neoembed.bench.settings import ContrastiveBench
from neoembed.bench.st_baseline import Trained
from neoembed.contrastive import ContrastiveSettings
from neoembed.errors import InputError
from neoembed.recipes import field_path, load_recipe
from neoembed.run_files import METRICS_FILE, read_jsonl, write_json

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
# The targets the neoembed recipe is held to (see `goal_checks`), as relative gains over the base model.
FOLDOC_GAIN = 0.01  # mean over runs on the cross-source set (and no run below the base)
EXAMPLE_GAIN = 0.08  # mean over runs on WordNet example -> definition
# A score exactly at a bound meets it despite float rounding.
EPSILON = 1e-9
METHODS = {"neoembed": "neoembed", "st": "ST MNRL"}  # method -> its label in the tables
T = TypeVar("T", bound=Trained)  # what a reused run recorded
# The paired differences reported per group: method minus other (None: the base model).
COMPARISONS = (("neoembed", None), ("st", None), ("neoembed", "st"))


def _field(select: Callable[[ContrastiveSettings], object]) -> str:
    """A contrastive recipe field's dotted path (`recipes.field_path`)."""
    return field_path(ContrastiveSettings, select)


@dataclass(frozen=True)
class Check:
    target: str
    met: bool
    figures: str

    def line(self) -> str:
        return f"{self.target}: {self.figures}: {met_text(self.met)}"


@dataclass(frozen=True)
class Arm:
    """One training run of the grid: a method (neoembed's recipe, the sentence-transformers baseline, or the
    recipe on a NeoBERT) in one precision with one seed."""

    method: str
    precision: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.method}-{self.precision}-seed{self.seed}"

    def label(self, base_name: str) -> str:
        model = "NeoBERT" if self.method == "neobert" else base_name
        method = METHODS.get(self.method, "neoembed")
        return f"{model} {method} {self.precision} seed {self.seed}"


def relative(score: float | None, reference: float | None) -> float | None:
    return score / reference - 1 if score is not None and reference else None


def goal_checks(scores: Scores, base: str, runs: list[str], versus_st) -> list[Check]:
    """The recipe's targets over `scores` (label -> task -> main score in [0, 1]) of the base model and the
    recipe's `runs` (every seed and precision), and `versus_st`: the paired difference (a
    `significance.Difference`, or None) of the recipe's seed-averaged scores minus the baseline's, on the
    mean of the held-out tasks."""

    def gains(task: str) -> list[float | None]:
        return [relative(scores[run].get(task), scores[base].get(task)) for run in runs]

    def mean_gain(target: str, task: str, bound: float) -> Check:
        found = gains(task)
        if not found or any(g is None for g in found):
            return Check(target, False, "a score is missing (see mteb/mteb_eval.jsonl)")
        mean = sum(found) / len(found)
        return Check(target, mean >= bound - EPSILON, f"mean {mean:+.2%} over {len(found)} runs")

    foldoc = gains(FOLDOC_TASK)
    below = [run for run, g in zip(runs, foldoc) if g is None or g < 0]
    every_run = Check(
        "neoembed's FOLDOC nDCG@10 >= the base model's in every run",
        bool(runs) and not below,
        f"{len(runs) - len(below)}/{len(runs)} runs" + (f"; below: {', '.join(below)}" if below else ""),
    )
    ahead = "neoembed ahead of the ST baseline on the held-out mean, interval above 0"
    if versus_st is None or versus_st.low is None:
        ahead_check = Check(ahead, False, "no paired interval (per-query predictions missing)")
    else:
        low, high = 100 * versus_st.low, 100 * versus_st.high
        figures = f"{100 * versus_st.difference:+.2f} points [{low:+.2f}, {high:+.2f}]"
        ahead_check = Check(ahead, versus_st.low > 0, figures)
    return [
        every_run,
        mean_gain(f"neoembed's mean FOLDOC gain >= {FOLDOC_GAIN:+.0%}", FOLDOC_TASK, FOLDOC_GAIN),
        mean_gain(
            f"neoembed's mean WordNet example->definition gain >= {EXAMPLE_GAIN:+.0%}",
            EXAMPLE_TASK,
            EXAMPLE_GAIN,
        ),  # fmt: skip
        ahead_check,
    ]


DEFAULT_SOURCES = ("wordnet", "manpages")  # the build contrastive-cpu's header says to make


def default_build(out: Path, rows: int) -> Path:
    """`neoembed build-data --sources wordnet,manpages --max-rows rows --out out` with its defaults (every pair
    kind, mined negatives); a finished build with the same inputs is reused as it is."""
    from neoembed.data import BuildConfig, build

    build(BuildConfig(out=out, sources=DEFAULT_SOURCES, max_rows=rows))
    return out


def data_identity(data: Path) -> str:
    """A build's content identity: its stats.json (written last, holding the build's hash)."""
    stats = data / "stats.json"
    if not stats.is_file():
        raise InputError(f"{data}: no stats.json; not a finished neoembed build-data output", param="--data")
    return hashlib.sha256(stats.read_bytes()).hexdigest()[:16]


def reuse_or_train(
    run_dir: Path, identity: dict[str, Any], fresh: bool, train: Callable[[], T], kind: type[T] = Trained
) -> T:
    """The result (a `kind`) recorded by a finished run in `run_dir` with the same `identity`, else train
    afresh (a resumed run would get a second time budget). `run_dir` may be a link to a run of another bench
    directory (reused from there; replaced by a fresh run of its own, never trained over)."""
    marker = run_dir / "bench-run.json"
    identity = json.loads(json.dumps(identity))  # as it reads back from the marker
    if not fresh and marker.is_file():
        recorded = json.loads(marker.read_text())
        if "recipe" in recorded["identity"]:  # markers written before 2026-11-26 also held the arm's location
            recorded["identity"]["recipe"] = recipe_identity(recorded["identity"]["recipe"])
        if recorded["identity"] == identity:
            return replace(kind(**recorded["result"]), reused=True)
    if run_dir.is_symlink():
        run_dir.unlink()
    shutil.rmtree(run_dir, ignore_errors=True)
    result = train()
    write_json(marker, {"identity": identity, "result": asdict(result)})
    return result


def refuse_overrides(overrides: dict, fixed, why: str) -> None:
    """A `--set` of a field the bench sets itself is an error naming the fields and `why`."""
    clash = sorted(set(overrides) & set(fixed))
    if clash:
        raise InputError(f"--set {', '.join(clash)}: {why}", param="--set")


def neoembed_settings(
    recipe: Path, base: str, data: Path, run_dir: Path, budget, threads: int, overrides: dict
):
    """The recipe with the user's overrides, then the fields every compared model shares: data, base, budget
    (`st_baseline.Budget`), seed, precision and threads. Overriding one of them would break "same data, base,
    budget and threads": a `--set` of any is refused."""
    shared = {
        _field(lambda r: r.data.path): str(data),
        _field(lambda r: r.model.base): base,
        _field(lambda r: r.train.output_dir): str(run_dir),
        _field(lambda r: r.train.seed): budget.seed,
        _field(lambda r: r.train.precision): budget.precision,
        _field(lambda r: r.train.threads): threads,
        _field(lambda r: r.export.path): str(run_dir / f"{run_dir.name}-model"),
        # None: the recipe's own (a time budget runs within the recipe's schedule of steps)
        _field(lambda r: r.train.max_steps): budget.steps,
        _field(lambda r: r.train.max_minutes): budget.minutes,
    }
    refuse_overrides(
        overrides,
        shared,
        "set by the bench (--data, --model, --steps, --minutes, --seeds, --precisions, --threads, --out) so "
        "that every compared model shares it",
    )
    shared = {field: value for field, value in shared.items() if value is not None}
    return load_recipe(recipe, ContrastiveSettings, {**overrides, **shared})


def recipe_identity(recipe: dict[str, Any]) -> dict[str, Any]:
    """What a neoembed arm trains (its recipe, dumped), not where it is written or its corpus file lies (the
    caller identifies the corpus by content): a bench directory renamed, or an arm linked in from another
    one, is reused."""
    train = {k: v for k, v in recipe["train"].items() if k != "output_dir"}
    export = {k: v for k, v in recipe["export"].items() if k != "path"}
    located = {"train": train, "export": export}
    if "corpus" in recipe:  # an adapt recipe
        located["corpus"] = {k: v for k, v in recipe["corpus"].items() if k not in ("path", "eval_texts")}
    return {**recipe, **located}


def train_neoembed(settings: ContrastiveSettings) -> Trained:
    from neoembed.contrastive import run_contrastive
    from neoembed.training import logged_runtime

    result = run_contrastive(settings)
    seconds = logged_runtime(read_jsonl(Path(settings.train.output_dir) / METRICS_FILE))
    return Trained(result.steps, seconds / 60, result.export, result.eval_before, result.eval_after)


def run(bench: ContrastiveBench) -> WrittenReport:
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import parse_overrides

    recipe = resolve_recipe(bench.recipe)
    overrides = parse_overrides([f"--{item}" for item in bench.overrides])
    threads, base, out_dir, fresh = bench.threads, bench.model, bench.out, bench.fresh
    torch.set_num_threads(threads)
    data = bench.data or default_build(out_dir / "data", bench.rows)
    data_id = data_identity(data)
    # The recipe's own steps unless told otherwise ("as shipped"), and its training length; the baseline
    # gets the same.
    recipe_settings = load_recipe(
        recipe, ContrastiveSettings, {**overrides, _field(lambda r: r.data.path): str(data)}
    )
    steps = None if bench.minutes else bench.steps or recipe_settings.train.max_steps
    max_length = recipe_settings.model.max_length
    precisions = bench.run_precisions()
    methods = ["neoembed", "st"] + (["neobert"] if bench.neobert else [])
    arms = [Arm(m, p, seed) for p in precisions for seed in range(bench.seeds) for m in methods]

    def train(arm: Arm) -> Trained:
        budget = st_baseline.Budget(steps, bench.minutes, arm.seed, arm.precision)
        run_dir = out_dir / arm.name
        if arm.method == "st":
            identity = {"base": base, "data": data_id, "budget": asdict(budget), "threads": threads,
                        "max_length": max_length,
                        "settings": [st_baseline.LEARNING_RATE, st_baseline.BATCH_SIZE, st_baseline.WARMUP]}  # fmt: skip
            export = run_dir / f"{arm.name}-model"
            return reuse_or_train(
                run_dir,
                identity,
                fresh,
                lambda: st_baseline.train(base, data, run_dir, export, budget, max_length),
            )
        model = bench.neobert if arm.method == "neobert" else base
        settings = neoembed_settings(recipe, model, data, run_dir, budget, threads, overrides)
        identity = {"recipe": recipe_identity(settings.model_dump(mode="json")), "data": data_id}
        return reuse_or_train(run_dir, identity, fresh, lambda: train_neoembed(settings))

    runs = {arm.name: train(arm) for arm in arms}

    name = Path(base).name
    base_row = f"{name} (base)"
    # Row label -> (model to load, the row of the base it was fine-tuned from, its run).
    models = {"BM25": ("bm25", None, None), base_row: (base, None, None)}
    if bench.neobert:
        models["NeoBERT (base)"] = (bench.neobert, None, None)
    for arm in arms:
        from_base = "NeoBERT (base)" if arm.method == "neobert" else base_row
        models[arm.label(name)] = (runs[arm.name].export, from_base, arm.name)
    # The base model first: the harness's paired differences are against the first model.
    loaded = {base_row: base, **{label: model for label, (model, _, _) in models.items()}}
    seeded = SeedAverages.evaluate(loaded, COLUMNS, 128, out_dir / "mteb")
    scores = seeded.scores

    groups = {p: [a for a in arms if a.precision == p] for p in precisions}
    if len(precisions) > 1:
        groups["all"] = arms
    ours = [arm.label(name) for arm in arms if arm.method == "neoembed"]
    last = groups[list(groups)[-1]]  # all runs, or the one precision
    versus_st = seeded.compare(*sides(last, "neoembed", "st", name, base_row)).get(AVERAGE)
    checks = goal_checks(scores, base_row, ours, versus_st)
    per_run = [
        table_row(label, scores, reference, runs.get(run)) for label, (_, reference, run) in models.items()
    ]
    summary, differences = [], []
    for group, members in groups.items():
        summary += summary_rows(seeded, group, members, name, base_row)
        differences += difference_rows(seeded, group, members, name, base_row)
    budget_text = f"{steps} steps" if steps else f"{bench.minutes:g} minutes of steps"
    notes = (
        f"Each model trained for {budget_text} on {threads} CPU thread(s) on {data}, seeds 0..{bench.seeds - 1} in "
        f"{', '.join(precisions)}; neoembed: {recipe.stem}; ST MNRL: sentence-transformers' trainer and "
        "MultipleNegativesRankingLoss, lr 5e-5, batch 64, 10% warmup, (query, positive) pairs only, same seed, "
        f"steps, precision and training length ({max_length} tokens). Scores: mean over the runs (relative change "
        "vs the base) [lowest, highest run]."
    )
    difference_notes = (
        "Paired differences in points (x 100) of the seed-averaged scores, with the 95% interval of a paired "
        "bootstrap over each task's queries (all tasks' queries for the mean); * where the interval excludes 0."
    )
    report = Report(
        name="contrastive",
        title="neoembed bench contrastive",
        tables=[
            Table(summary, ["group", "model", *COLUMNS.values()], after=[notes]),
            Table(differences, ["group", "comparison", *COLUMNS.values(), "mean"], after=[difference_notes]),
            Table(
                per_run,
                ["model", *COLUMNS.values(), "steps", "train minutes"],
                after=[f"Recipe targets ({sum(c.met for c in checks)}/{len(checks)} met):"],
            ),  # fmt: skip
        ],
        verdicts=[check.line() for check in checks],
        payload={
            "rows": per_run,
            "summary": summary,
            "differences": differences,
            "scores": scores,
            "checks": checks,
            "runs": runs,
            "data": str(data),
            "recipe": str(recipe),
            "overrides": overrides,
            "steps": steps,
            "minutes": bench.minutes,
            "seeds": bench.seeds,
            "precisions": list(precisions),
            "threads": threads,
        },
    )
    return write_report(report, out_dir)


def labels_of(members: list[Arm], method: str, base_name: str) -> list[str]:
    return [arm.label(base_name) for arm in members if arm.method == method]


def summary_rows(
    seeded: SeedAverages, group: str, members: list[Arm], base_name: str, base_row: str
) -> list[Row]:
    """The base, then each method's runs in the group as one model (NeoBERT's without a change: its base is
    another model)."""
    base = {column: f"{seeded.scores[base_row][task]:.4f}" for task, column in COLUMNS.items()}
    rows = [Row({"group": group, "model": base_row}, base)]
    for method in dict.fromkeys(arm.method for arm in members):
        labels = labels_of(members, method, base_name)
        model = f"{METHODS.get(method, 'NeoBERT neoembed')} x {len(labels)}"
        reference = None if method == "neobert" else base_row
        rows.append(Row({"group": group, "model": model}, seeded.summary_cells(labels, reference)))
    return rows


def sides(members: list[Arm], method: str, other: str | None, base_name: str, base_row: str):
    """The run labels of `method` and of `other` (None: the base) in a group."""
    theirs = labels_of(members, other, base_name) if other else [base_row]
    return labels_of(members, method, base_name), theirs


def difference_rows(seeded: SeedAverages, group: str, members: list[Arm], base_name: str, base_row: str):
    return [
        Row(
            {"group": group, "comparison": f"{METHODS[method]} - {METHODS[other] if other else 'base'}"},
            seeded.difference_cells(*sides(members, method, other, base_name, base_row)),
        )
        for method, other in COMPARISONS
    ]


def table_row(label: str, scores: Scores, from_base: str | None, trained: Trained | None) -> Row:
    """One model's scores; a fine-tuned model's cells also give the relative change vs its base."""

    def cell(task: str) -> str:
        score = scores[label].get(task)
        if score is None:
            return "n/a" if label == "BM25" and task == POS_TASK else "missing"
        reference = scores[from_base].get(task) if from_base else None
        return f"{score:.4f} ({score / reference - 1:+.1%})" if reference else f"{score:.4f}"

    return Row({"model": label}, {
        **{column: cell(task) for task, column in COLUMNS.items()},
        "steps": trained.steps if trained else "",
        "train minutes": f"{trained.train_minutes:.1f}" if trained else "",
    })  # fmt: skip
