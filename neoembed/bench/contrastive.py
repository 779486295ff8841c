"""`neoembed bench contrastive`: neoembed's shipped CPU recipe against plain sentence-transformers, each
fine-tuning the same base model on the same default WordNet build with the same budget, seed and precision, in
every precision the machine trains in and over several seeds, all scored with BM25 and the base model in one
mteb run, as `bench.comparison` compares. `goal_checks` holds the recipe to its targets.

- Data: the build contrastive-cpu's header makes (`build-data --sources wordnet,manpages`: every WordNet pair
  kind and the manual pages, mined negatives), at most `rows` rows a source, built once under the output
  directory (the builder resumes and reuses a finished build).
- neoembed: the packaged recipe (`contrastive-cpu` unless told), with `--set` overrides.
- sentence-transformers: `neoembed.bench.st_baseline`, on the same records' (query, positive) columns.
- Tasks, all held out from training: WordNet example -> definition and lemma -> definition, FOLDOC term ->
  definition (a source no training build reads), and WordNet part-of-speech classification (does fine-tuning
  keep what the base model knew?).

With `--neobert DIR` a pretrained NeoBERT goes through the same neoembed recipe and gets its rows too.

With your own pairs (`--data FILE`) the build is that file's, made as `neoembed contrastive --data.path FILE`
makes it, and your test set (`--test`, by default the file's held-out split) is the first task; the targets are
then the ones a user's data is held to (`your_checks`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from itertools import product
from pathlib import Path

import torch

from neoembed.bench import st_baseline
from neoembed.bench.comparison import (
    AVERAGE,
    EPSILON,
    Arm,
    Check,
    Group,
    Scores,
    SeedAverages,
    Tables,
    recipe_identity,
    relative,
    reuse_or_train,
    train_and_score,
)
from neoembed.bench.report import Row, Table, WrittenReport, write_report
from neoembed.bench.settings import ContrastiveBench
from neoembed.bench.st_baseline import Trained
from neoembed.contrastive import ContrastiveSettings
from neoembed.errors import InputError
from neoembed.recipes import field_path, load_recipe
from neoembed.run_files import METRICS_FILE, read_jsonl

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
YOUR_GAIN = 0.05  # on your test set (see `your_checks`)
# method -> its name in tables
METHODS = {"neoembed": "neoembed", "st": "ST MNRL", "neobert": "NeoBERT neoembed"}
COMPARISONS = (("neoembed", None), ("st", None), ("neoembed", "st"))
DEFAULT_SOURCES = ("wordnet", "manpages")  # the build contrastive-cpu's header says to make


def _field(select: Callable[[ContrastiveSettings], object]) -> str:
    """A contrastive recipe field's dotted path (`recipes.field_path`)."""
    return field_path(ContrastiveSettings, select)


def goal_checks(scores: Scores, base: str, runs: list[str], versus_st) -> list[Check]:
    """The recipe's targets over `scores` of the base model and the recipe's `runs` (every seed and precision),
    and `versus_st`: the paired difference (a `significance.Difference`, or None) of the recipe's
    seed-averaged scores minus the baseline's, on the mean of the held-out tasks."""

    def gains(task: str) -> list[float | None]:
        return [relative(scores[run].get(task), scores[base].get(task)) for run in runs]

    def mean_gain(name: str, task: str, bound: float) -> Check:
        target = f"neoembed's mean {name} gain >= {bound:+.0%}"
        found = [gain for gain in gains(task) if gain is not None]
        if not found or len(found) < len(runs):
            return Check(target, False, "a score is missing (see mteb/mteb_eval.jsonl)")
        mean = sum(found) / len(found)
        return Check(target, mean >= bound - EPSILON, f"mean {mean:+.2%} over {len(found)} runs")

    below = [run for run, gain in zip(runs, gains(FOLDOC_TASK)) if gain is None or gain < 0]
    counted = f"{len(runs) - len(below)}/{len(runs)} runs" + (f"; below: {', '.join(below)}" if below else "")
    every_run = "neoembed's FOLDOC nDCG@10 >= the base model's in every run"
    ahead = "neoembed ahead of the ST baseline on the held-out mean, interval above 0"
    if versus_st is None or versus_st.low is None:
        versus = Check(ahead, False, "no paired interval (per-query predictions missing)")
    else:
        low, high = 100 * versus_st.low, 100 * versus_st.high
        figures = f"{100 * versus_st.difference:+.2f} points [{low:+.2f}, {high:+.2f}]"
        versus = Check(ahead, versus_st.low > 0, figures)
    return [
        Check(every_run, bool(runs) and not below, counted),
        mean_gain("FOLDOC", FOLDOC_TASK, FOLDOC_GAIN),
        mean_gain("WordNet example->definition", EXAMPLE_TASK, EXAMPLE_GAIN),
        versus,
    ]


