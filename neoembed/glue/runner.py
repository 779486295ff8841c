"""Run the protocol over tasks and grid points: resumable, with MNLI transfer, best run kept per task.

Layout under the output directory:
  <task>/<grid point>/result.json   one finished run (its metrics.jsonl beside it)
  <task>/best_model/                the weights and tokenizer of the task's best run so far
  <task>/best.json                  the task's best run
  runs.jsonl                        one line per finished run
  glue.json, glue.md                the table (written by `report`)
A rerun skips grid points whose result.json exists, so an interrupted grid loses at most one run.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from neoembed.glue.data import load_task_data, tokenize
from neoembed.glue.model import load_glue_tokenizer
from neoembed.glue.settings import GlueSettings
from neoembed.glue.tasks import GlueError, GlueTask
from neoembed.glue.train import fine_tune
from neoembed.recipes import dump_recipe
from neoembed.run_files import append_jsonl, one_writer, write_json
from neoembed.training import configure_process

TRANSFER_SOURCE = "mnli"


@dataclass
class TaskResult:
    task: str
    score: float
    metrics: dict[str, dict[str, float]]
    hyperparameters: dict
    init_from: str
    runs: int  # grid points searched for this task
    best_step: int
    epochs: float


def order_tasks(tasks: list[GlueTask], settings: GlueSettings) -> list[GlueTask]:
    """MNLI first when tasks transfer from it; the rest in the order asked."""
    transfers = settings.transfer.enabled and any(t.name in settings.transfer.tasks for t in tasks)
    return sorted(tasks, key=lambda t: t.name != TRANSFER_SOURCE) if transfers else tasks


def _init_from(task: GlueTask, model: str, settings: GlueSettings, out_dir: Path, mnli: str | None) -> str:
    if not settings.transfer.enabled or task.name not in settings.transfer.tasks:
        return model
    source = mnli or out_dir / TRANSFER_SOURCE / "best_model"
    if mnli is None and not Path(source).is_dir():
        raise GlueError(
            f"task {task.name} starts from the best MNLI checkpoint, but {source} does not exist: "
            "run mnli first (add it to --task), pass --mnli-checkpoint DIR, or use --no-transfer"
        )
    return str(source)


def _check_loadable(checkpoint: str) -> None:
    """Fail before any training when --mnli-checkpoint is not a model (a typo would surface hours later)."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(checkpoint)
    except (OSError, ValueError) as err:
        raise GlueError(f"--mnli-checkpoint {checkpoint}: not a loadable model ({err})") from None


def _check_same_run(found: dict, expected: dict, path: Path) -> None:
    for key, value in expected.items():
        if found.get(key) != value:
            raise GlueError(
                f"{path} was produced with {key}={found.get(key)!r}, this run uses {value!r}; "
                "use another --output directory (or delete it) to re-run"
            )


def run_task(
    task: GlueTask,
    init: str,
    tokenizer,
    encoded,
    settings: GlueSettings,
    out_dir: Path,
    *,
    run_identity: dict,
    grid: bool = False,
    log: Callable[[str], None] = print,
) -> TaskResult:
    """Fine-tune `task` from `init` at every grid point (or the configured one); keep the best run's model.

    `encoded` is the task's tokenised DatasetDict; `run_identity` names the model, tokenizer and data asked
    for, recorded with every result so that results of another setup are never mixed in. The best model on
    disk (best_model/, best.json) is the best of every run in this directory, so the report always describes
    the saved model, even when a later invocation runs fewer grid points.
    """
    task_dir = out_dir / task.name
    identity = {**run_identity, "init_from": init, "protocol": settings.protocol()}
    points = settings.points(grid)
    done = {}
    for hp in points:
        path = task_dir / hp.slug / "result.json"
        if path.exists():
            done[hp] = json.loads(path.read_text(encoding="utf-8"))
            _check_same_run(done[hp], identity, path)
    best_path = task_dir / "best.json"
    best = json.loads(best_path.read_text(encoding="utf-8")) if best_path.exists() else None
    if best is not None:
        _check_same_run(best, identity, best_path)
    for i, hp in enumerate(points, start=1):
        step = f"{task.name} [{i}/{len(points)}] {hp.slug}"
        if hp in done:
            log(f"{step}: done before, score {done[hp]['score']:.4f}")
            continue
        log(f"{step}: fine-tuning from {init}")
        run_dir = task_dir / hp.slug
        shutil.rmtree(run_dir, ignore_errors=True)  # a run interrupted before its result.json
        # seeded before the model loads (run_job): the new head's weights are the same fresh or resumed
        run = fine_tune(init, tokenizer, task, encoded, hp, settings, run_dir)
        result = {**identity, "task": task.name, "hyperparameters": asdict(hp), **asdict(run)}
        if best is None or run.score > best["score"]:
            best = result
            shutil.rmtree(task_dir / "best_model", ignore_errors=True)
            os.replace(run_dir / "model", task_dir / "best_model")
            write_json(task_dir / "best.json", result)
        else:
            shutil.rmtree(run_dir / "model")
        write_json(run_dir / "result.json", result)
        append_jsonl(out_dir / "runs.jsonl", result)
        log(f"{step}: score {run.score:.4f} ({run.steps} steps, best at step {run.best_step})")
    assert best is not None, "settings.points gives at least one grid point"
    return TaskResult(
        task=task.name,
        score=best["score"],
        metrics=best["metrics"],
        hyperparameters=best["hyperparameters"],
        init_from=init,
        runs=len(points),
        best_step=best["best_step"],
        epochs=best["epochs"],
    )


def run_glue(
    model: str,
    tasks: list[GlueTask],
    settings: GlueSettings,
    out_dir: Path,
    *,
    grid: bool = False,
    data_dir: Path | None = None,
    tokenizer_name: str | None = None,
    mnli_checkpoint: str | None = None,
    log: Callable[[str], None] = print,
) -> list[TaskResult]:
    """Every task in turn, MNLI first when others transfer from it. The tokenizer, every task's data and
    the transfer source are checked before the first run trains, so bad input fails in seconds. One run
    writes `out_dir` at a time (its recipe.yaml included): a second stops at once, naming the first."""
    with one_writer(out_dir, "glue", param="--output"):
        return _run_glue(
            model, tasks, settings, out_dir, grid, data_dir, tokenizer_name, mnli_checkpoint, log
        )


def _run_glue(model, tasks, settings, out_dir, grid, data_dir, tokenizer_name, mnli_checkpoint, log):
    configure_process(settings.train)
    tasks = order_tasks(tasks, settings)
    tokenizer = load_glue_tokenizer(model, tokenizer_name)
    if mnli_checkpoint is not None:
        _check_loadable(mnli_checkpoint)
    if all(t.name != TRANSFER_SOURCE for t in tasks):
        for task in tasks:
            _init_from(task, model, settings, out_dir, mnli_checkpoint)
    encoded = {}
    for task in tasks:
        data = load_task_data(
            task,
            data_dir,
            max_train_samples=settings.max_train_samples,
            max_eval_samples=settings.max_eval_samples,
            seed=settings.train.seed,
        )
        encoded[task.name] = tokenize(data, task, tokenizer, settings.max_length)
    dump_recipe(settings, out_dir / "recipe.yaml")
    return [
        run_task(
            task,
            _init_from(task, model, settings, out_dir, mnli_checkpoint),
            tokenizer,
            encoded[task.name],
            settings,
            out_dir,
            run_identity={
                "model": model,
                "tokenizer": tokenizer_name or model,
                "data": str(data_dir) if data_dir else "nyu-mll/glue",
            },
            grid=grid,
            log=log,
        )
        for task in tasks
    ]
