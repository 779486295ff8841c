"""What every neoembed trainer shares: the training vocabulary (`optim.*`, `train.*`), its one mapping to the
Trainer's arguments, the metrics log with its NaN stop, run directories that record their recipe, and
checkpoints that resume exactly. `pretrain`, `contrastive` and `evaluation.glue` build on it."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "settings": ["CompileSetting", "OptimSettings", "RunSettings", "TrainSettings", "TrainingPrecision"],
        "arguments": [
            "compile_for_training",
            "compile_wanted",
            "precision_arguments",
            "reporters",
            "trainer_arguments",
        ],
        "curves": ["CURVES_FILE", "RunCurves", "plot_runs", "read_curves", "write_curves"],
        "callbacks": ["MetricsLog", "TimeBudget", "TrainingDiverged"],
        "checkpoints": ["last_complete_checkpoint", "save_final", "train_or_restore"],
        "run_dir": [
            "RECIPE_RECORD",
            "RESUMABLE_CHANGES",
            "check_resume_compatible",
            "open_run",
            "recorded_recipe",
            "run_lock",
        ],
        "process": ["configure_process", "release_process_group"],
        "launch": ["Launch", "larger_batches", "more_accumulation", "plan_launch", "world_size"],
    },
)
