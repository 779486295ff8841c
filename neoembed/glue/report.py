"""The GLUE table: each task's best dev metrics and chosen hyperparameters, and the GLUE average."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from neoembed.glue.runner import TaskResult

_SHORT = {
    "accuracy": "acc",
    "f1": "F1",
    "matthews_correlation": "MCC",
    "pearson": "Pearson",
    "spearman": "Spearman",
    "validation_matched": "m",
    "validation_mismatched": "mm",
}


def glue_average(results: list[TaskResult]) -> float:
    """Mean of the task scores (each the mean of its metrics, as GLUE's leaderboard does), in points."""
    return 100 * sum(r.score for r in results) / len(results)


def _metrics_cell(result: TaskResult) -> str:
    parts = []
    for split, metrics in result.metrics.items():
        prefix = f"{_SHORT.get(split, split)} " if len(result.metrics) > 1 else ""
        parts += [f"{prefix}{_SHORT[m]} {100 * v:.1f}" for m, v in metrics.items() if m != "score"]
    return " / ".join(parts)


def to_markdown(model: str, results: list[TaskResult]) -> str:
    lines = [
        f"GLUE dev results for `{model}` (best of each task's grid; scores x100)",
        "",
        "| task | metrics | score | batch | lr | wd | starts from | grid points | best step |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in results:
        hp = r.hyperparameters
        init = "MNLI checkpoint" if r.init_from != model else "model"
        lines.append(
            f"| {r.task} | {_metrics_cell(r)} | {100 * r.score:.1f} | {hp['batch_size']} | "
            f"{hp['learning_rate']:g} | {hp['weight_decay']:g} | {init} | {r.runs} | {r.best_step} |"
        )
    lines.append(f"| **average** ({len(results)} tasks) | | **{glue_average(results):.1f}** | | | | | | |")
    return "\n".join(lines) + "\n"


def write_report(model: str, results: list[TaskResult], out_dir: Path) -> tuple[Path, Path]:
    """glue.json and glue.md under `out_dir`."""
    data = {
        "model": model,
        "average": glue_average(results),
        "tasks": {r.task: asdict(r) for r in results},
    }
    json_path, md_path = out_dir / "glue.json", out_dir / "glue.md"
    json_path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    md_path.write_text(to_markdown(model, results), encoding="utf-8")
    return json_path, md_path
