"""Training curves from a run's metrics.jsonl: loss, learning rate, gradient norm and the held-out metrics.

`MetricsLog` draws `curves.png` beside the log when training ends; `plot_runs` draws several runs on one
figure (`neoembed runs compare A B`). matplotlib draws; this module only picks the series from the log.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from neoembed.errors import InputError
from neoembed.run_files import METRICS_FILE, atomic_write

CURVES_FILE = "curves.png"

# Panels in the order drawn: a title, and how a log key belongs to it.
TRAINING_PANELS = {"loss": "training loss", "learning_rate": "learning rate", "grad_norm": "gradient norm"}
HELD_OUT_LOSS = "held-out loss"
HELD_OUT_SCORE = "held-out score"
LINE_STYLES = ["-", "--", ":", "-."] * 8  # a run's metrics in one panel, when runs are told apart by colour
# The Trainer's bookkeeping of an evaluation, not a metric of the model.
_EVAL_BOOKKEEPING = ("_runtime", "_per_second", "_epoch")


@dataclass
class RunCurves:
    """One run's series, by panel title then metric name: [(step, value), ...]."""

    name: str
    panels: dict[str, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)

    def add(self, panel: str, metric: str, step: int, value: float) -> None:
        self.panels.setdefault(panel, {}).setdefault(metric, []).append((step, value))


def read_curves(run: Path, name: str | None = None) -> RunCurves:
    """The curves of the run whose metrics.jsonl is `run` or is in the directory `run` (`InputError` when
    there is none). The held-out score is the headline metric: each set's nDCG@10 (contrastive), GLUE's
    task score, or every other metric the evaluations logged."""
    path = Path(run) / METRICS_FILE if Path(run).is_dir() else Path(run)
    if not path.is_file():
        raise InputError(
            f"{run}: no {METRICS_FILE} here; give a training run's output directory", param=str(run)
        )
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    curves = RunCurves(name or path.parent.name)
    scores = _headline_metrics({key for record in records for key in record})
    for record in records:
        step = record.get("step")
        for key, value in record.items():
            if step is None or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            if key in TRAINING_PANELS:
                curves.add(TRAINING_PANELS[key], key, step, value)
            elif key == "eval_loss":
                curves.add(HELD_OUT_LOSS, key, step, value)
            elif key in scores:
                curves.add(HELD_OUT_SCORE, key.removeprefix("eval_"), step, value)
    return curves


def _headline_metrics(keys: set[str]) -> set[str]:
    metrics = {
        k for k in keys if k.startswith("eval_") and k != "eval_loss" and not k.endswith(_EVAL_BOOKKEEPING)
    }
    ndcg = {k for k in metrics if k.endswith("_cosine_ndcg@10") and "_dim" not in k}
    if ndcg:
        return ndcg
    return {"eval_score"} if "eval_score" in metrics else metrics


def plot_runs(runs: list[RunCurves], out: Path) -> Path:
    """One panel per series kind, each run's metrics drawn in it, written to `out` (PNG, atomically)."""
    from matplotlib.figure import Figure  # a figure without pyplot: no GUI backend, no global state
    from matplotlib.ticker import MaxNLocator

    order = [*TRAINING_PANELS.values(), HELD_OUT_LOSS, HELD_OUT_SCORE]
    titles = [title for title in order if any(title in run.panels for run in runs)]
    if not titles:
        raise InputError(
            f"nothing to plot: {', '.join(run.name for run in runs)} logged no training step yet"
        )
    columns = min(len(titles), 3)
    rows = math.ceil(len(titles) / columns)
    figure = Figure(figsize=(5 * columns, 3.4 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, title in zip(axes, titles):
        for color, run in enumerate(runs):
            series = run.panels.get(title, {})
            for style, (metric, points) in zip(LINE_STYLES, series.items()):
                steps, values = zip(*points)
                # Name what tells the lines apart: the metric, the run, or both.
                label = (
                    metric if len(runs) == 1 else run.name if len(series) == 1 else f"{run.name}: {metric}"
                )
                ax.plot(
                    steps,
                    values,
                    color=f"C{color}" if len(runs) > 1 else None,
                    linestyle=style if len(runs) > 1 else "-",
                    marker="o" if len(points) < 20 else None,
                    markersize=3,
                    label=label,
                )
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if title == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        if len(runs) > 1 or title == HELD_OUT_SCORE:
            ax.legend(fontsize="small")
    for ax in axes[len(titles) :]:
        ax.set_visible(False)
    figure.suptitle(" vs ".join(run.name for run in runs))
    out = Path(out)
    with atomic_write(out, suffix=".png") as tmp:
        figure.savefig(tmp, dpi=110)
    return out


def write_curves(run_dir: Path) -> Path | None:
    """`curves.png` in `run_dir` from its metrics.jsonl; None when it logged nothing to draw yet."""
    curves = read_curves(run_dir)
    if not curves.panels:
        return None
    return plot_runs([curves], Path(run_dir) / CURVES_FILE)
