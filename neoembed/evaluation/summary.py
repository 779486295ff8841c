"""Summaries of MTEB results: per task, per task type and overall, as markdown, CSV and a bar chart.

Every selected task counts, including the two the NeoBERT release's averaging dropped: MSMARCO, scored on its
``dev`` split (its only evaluation split), and CQADupstack, one row whose score is the mean of its twelve
subset tasks (also when the subsets were selected one by one). A task's score is its main score averaged
over the task's evaluation splits and selected subsets; type and overall averages are plain means over task
rows. A model missing some rows (failed, or not applicable such as bm25 on STS) is averaged over what it
has, and the count is shown next to the number so incomplete averages are never mistaken for full ones.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from neoembed.mteb_setup import mteb

import numpy as np
from mteb import AbsTask, TaskResult
from mteb.abstasks.aggregated_task import AbsTaskAggregate

from neoembed.evaluation.significance import CONFIDENCE, Difference

# Aggregates whose subset tasks are grouped into one row even when selected without the aggregate.
GROUPED_AGGREGATES = ("CQADupstackRetrieval",)


@dataclass(frozen=True)
class Row:
    """One summary row: a task, or an aggregate averaging its `parts`."""

    name: str
    type: str
    parts: tuple[AbsTask, ...]


def summary_rows(tasks: Sequence[AbsTask]) -> list[Row]:
    parent_of = {
        sub.metadata.name: name for name in GROUPED_AGGREGATES for sub in mteb.get_task(name).metadata.tasks
    }
    rows: list[Row] = []
    grouped: dict[str, list[AbsTask]] = defaultdict(list)
    for task in tasks:
        name = task.metadata.name
        if isinstance(task, AbsTaskAggregate):
            rows.append(Row(name, task.metadata.type, tuple(task.metadata.tasks)))
        elif name in parent_of:
            if not grouped[parent_of[name]]:  # the row sits where its first subset was selected
                rows.append(Row(parent_of[name], task.metadata.type, ()))
            grouped[parent_of[name]].append(task)
        else:
            rows.append(Row(name, task.metadata.type, (task,)))
    return [Row(r.name, r.type, tuple(grouped[r.name])) if r.name in grouped else r for r in rows]


def task_score(result: TaskResult, task: AbsTask) -> float | None:
    """Main score averaged over the task's eval splits and subsets; None when any of them is missing."""
    values = []
    for split in task.eval_splits:
        by_subset = {s["hf_subset"]: s["main_score"] for s in result.scores.get(split, [])}
        if any(subset not in by_subset for subset in task.hf_subsets):
            return None
        values += [by_subset[subset] for subset in task.hf_subsets]
    return float(np.mean(values)) if values else None


@dataclass(frozen=True)
class Average:
    score: float | None
    n_scored: int
    n_rows: int

    @property
    def complete(self) -> bool:
        return self.n_scored == self.n_rows


def _average(values: Sequence[float | None]) -> Average:
    scored = [v for v in values if v is not None]
    return Average(float(np.mean(scored)) if scored else None, len(scored), len(values))


@dataclass
class Summary:
    models: list[str]
    rows: list[Row]
    scores: dict[str, dict[str, float | None]]  # model -> row name -> score in [0, 1]
    not_applicable: dict[str, set[str]] = field(default_factory=dict)  # model -> row names
    differences: list[Difference] = field(default_factory=list)  # paired: model against its baseline

    def compared_pairs(self) -> list[tuple[str, str]]:
        """(model, baseline) of each comparison, in the order compared."""
        return list(dict.fromkeys((d.model, d.baseline) for d in self.differences))

    def baselines(self) -> list[str]:
        return list(dict.fromkeys(baseline for _, baseline in self.compared_pairs()))

    def difference(self, pair: tuple[str, str], row: str) -> Difference | None:
        return next((d for d in self.differences if (d.model, d.baseline) == pair and d.row == row), None)

    def types(self) -> list[str]:
        return list(dict.fromkeys(r.type for r in self.rows))

    def type_average(self, model: str, task_type: str) -> Average:
        return _average([self.scores[model].get(r.name) for r in self.rows if r.type == task_type])

    def overall(self, model: str) -> Average:
        return _average([self.scores[model].get(r.name) for r in self.rows])


