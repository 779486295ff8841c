"""Several seeds of one method as one model, for the benches that train arms (contrastive, adapt): each
method's seed mean with its spread, and methods compared on their seed-averaged per-query scores
(`significance.mean_of`) by a paired bootstrap over the queries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neoembed.evaluation import Difference, RowInput

Scores = dict[str, dict[str, float | None]]  # model label -> task -> main score in [0, 1]
AVERAGE = "Average"  # the row `compare_pair` adds: the mean over the tasks


class SeedAverages:
    """The evaluated runs of a bench, by row label: their scores, and per-query inputs for the bootstrap.
    `columns` maps each task to its column in the tables."""

    def __init__(
        self, scores: Scores, inputs: dict[str, dict[str, RowInput]], columns: dict[str, str]
    ) -> None:
        self.scores, self.inputs, self.columns = scores, inputs, columns
        self._compared: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, Difference]] = {}

    @classmethod
    def evaluate(
        cls, models: dict[str, str], columns: dict[str, str], max_length: int, out: Path
    ) -> SeedAverages:
        """Every model of `models` (row label -> what `mteb-eval --model` loads; the first is the one the
        harness's paired differences are against) scored in one mteb run under `out` on the local tasks that
        `columns` names."""
        from neoembed.evaluation import (
            LOCAL_TASKS,
            EvalSettings,
            resolve_models,
            run_evaluation,
            saved_row_inputs,
        )

        settings = EvalSettings(max_length=max_length)
        specs = dict(zip(models, resolve_models(list(models.values()), settings)))
        tasks = [LOCAL_TASKS[task]() for task in columns]
        summary = run_evaluation(list(specs.values()), tasks, settings, out).summary
        saved = saved_row_inputs(list(specs.values()), summary, out)
        scores = {label: summary.scores[spec.label] for label, spec in specs.items()}
        return cls(scores, {label: saved[spec.label] for label, spec in specs.items()}, columns)

    def summary_cells(self, labels: list[str], reference: str | None) -> dict[str, str]:
        """Column -> the mean of the runs in `labels` (relative change vs `reference`'s score, where given)
        [lowest, highest run]; "missing" where a run has no score."""
        cells = {}
        for task, column in self.columns.items():
            values = [self.scores[label].get(task) for label in labels]
            if any(value is None for value in values):
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
                    task: tuple(
                        mean_of([self.inputs[label][task] for label in side]) for side in (ours, theirs)
                    )
                    for task in self.columns
                }
                found = compare_pair("+".join(ours), "+".join(theirs), rows)
            self._compared[key] = {difference.row: difference for difference in found}
        return self._compared[key]

    def difference_cells(self, ours: list[str], theirs: list[str]) -> dict[str, str]:
        """Column (and "mean", the average over the tasks) -> `difference_cell` of `compare(ours, theirs)`."""
        found = self.compare(ours, theirs)
        cells = {column: difference_cell(found.get(task)) for task, column in self.columns.items()}
        return cells | {"mean": difference_cell(found.get(AVERAGE))}


def difference_cell(d: Difference | None) -> str:
    """A paired difference in points (x 100) with its 95% interval, starred where it excludes 0."""
    if d is None:
        return "n/a"
    if d.low is None:
        return f"{100 * d.difference:+.2f}"
    star = "*" if d.low > 0 or d.high < 0 else ""
    return f"{100 * d.difference:+.2f} [{100 * d.low:+.2f}, {100 * d.high:+.2f}]{star}"