def your_checks(scores: Scores, base: str, runs: list[str], task: str, versus_base, versus_st) -> list[Check]:
    """What fine-tuning on your own pairs is held to, on your test set `task`: the recipe's seed mean at least
    `YOUR_GAIN` above the base model with the paired interval above 0 (`versus_base`), and level with or above
    plain sentence-transformers MNRL on the same pairs, steps and batch (`versus_st`: its interval reaches 0 or
    above)."""
    found = [value for run in runs if (value := scores[run].get(task)) is not None]
    reference = scores[base].get(task)
    gain_target = f"neoembed's mean gain on {task} >= {YOUR_GAIN:+.0%}, interval above 0"
    if len(found) < len(runs) or not reference or versus_base is None or versus_base.low is None:
        gain = Check(gain_target, False, "a score or its per-query predictions are missing")
    else:
        mean = sum(found) / len(found) / reference - 1
        interval = f"{100 * versus_base.low:+.2f}, {100 * versus_base.high:+.2f}"
        gain = Check(
            gain_target,
            mean >= YOUR_GAIN - EPSILON and versus_base.low > 0,
            f"{mean:+.2%}, {100 * versus_base.difference:+.2f} points [{interval}]",
        )
    level = f"neoembed level with or above ST MNRL on {task} (interval reaches 0 or above)"
    if versus_st is None or versus_st.low is None:
        versus = Check(level, False, "no paired interval (per-query predictions missing)")
    else:
        figures = f"{100 * versus_st.difference:+.2f} points [{100 * versus_st.low:+.2f}, {100 * versus_st.high:+.2f}]"
        versus = Check(level, versus_st.high >= 0, figures)
    return [gain, versus]


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


def train_neoembed(settings: ContrastiveSettings) -> Trained:
    from neoembed.contrastive import run_contrastive
    from neoembed.training import logged_runtime

    result = run_contrastive(settings)
    assert result.export is not None  # trained in this one process, the first rank, which exports
    seconds = logged_runtime(read_jsonl(Path(settings.train.output_dir) / METRICS_FILE))
    return Trained(result.steps, seconds / 60, result.export, result.eval_before, result.eval_after)


@dataclass(frozen=True)
class Trial:
    """What every arm of one `bench contrastive` shares: the recipe, its overrides, the data, the budget."""

    bench: ContrastiveBench
    recipe: Path
    overrides: dict
    data: Path
    data_id: str  # the build's content (`data_identity`)
    steps: int | None  # None: a time budget
    max_length: int  # the recipe's training length, the baseline's too
    columns: dict[str, str]  # task -> its column: your test set's first, where there is one
    your_task: str | None = None  # the task name of your test set

    def arm(self, method: str, precision: str, seed: int) -> Arm:
        name = Path(self.bench.model).name
        neobert = method == "neobert"
        label = f"{'' if neobert else name + ' '}{METHODS[method]} {precision} seed {seed}"
        return Arm(method, precision, seed, label, "NeoBERT (base)" if neobert else f"{name} (base)")

    def train(self, arm: Arm) -> Trained:
        bench, run_dir = self.bench, self.bench.out / arm.name
        budget = st_baseline.Budget(self.steps, bench.minutes, arm.seed, arm.precision)
        if arm.method == "st":
            settings = [st_baseline.LEARNING_RATE, st_baseline.BATCH_SIZE, st_baseline.WARMUP]
            identity = {"base": bench.model, "data": self.data_id, "budget": asdict(budget),
                        "threads": bench.threads, "max_length": self.max_length, "settings": settings}  # fmt: skip
            export = run_dir / f"{arm.name}-model"
            return reuse_or_train(run_dir, identity, bench.fresh, lambda: st_baseline.train(
                bench.model, self.data, run_dir, export, budget, self.max_length))  # fmt: skip
        model = bench.neobert if arm.method == "neobert" else bench.model
        assert model is not None  # a neobert arm runs only with --neobert
        recipe = neoembed_settings(
            self.recipe, model, self.data, run_dir, budget, bench.threads, self.overrides
        )
        identity = {"recipe": recipe_identity(recipe.model_dump(mode="json")), "data": self.data_id}
        return reuse_or_train(run_dir, identity, bench.fresh, lambda: train_neoembed(recipe))


def run(bench: ContrastiveBench) -> WrittenReport:
    from neoembed.data import is_pairs_path
    from neoembed.evaluation import your_task
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import parse_overrides
    from neoembed.workflow import build_your_pairs, your_pairs_dir

    recipe = resolve_recipe(bench.recipe)
    overrides = parse_overrides([f"--{item}" for item in bench.overrides])
    torch.set_num_threads(bench.threads)
    data = bench.data or default_build(bench.out / "data", bench.rows)
    test = bench.test
    if is_pairs_path(data):  # your pairs: built as `neoembed contrastive --data.path` builds them
        test = test or str(data)
        built = your_pairs_dir(data, bench.columns, bench.out / "data")
        build_your_pairs(data, bench.columns, built)
        data = built
    tests = [your_task(test, bench.columns)] if test else []
    columns = {task.metadata.name: f"{task.metadata.name} nDCG@10" for task in tests} | COLUMNS
    # The recipe's own steps unless told otherwise ("as shipped"), and its training length; the baseline
    # gets the same.
    shipped = load_recipe(
        recipe, ContrastiveSettings, {**overrides, _field(lambda r: r.data.path): str(data)}
    )
    steps = None if bench.minutes else bench.steps or shipped.train.max_steps
    trial = Trial(
        bench, recipe, overrides, data, data_identity(data), steps, shipped.model.max_length, columns,
        tests[0].metadata.name if tests else None,
    )  # fmt: skip
    methods = ["neoembed", "st"] + (["neobert"] if bench.neobert else [])
    grid = product(bench.run_precisions(), range(bench.seeds), methods)
    arms = [trial.arm(method, precision, seed) for precision, seed, method in grid]
    base_row = f"{Path(bench.model).name} (base)"
    fixed = {
        base_row: bench.model,
        "BM25": "bm25",
        **({"NeoBERT (base)": bench.neobert} if bench.neobert else {}),
    }
    runs, seeded = train_and_score(
        arms, lambda arm, _: trial.train(arm), fixed, columns, 128, bench.out, extra_tasks=tests
    )
    return write_report(report(trial, runs, seeded, base_row), bench.out)


