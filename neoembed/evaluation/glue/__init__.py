"""GLUE fine-tuning harness: the paper's protocol (grid, early stopping, MNLI transfer) over the nine tasks.

`run_glue` fine-tunes and scores; `write_report` writes the table. The CLI verb is `neoembed glue`.
"""

from neoembed.evaluation.glue.report import glue_average, to_markdown, write_report
from neoembed.evaluation.glue.runner import TaskResult, run_glue
from neoembed.evaluation.glue.settings import GlueSettings, Hyperparameters, load_settings
from neoembed.evaluation.glue.tasks import TASKS, GlueError, GlueTask, get_task, select_tasks

__all__ = [
    "TASKS",
    "GlueError",
    "GlueSettings",
    "GlueTask",
    "Hyperparameters",
    "TaskResult",
    "get_task",
    "glue_average",
    "load_settings",
    "run_glue",
    "select_tasks",
    "to_markdown",
    "write_report",
]
