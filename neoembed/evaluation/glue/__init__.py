"""GLUE fine-tuning harness: the paper's protocol (grid, early stopping, MNLI transfer) over the nine tasks.

`run_glue` fine-tunes and scores; `write_report` writes the table. The CLI verb is `neoembed glue`.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "report": ["glue_average", "to_markdown", "write_report"],
        "runner": ["TaskResult", "run_glue"],
        "settings": ["GlueSettings", "Hyperparameters", "load_settings"],
        "tasks": ["TASKS", "GlueError", "GlueTask", "get_task", "select_tasks"],
    },
)
