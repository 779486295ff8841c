"""Select the tasks of a run: by name, by benchmark, and/or by task type; unknown names suggest close ones.

Names resolve against neoembed's local WordNet tasks first, then mteb's task registry. The pseudo-benchmark
``neoembed-local`` is all local tasks; any other benchmark name is an mteb benchmark. ``--task-types`` alone
filters the default benchmark, MTEB(eng, v2), the current English leaderboard (MTEB(eng, v1) is the one the
NeoBERT paper reports, still selectable by name).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from neoembed.mteb_setup import all_tasks, mteb

from mteb import AbsTask
from mteb.abstasks.aggregated_task import AbsTaskAggregate
from mteb.abstasks.retrieval import AbsTaskRetrieval

from neoembed.data import ColumnMap
from neoembed.errors import InputError
from neoembed.evaluation.local_tasks import LOCAL_BENCHMARK_TASKS, LOCAL_TASKS, your_task

LOCAL_BENCHMARK = "neoembed-local"
DEFAULT_BENCHMARK = "MTEB(eng, v2)"


class TaskSelectionError(InputError):
    """An unknown task, task type or benchmark name; the message lists the closest valid names."""


def _closest(name: str, candidates: Sequence[str], what: str) -> TaskSelectionError:
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=5, cutoff=0.5)
    hint = f"closest: {', '.join(lowered[c] for c in close)}" if close else "no close match"
    return TaskSelectionError(f"unknown {what} {name!r} ({hint})")


def task_types() -> tuple[str, ...]:
    from mteb.abstasks.task_metadata import TaskType

    return get_args(TaskType)


def _task_names() -> list[str]:
    return [*LOCAL_TASKS, *(t.metadata.name for t in all_tasks())]


def get_task(name: str, columns: ColumnMap | None = None) -> AbsTask:
    """A local task or an mteb task by exact name (mteb's names are case-sensitive, as are ours), or your test
    set by its path (a BEIR folder or a pairs file, whose columns `columns` maps)."""
    if name in LOCAL_TASKS:
        return LOCAL_TASKS[name]()
    if Path(name).exists():
        return your_task(name, columns)
    try:
        return mteb.get_task(name)
    except KeyError:
        raise _closest(name, _task_names(), "task") from None


def get_benchmark_tasks(name: str) -> list[AbsTask]:
    if name == LOCAL_BENCHMARK:
        return [cls() for cls in LOCAL_BENCHMARK_TASKS]
    try:
        return list(mteb.get_benchmark(name).tasks)
    except KeyError:
        names = [LOCAL_BENCHMARK, *(b.name for b in mteb.get_benchmarks())]
        raise _closest(name, names, "benchmark") from None


def select_tasks(
    tasks: Sequence[str] = (),
    benchmark: str | None = None,
    types: Sequence[str] = (),
    columns: ColumnMap | None = None,
) -> list[AbsTask]:
    """Tasks named in `tasks` (a path: your test set, `columns` mapping a pairs file's columns) plus those of
    `benchmark`, kept if their type is in `types` (when given)."""
    valid_types = task_types()
    for task_type in types:
        if task_type not in valid_types:
            raise _closest(task_type, valid_types, "task type")
    if not tasks and not benchmark:
        if not types:
            raise TaskSelectionError("no tasks selected: give --tasks, --benchmark or --task-types")
        benchmark = DEFAULT_BENCHMARK
    selected = [get_task(name, columns) for name in dict.fromkeys(tasks)]
    if benchmark:
        named = {t.metadata.name for t in selected}
        selected += [t for t in get_benchmark_tasks(benchmark) if t.metadata.name not in named]
    if types:
        selected = [t for t in selected if t.metadata.type in types]
        if not selected:
            raise TaskSelectionError(f"no selected task has a type in {', '.join(types)}")
    return selected


def supports_lexical_search(task: AbsTask) -> bool:
    """Whether a search-only model such as bm25 can run `task` (retrieval and reranking tasks)."""
    if isinstance(task, AbsTaskAggregate):
        return all(supports_lexical_search(sub) for sub in task.metadata.tasks)
    return isinstance(task, AbsTaskRetrieval)


def use_local_datasets(tasks: Sequence[AbsTask], datasets_dir: Path) -> list[str]:
    """Point mteb tasks at local copies of their hub datasets: ``datasets_dir/<org>/<name>`` (a clone or
    download of the dataset repository, e.g. ``mteb/sts12-sts``). Returns the names of redirected tasks.

    The copy is taken to be the revision the task pins; results keep that revision.
    """
    redirected = []
    for task in leaf_tasks(tasks):
        local = datasets_dir / task.metadata.dataset["path"]
        if task.metadata.name in LOCAL_TASKS or not local.is_dir():
            continue
        # A per-instance copy: task classes share one metadata object.
        task.metadata = task.metadata.model_copy(
            update={"dataset": {**task.metadata.dataset, "path": str(local)}}
        )
        redirected.append(task.metadata.name)
    return redirected


def leaf_tasks(tasks: Sequence[AbsTask]) -> list[AbsTask]:
    """The tasks that load data and produce result files: aggregates replaced by their subtasks."""
    leaves = []
    for task in tasks:
        leaves += list(task.metadata.tasks) if isinstance(task, AbsTaskAggregate) else [task]
    return leaves
