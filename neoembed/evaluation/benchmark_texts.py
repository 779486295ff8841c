"""The evaluation texts of mteb tasks, for the data build's leakage guard: `--eval-benchmark "MTEB(eng, v2)"` or
task names. The build receives them as plain data (`data.GuardedTexts`, a key set per task); collecting them
is evaluation's job, since it needs mteb's tasks.

Which texts of a task are guarded:
- retrieval and reranking tasks (mteb 2.x runs reranking as retrieval): the queries of the evaluation splits.
  Not the corpus: for MS MARCO, FEVER, NQ or HotpotQA it is the very corpus the training sources draw their
  positives from, so guarding it would delete those sources; and every test pair holds its query, so dropping
  the rows that carry a test query removes every test pair (QQP's copies of QuoraRetrieval's, StackExchange's
  of CQADupStack's or StackOverflowDupQuestions').
- every other task: each string, or list of strings, of its evaluation splits: STS and pair-classification
  sentences, classification and clustering texts (ids, languages and labels aside).

Tasks load through mteb (`task.load_data()`: the hub when reachable, datasets' cache otherwise). Each task's
text keys are cached once collected, `<cache root>/leakage/<task>-<revision>.npy`, so an interrupted
collection resumes with the tasks it has and a later build reads them without mteb loading anything.
"""

from __future__ import annotations

import re
import socket
import warnings
from contextlib import contextmanager
from typing import Literal

import numpy as np

from neoembed.cache import cache_root
from neoembed.data import KEY_VERSION, GuardedTexts, clean, text_key
from neoembed.errors import RunError
from neoembed.run_files import atomic_write

Missing = Literal["error", "skip"]
SKIPPED_COLUMNS = ("id", "lang")  # besides any column whose name holds "label"
HUB_HOST = "huggingface.co"


def resolve_tasks(spec: str) -> list:
    """The leaf tasks (aggregates such as CQADupStack as their subtasks) of a benchmark name, or of a comma list
    of task and benchmark names; names resolve as `mteb-eval` resolves them (neoembed's local tasks too)."""
    from neoembed.evaluation.tasks import TaskSelectionError, get_benchmark_tasks, get_task, leaf_tasks

    try:
        tasks = get_benchmark_tasks(spec.strip())  # a benchmark's name may hold a comma: "MTEB(eng, v2)"
    except TaskSelectionError:
        tasks = []
        # Commas inside parentheses belong to a benchmark's name: "MTEB(eng, v2),QuoraRetrieval" is two names.
        for name in (n.strip() for n in re.split(r",(?![^()]*\))", spec) if n.strip()):
            try:
                tasks.append(get_task(name))
            except TaskSelectionError as err:
                try:
                    tasks += get_benchmark_tasks(name)
                except TaskSelectionError:
                    raise err from None
    unique = {task.metadata.name: task for task in leaf_tasks(tasks)}
    return list(unique.values())


def benchmark_texts(spec: str | None, missing: Missing = "error") -> GuardedTexts | None:
    """Per task of `spec`, the keys of its evaluation texts, and the tasks skipped (name -> why) when
    `missing` is "skip" and their data cannot be loaded; with "error", the first such task stops the build.
    None for no `spec`."""
    if not spec:
        return None
    sets, skipped = {}, {}
    tasks = resolve_tasks(spec)
    with _offline_unless_hub_reachable():
        for task in tasks:
            name = task.metadata.name
            try:
                sets[name] = frozenset(task_keys(task).tolist())
            except Exception as err:  # noqa: BLE001 - any loader failure means the same: this task's data is absent
                reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
                if missing == "error":
                    raise RunError(
                        f"--eval-benchmark: cannot load the evaluation data of task {name} "
                        f"({task.metadata.dataset.get('path')}): {reason}. Make it reachable (the hub or datasets' "
                        "cache), or pass --eval-benchmark-missing skip to build without guarding it",
                        param="eval_benchmark",
                    ) from err
                warnings.warn(
                    f"--eval-benchmark: task {name} skipped, its data cannot be loaded: {reason}",
                    stacklevel=2,
                )
                skipped[name] = reason
    return GuardedTexts(sets, skipped)


@contextmanager
def _offline_unless_hub_reachable():
    """Offline mode for datasets and huggingface_hub while the hub cannot be reached: each load then reads
    datasets' cache or fails at once, instead of retrying for about 30 s per task."""
    import datasets.config
    from huggingface_hub import constants

    try:
        socket.create_connection((HUB_HOST, 443), timeout=3).close()
        reachable = True
    except OSError:
        reachable = False
    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    if not reachable:
        datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def task_keys(task) -> np.ndarray:
    """The sorted distinct text keys of `task`'s evaluation texts, from the cache or collected and cached."""
    revision = task.metadata.dataset.get("revision") or "none"
    path = cache_root() / "leakage" / f"{task.metadata.name}-{revision}-key{KEY_VERSION}.npy"
    if path.is_file():
        return np.load(path)
    task.load_data()
    keys = np.unique(np.fromiter((text_key(clean(t)) for t in task_texts(task)), dtype=np.int64))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as tmp, open(tmp, "wb") as file:
        np.save(file, keys)
    return keys


def task_texts(task):
    """The guarded texts of a loaded task (see the module's docstring), in any order, repeats included."""
    from neoembed.mteb_setup import mteb

    AbsTaskRetrieval = mteb.abstasks.retrieval.AbsTaskRetrieval

    for split in _eval_splits(task):
        if isinstance(task, AbsTaskRetrieval):
            yield from (q for q in split["queries"]["text"] if isinstance(q, str))
            continue
        for column, feature in split.features.items():
            if column in SKIPPED_COLUMNS or "label" in column.lower():
                continue
            if _holds_strings(feature):
                for value in split[column]:
                    yield from _strings(value)


def _eval_splits(task):
    """Each evaluation split of each of the task's subsets (mteb keeps a monolingual task's splits at the top
    level, a multilingual or retrieval task's under their subset)."""
    dataset = task.dataset
    for subset in task.hf_subsets:
        container = dataset.get(subset, dataset)
        for split in task.metadata.eval_splits:
            if split in container:
                yield container[split]


def _holds_strings(feature) -> bool:
    from datasets import LargeList, Sequence, Value

    while isinstance(feature, Sequence | LargeList | list):
        feature = feature[0] if isinstance(feature, list) else feature.feature
    return isinstance(feature, Value) and feature.dtype in ("string", "large_string")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