def summarize(
    results: Mapping[str, Mapping[str, TaskResult]],
    tasks: Sequence[AbsTask],
    not_applicable: Mapping[str, set[str]] | None = None,
) -> Summary:
    """`results[model][task name]` (leaf tasks) -> a Summary over the rows of `tasks`."""
    rows = summary_rows(tasks)
    scores: dict[str, dict[str, float | None]] = {}
    for model, by_task in results.items():
        scores[model] = {}
        for row in rows:
            parts = [
                task_score(by_task[t.metadata.name], t) if t.metadata.name in by_task else None
                for t in row.parts
            ]
            scored = [p for p in parts if p is not None]
            scores[model][row.name] = float(np.mean(scored)) if parts and len(scored) == len(parts) else None
    na = {m: set(not_applicable.get(m, ())) if not_applicable else set() for m in results}
    return Summary(list(results), rows, scores, na)


def _cell(summary: Summary, model: str, row: Row) -> str:
    score = summary.scores[model].get(row.name)
    if score is not None:
        return f"{100 * score:.2f}"
    return "n/a" if row.name in summary.not_applicable.get(model, ()) else "-"


def _average_cell(average: Average) -> str:
    if average.score is None:
        return "-"
    text = f"{100 * average.score:.2f}"
    return text if average.complete else f"{text} ({average.n_scored}/{average.n_rows})"


def table(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the comparison table: tasks, then type averages, then the overall average."""
    header = ["Task", "Type", *summary.models]
    rows = []
    for row in summary.rows:
        name = row.name if len(row.parts) <= 1 else f"{row.name} (mean of {len(row.parts)} subsets)"
        rows.append([name, row.type, *(_cell(summary, m, row) for m in summary.models)])
    for task_type in summary.types():
        n = sum(r.type == task_type for r in summary.rows)
        averages = [_average_cell(summary.type_average(m, task_type)) for m in summary.models]
        rows.append([f"{task_type} (mean of {n})", "", *averages])
    averages = [_average_cell(summary.overall(m)) for m in summary.models]
    rows.append([f"Average (all {len(summary.rows)} tasks)", "", *averages])
    return header, rows


NOTES = (
    "Scores are main scores x 100. `(k/n)`: mean over the k of n tasks the model has scores for. "
    "`n/a`: the model cannot run the task (bm25 runs retrieval tasks only); `-`: failed or not run."
)


def _difference_cell(d: Difference | None) -> str:
    if d is None:
        return "-"
    text = f"{100 * d.difference:+.2f}"
    if d.p_value is None or d.low is None or d.high is None:
        return f"{text} (no interval)"
    mark = " *" if d.significant else ""
    return f"{text} [{100 * d.low:+.2f}, {100 * d.high:+.2f}] p={d.p_value:.3f}{mark}"


def differences_table(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the paired comparison: per task and for the average, each model minus its baseline."""
    pairs = summary.compared_pairs()
    header = ["Task", *(f"{model} - {baseline}" for model, baseline in pairs)]
    names = [r.name for r in summary.rows] + ["Average"]
    rows = [[name, *(_difference_cell(summary.difference(pair, name)) for pair in pairs)] for name in names]
    return header, rows


def _differences_heading(summary: Summary) -> str:
    baselines = summary.baselines()
    if len(baselines) == 1:
        return f"Paired differences against {baselines[0]}:"
    return "Paired differences, each model against its baseline:"


def _differences_notes(summary: Summary) -> str:
    methods = {d.method for d in summary.differences if d.row == "Average"}
    average = (
        "the average resamples every task's examples"
        if methods == {"examples"}
        else "the average resamples tasks where some task has no per-example predictions"
    )
    return (
        f"Differences of main scores x 100 with a {CONFIDENCE:.0%} paired-bootstrap interval over each task's "
        f"queries or examples and a two-sided p-value; `*`: p < {1 - CONFIDENCE:.2f}; {average}. "
        "`(no interval)`: the task type or a cached result has no per-example predictions. Both models are "
        "averaged over the tasks both have scores for."
    )


def to_markdown(summary: Summary) -> str:
    header, rows = table(summary)
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * len(summary.models)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(lines) + "\n\n" + NOTES + "\n"
    if summary.differences:
        header, rows = differences_table(summary)
        lines = [_differences_heading(summary), ""]
        lines += ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        text += "\n" + "\n".join(lines) + "\n\n" + _differences_notes(summary) + "\n"
    return text


def write_differences_csv(summary: Summary, path: Path) -> None:
    """One line per compared model and row: difference, interval and p-value (x 100 except p)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["model", "baseline", "name", "difference", "low", "high", "p_value", "method", "n"])

        def fmt(value: float | None, scale: float = 100) -> str:
            return "" if value is None else f"{scale * value:.4f}"

        for d in summary.differences:
            row = [fmt(d.difference), fmt(d.low), fmt(d.high), fmt(d.p_value, 1)]
            writer.writerow([d.model, d.baseline, d.row, *row, d.method, d.n])


def write_csv(summary: Summary, path: Path) -> None:
    """Long format: one line per model and task, type average, and overall average (scores x 100)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["model", "scope", "name", "type", "score", "n_scored", "n_tasks"])

        def fmt(score: float | None) -> str:
            return "" if score is None else f"{100 * score:.4f}"

        for model in summary.models:
            for row in summary.rows:
                score = summary.scores[model].get(row.name)
                writer.writerow([model, "task", row.name, row.type, fmt(score), int(score is not None), 1])
            for task_type in summary.types():
                avg = summary.type_average(model, task_type)
                writer.writerow(
                    [model, "type", task_type, task_type, fmt(avg.score), avg.n_scored, avg.n_rows]
                )
            avg = summary.overall(model)
            writer.writerow([model, "overall", "Average", "", fmt(avg.score), avg.n_scored, avg.n_rows])


