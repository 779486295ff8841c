"""The seeded comparison behind `bench contrastive` and `bench adapt`, as `training.job` is for trainers: arms
(method x precision x seed, per corpus where there are several) trained or reused from a finished run, scored
in one mteb run, each method's seeds as one model with its spread (one run is an anecdote), and methods
compared by a paired bootstrap over the queries of their seed-averaged per-query scores
(`significance.mean_of`). A bench declares its arms, how each trains, its groups and its targets."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neoembed.bench.report import Report, Row, Table, met_text
from neoembed.bench.st_baseline import Trained
from neoembed.run_files import write_json

if TYPE_CHECKING:
    from neoembed.mteb_setup import mteb  # noqa: F401 - sets MTEB_CACHE before mteb loads

    from mteb import AbsTask

    from neoembed.evaluation import Difference, RowInput

EPSILON = 1e-9  # a score exactly at a bound meets it despite float rounding
Scores = dict[str, dict[str, float | None]]  # model label -> task -> main score in [0, 1]
AVERAGE = "Average"  # the row `compare_pair` adds: the mean over the tasks


@dataclass(frozen=True)
class Arm:
    """One training run: a method in one precision with one seed (on one corpus, where a bench has several);
    `label` is its row in the tables, `from_base` the row of the model it was fine-tuned from."""

    method: str
    precision: str
    seed: int
    label: str
    from_base: str
    corpus: str = ""

    @property
    def name(self) -> str:
        """Its run directory under the bench's output."""
        return "-".join(filter(None, (self.corpus, self.method, self.precision, f"seed{self.seed}")))


@dataclass(frozen=True)
class Check:
    """One target: met, missed, or not measured (`met` None)."""

    target: str
    met: bool | None
    figures: str

    def line(self) -> str:
        ending = "" if self.met is None else f": {met_text(self.met)}"
        return f"{self.target}: {self.figures}{ending}"


def relative(score: float | None, reference: float | None) -> float | None:
    return score / reference - 1 if score is not None and reference else None


def above_zero(difference: Difference | None) -> bool:
    """Whether a paired difference's interval lies above 0."""
    return difference is not None and difference.low is not None and difference.low > 0


def difference_cell(d: Difference | None) -> str:
    """A paired difference in points (x 100) with its 95% interval, starred where it excludes 0."""
    if d is None:
        return "n/a"
    if d.low is None or d.high is None:  # both None together: no interval
        return f"{100 * d.difference:+.2f}"
    star = "*" if d.low > 0 or d.high < 0 else ""
    return f"{100 * d.difference:+.2f} [{100 * d.low:+.2f}, {100 * d.high:+.2f}]{star}"


def train_and_score(
    arms: list[Arm],
    train: Callable[[Arm, dict[Arm, Trained]], Trained],
    fixed: dict[str, str],
    columns: dict[str, str],
    max_length: int,
    out: Path,
    extra_tasks: Sequence[AbsTask] = (),
) -> tuple[dict[Arm, Trained], SeedAverages]:
    """Each arm trained or reused in order (`train` sees the runs before it: a baseline may take its budget
    from them), then the `fixed` models (row label -> what mteb-eval loads; the first is the one the
    harness's paired differences are against) and every run scored in one mteb run under `out`/mteb, on the
    tasks that `columns` (task -> its column in the tables) names: `extra_tasks` (your test set) and the
    local tasks."""
    import neoembed.evaluation as evaluation

    runs: dict[Arm, Trained] = {}
    for arm in arms:
        runs[arm] = train(arm, runs)
    models = {**fixed, **{arm.label: trained.export for arm, trained in runs.items()}}
    settings = evaluation.EvalSettings(max_length=max_length)
    specs = dict(zip(models, evaluation.resolve_models(list(models.values()), settings)))
    extra = {task.metadata.name: task for task in extra_tasks}
    tasks = [extra[task] if task in extra else evaluation.LOCAL_TASKS[task]() for task in columns]
    summary = evaluation.run_evaluation(list(specs.values()), tasks, settings, out / "mteb").summary
    saved = evaluation.saved_row_inputs(list(specs.values()), summary, out / "mteb")
    scores = {label: summary.scores[spec.label] for label, spec in specs.items()}
    return runs, SeedAverages(scores, {label: saved[spec.label] for label, spec in specs.items()}, columns)


@dataclass
class SeedAverages:
    """The evaluated runs of a bench, by row label: their scores, and per-query inputs for the bootstrap."""

    scores: Scores
    inputs: dict[str, dict[str, RowInput]]
    columns: dict[str, str]  # task -> its column in the tables
    _compared: dict[tuple[tuple[str, ...], ...], dict[str, Difference]] = field(default_factory=dict)

    def summary_cells(self, labels: list[str], reference: str | None) -> dict[str, str]:
        """Column -> the mean of the runs in `labels` (relative change vs `reference`'s score, where given)
        [lowest, highest run]; "missing" where a run has no score."""
        cells = {}
        for task, column in self.columns.items():
            values = [value for label in labels if (value := self.scores[label].get(task)) is not None]
            if len(values) < len(labels):
                cells[column] = "missing"
                continue
            mean = sum(values) / len(values)
            base = self.scores[reference].get(task) if reference else None
            change = f" ({mean / base - 1:+.1%})" if base else ""
            cells[column] = f"{mean:.4f}{change} [{min(values):.4f}, {max(values):.4f}]"
        return cells

    def compare(self, ours: list[str], theirs: list[str]) -> dict[str, Difference]:
        """Task (and AVERAGE) -> the paired difference of the seed means, the runs in `ours` minus those in
        `theirs`; empty where either side has no run. Bootstrapped once per pair of sides."""
        from neoembed.evaluation import compare_pair, mean_of

        key = (tuple(ours), tuple(theirs))
        if key not in self._compared:
            found = []
            if ours and theirs:
                rows = {
                    task: (
                        mean_of([self.inputs[label][task] for label in ours]),
                        mean_of([self.inputs[label][task] for label in theirs]),
                    )
                    for task in self.columns
                }
                found = compare_pair("+".join(ours), "+".join(theirs), rows)
            self._compared[key] = {difference.row: difference for difference in found}
        return self._compared[key]


