"""What every neoembed trainer shares: the training vocabulary (`optim.*`, `train.*`), its one mapping to the
Trainer's arguments, the metrics log with its NaN stop, run directories that record their recipe, and
checkpoints that resume exactly. `pretrain`, `contrastive` and `glue` build on it."""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .arguments import (
        compile_for_training as compile_for_training,
        precision_arguments as precision_arguments,
        reporters as reporters,
        trainer_arguments as trainer_arguments,
    )
    from .callbacks import (
        MetricsLog as MetricsLog,
        TimeBudget as TimeBudget,
        TrainingDiverged as TrainingDiverged,
        logged_runtime as logged_runtime,
    )
    from .checkpoints import (
        complete_checkpoints as complete_checkpoints,
        last_complete_checkpoint as last_complete_checkpoint,
        save_final as save_final,
        train_or_restore as train_or_restore,
    )
    from .curves import (
        CURVES_FILE as CURVES_FILE,
        RunCurves as RunCurves,
        plot_runs as plot_runs,
        read_curves as read_curves,
        write_curves as write_curves,
    )
    from .job import (
        Job as Job,
        Prepared as Prepared,
        run_job as run_job,
    )
    from .launch import (
        Launch as Launch,
        larger_batches as larger_batches,
        more_accumulation as more_accumulation,
        plan_launch as plan_launch,
        world_size as world_size,
    )
    from .process import (
        configure_process as configure_process,
        release_process_group as release_process_group,
    )
    from .run_dir import (
        RECIPE_RECORD as RECIPE_RECORD,
        RESUMABLE_CHANGES as RESUMABLE_CHANGES,
        check_resume_compatible as check_resume_compatible,
        open_run as open_run,
        recorded_recipe as recorded_recipe,
        run_lock as run_lock,
    )
    from .settings import (
        OptimSettings as OptimSettings,
        RunSettings as RunSettings,
        TrainingPrecision as TrainingPrecision,
        TrainSettings as TrainSettings,
    )

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