def plot_summary(summary: Summary, path: Path) -> None:
    """Per-type averages as grouped bars and, when models were compared, the paired differences with their
    confidence intervals per task and for the average."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [*summary.types(), "Average"]
    names = [r.name for r in summary.rows] + ["Average"]
    panels = 2 if summary.differences else 1
    width = max(6.0, 1.6 * len(groups))
    fig, axes = plt.subplots(1, panels, figsize=(width + 6.0 * (panels - 1), max(4.0, 0.45 * len(names))))
    axes = np.atleast_1d(axes)
    _plot_type_averages(summary, axes[0], groups)
    if summary.differences:
        _plot_differences(summary, axes[1], names)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_differences(summary: Summary, ax, names: list[str]) -> None:
    pairs = summary.compared_pairs()
    step = 0.8 / len(pairs)
    for i, pair in enumerate(pairs):
        ys: list[float] = []
        xs: list[float] = []
        errors: list[list[float]] = [[], []]
        for j, name in enumerate(names):
            d = summary.difference(pair, name)
            if d is None:
                continue
            ys.append(j + (i - (len(pairs) - 1) / 2) * step)
            xs.append(100 * d.difference)
            errors[0].append(100 * (d.difference - d.low) if d.low is not None else 0.0)
            errors[1].append(100 * (d.high - d.difference) if d.high is not None else 0.0)
        ax.errorbar(xs, ys, xerr=errors, fmt="o", capsize=3, label=" - ".join(pair))
    ax.axvline(0.0, color="grey", linewidth=0.8)
    ax.set_yticks(range(len(names)), names, fontsize="small")
    ax.invert_yaxis()
    baselines = summary.baselines()
    against = f"vs {baselines[0]}" if len(baselines) == 1 else "model - baseline"
    ax.set_xlabel(f"difference x 100, {against} ({CONFIDENCE:.0%} interval)")
    ax.set_title("Paired differences")
    ax.legend(fontsize="small")


def _plot_type_averages(summary: Summary, ax, groups: list[str]) -> None:
    width = 0.8 / len(summary.models)
    for i, model in enumerate(summary.models):
        averages = [summary.type_average(model, t) for t in summary.types()] + [summary.overall(model)]
        heights = [100 * a.score if a.score is not None else 0.0 for a in averages]
        xs = [g + (i - (len(summary.models) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, heights, width, label=model)
    ax.set_xticks(range(len(groups)), groups, rotation=15)
    ax.set_ylabel("mean main score x 100")
    ax.set_title("MTEB: per-type averages")
    ax.legend(fontsize="small")


def write_summary(summary: Summary, out_dir: Path) -> list[Path]:
    """summary.md, summary.csv and, when several models are compared, summary.png (and the paired
    differences in differences.csv when they were computed) under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "summary.md", out_dir / "summary.csv"]
    written[0].write_text(to_markdown(summary), encoding="utf-8")
    write_csv(summary, written[1])
    if len(summary.models) > 1:
        written.append(out_dir / "summary.png")
        plot_summary(summary, written[-1])
    if summary.differences:
        written.append(out_dir / "differences.csv")
        write_differences_csv(summary, written[-1])
    return written