def report(trial: Trial, runs: dict[Arm, Trained], seeded: SeedAverages, base_row: str):
    """Seed means per precision (and over all of them), their paired differences, every run, the targets."""
    bench, scores, precisions = trial.bench, seeded.scores, trial.bench.run_precisions()
    groups = {p: [arm for arm in runs if arm.precision == p] for p in precisions}
    if len(precisions) > 1:
        groups["all"] = list(runs)
    tables = Tables("contrastive", "group", seeded)
    for name, arms in groups.items():
        base = Row(
            {"group": name, "model": base_row},
            {c: f"{scores[base_row][t]:.4f}" for t, c in trial.columns.items()},
        )
        tables.add(group := Group({"group": name}, arms, base_row, METHODS, COMPARISONS), [base])
    # the last group: every run
    ours = [arm.label for arm in runs if arm.method == "neoembed"]
    versus_st = seeded.compare(group.labels("neoembed"), group.labels("st"))
    if trial.your_task is not None:
        versus_base = seeded.compare(group.labels("neoembed"), [base_row]).get(trial.your_task)
        checks = your_checks(
            scores, base_row, ours, trial.your_task, versus_base, versus_st.get(trial.your_task)
        )
    else:
        checks = goal_checks(scores, base_row, ours, versus_st.get(AVERAGE))
    fixed = ["BM25", base_row, *(["NeoBERT (base)"] if bench.neobert else [])]
    per_run = [table_row(label, scores, None, None, trial.columns) for label in fixed]
    per_run += [
        table_row(arm.label, scores, arm.from_base, trained, trial.columns) for arm, trained in runs.items()
    ]
    met = f"Recipe targets ({sum(c.met is True for c in checks)}/{len(checks)} met):"
    budget = f"{trial.steps} steps" if trial.steps else f"{bench.minutes:g} minutes of steps"
    lr = f"{st_baseline.LEARNING_RATE:.0e}".replace("e-0", "e-")  # 5e-5, as the committed tables write it
    notes = (
        f"Each model trained for {budget} on {bench.threads} CPU thread(s) on {trial.data}, seeds "
        f"0..{bench.seeds - 1} in {', '.join(precisions)}; neoembed: {trial.recipe.stem}; ST MNRL: "
        f"sentence-transformers' trainer and MultipleNegativesRankingLoss, lr {lr}, batch "
        f"{st_baseline.BATCH_SIZE}, {st_baseline.WARMUP:.0%} warmup, (query, positive) pairs only, same seed, "
        f"steps, precision and training length ({trial.max_length} tokens). Scores: mean over the runs "
        "(relative change vs the base) [lowest, highest run]."
    )
    return tables.report(
        notes,
        "each task's queries (all tasks' queries for the mean)",
        Table(per_run, ["model", *trial.columns.values(), "steps", "train minutes"], after=[met]),
        [check.line() for check in checks],
        mean=True,
        checks=checks,
        runs={arm.name: trained for arm, trained in runs.items()},
        data=str(trial.data),
        test=bench.test or (str(bench.data) if trial.your_task else None),
        recipe=str(trial.recipe),
        overrides=trial.overrides,
        steps=trial.steps,
        minutes=bench.minutes,
        seeds=bench.seeds,
        precisions=list(precisions),
        threads=bench.threads,
    )


def table_row(
    label: str, scores: Scores, from_base: str | None, trained: Trained | None, columns: dict[str, str]
) -> Row:
    """One model's scores in `columns` (task -> column); a fine-tuned model's cells also give the relative
    change vs its base."""

    def cell(task: str) -> str:
        score = scores[label].get(task)
        if score is None:
            return "n/a" if label == "BM25" and task == POS_TASK else "missing"
        reference = scores[from_base].get(task) if from_base else None
        return f"{score:.4f} ({score / reference - 1:+.1%})" if reference else f"{score:.4f}"

    figures = {column: cell(task) for task, column in columns.items()}
    if trained is None:
        return Row({"model": label}, {**figures, "steps": "", "train minutes": ""})
    return Row(
        {"model": label}, {**figures, "steps": trained.steps, "train minutes": f"{trained.train_minutes:.1f}"}
    )
