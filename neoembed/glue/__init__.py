"""GLUE fine-tuning harness: the paper's protocol (grid, early stopping, MNLI transfer) over the nine tasks.

`run_glue` fine-tunes and scores; `write_report` writes the table. The CLI verb is `neoembed glue`.
"""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .report import (
        glue_average as glue_average,
        to_markdown as to_markdown,
        write_report as write_report,
    )
    from .runner import (
        TaskResult as TaskResult,
        run_glue as run_glue,
    )
    from .settings import (
        GlueSettings as GlueSettings,
        Hyperparameters as Hyperparameters,
        load_settings as load_settings,
    )
    from .tasks import (
        TASKS as TASKS,
        GlueError as GlueError,
        GlueTask as GlueTask,
        get_task as get_task,
        select_tasks as select_tasks,
    )

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