@dataclass(frozen=True)
class Group:
    """Runs reported together (a precision, a corpus in a precision): each method's seeds as one model.
    `cells` label its rows; `methods` maps each method to its name in the tables, in the report's order;
    `precision`, where given, is named in each row."""

    cells: dict[str, str]
    arms: list[Arm]
    base_row: str
    methods: dict[str, str]
    comparisons: tuple[tuple[str, str | None], ...]  # method minus other (None: the base model)
    precision: str | None = None

    def run_methods(self) -> list[str]:
        return [method for method in self.methods if any(arm.method == method for arm in self.arms)]

    def labels(self, method: str | None) -> list[str]:
        """The run labels of `method` (None: the base)."""
        return [arm.label for arm in self.arms if arm.method == method] if method else [self.base_row]

    def summary_rows(self, seeded: SeedAverages) -> list[Row]:
        """Each method's seed mean [lowest, highest], with its change vs the base where fine-tuned from it."""
        rows = []
        for method in self.run_methods():
            labels = self.labels(method)
            arm = next(arm for arm in self.arms if arm.method == method)
            reference = self.base_row if arm.from_base == self.base_row else None
            model = " ".join(filter(None, (self.methods[method], self.precision, f"x {len(labels)}")))
            rows.append(Row({**self.cells, "model": model}, seeded.summary_cells(labels, reference)))
        return rows

    def difference_rows(self, seeded: SeedAverages) -> list[Row]:
        """The paired difference of each comparison whose methods ran: column (and "mean", over the tasks)
        -> `difference_cell`."""
        run, rows = set(self.run_methods()), []
        for method, other in self.comparisons:
            if {method, other} - {None} <= run:
                comparison = f"{self.methods[method]} - {self.methods[other] if other else 'base'}"
                comparison += f" ({self.precision})" if self.precision else ""
                found = seeded.compare(self.labels(method), self.labels(other))
                cells = {column: difference_cell(found.get(task)) for task, column in seeded.columns.items()}
                cells["mean"] = difference_cell(found.get(AVERAGE))
                rows.append(Row({**self.cells, "comparison": comparison}, cells))
        return rows


@dataclass
class Tables:
    """The standard report of a seeded comparison: per group (labelled by `key`) the fixed models' rows and
    each method's seed means, their paired differences, then a table of every run and the targets."""

    name: str  # the bench's: `neoembed bench <name>`, <out>/<name>.json and .md
    key: str
    seeded: SeedAverages
    summary: list[Row] = field(default_factory=list)
    differences: list[Row] = field(default_factory=list)

    def add(self, group: Group, fixed: list[Row]) -> None:
        self.summary += [*fixed, *group.summary_rows(self.seeded)]
        self.differences += group.difference_rows(self.seeded)

    def report(
        self, notes: str, over: str, per_run: Table, verdicts: list[str], mean: bool, **payload: object
    ) -> Report:
        """`notes` under the seed means; `over`: what the bootstrap resamples; `mean`: whether the
        differences show the mean over the tasks; `payload`: the JSON's figures after the tables'."""
        columns = list(self.seeded.columns.values())
        paired = (
            "Paired differences in points (x 100) of the seed-averaged scores, with the 95% interval of a paired "
            f"bootstrap over {over}; * where the interval excludes 0."
        )
        differences = [self.key, "comparison", *columns, *(["mean"] if mean else [])]
        figures = {"rows": per_run.rows, "summary": self.summary, "differences": self.differences}
        return Report(
            name=self.name,
            title=f"neoembed bench {self.name}",
            tables=[
                Table(self.summary, [self.key, "model", *columns], after=[notes]),
                Table(self.differences, differences, after=[paired]),
                per_run,
            ],
            verdicts=verdicts,
            payload={**figures, "scores": self.seeded.scores, **payload},
        )


def reuse_or_train(
    run_dir: Path,
    identity: dict[str, Any],
    fresh: bool,
    train: Callable[[], Trained],
    kind: type[Trained] = Trained,
) -> Trained:
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


def recipe_identity(recipe: dict[str, Any]) -> dict[str, Any]:
    """What a neoembed arm trains (its recipe, dumped), not where it is written or its corpus file lies (the
    caller identifies the corpus by content): a bench directory renamed, or an arm linked in from another
    one, is reused."""
    located = {
        "train": {k: v for k, v in recipe["train"].items() if k != "output_dir"},
        "export": {k: v for k, v in recipe["export"].items() if k != "path"},
    }
    if "corpus" in recipe:  # an adapt recipe
        located["corpus"] = {k: v for k, v in recipe["corpus"].items() if k not in ("path", "eval_texts")}
    return {**recipe, **located}
