"""Load a GLUE task through `datasets`: the hub's `nyu-mll/glue`, or local files in the same columns.

Local layout: `DIR/<task>/` (or `DIR/` itself) holding `train.<ext>` and each dev split
(`validation.<ext>`; MNLI: `validation_matched.<ext>` and `validation_mismatched.<ext>`), where ext is
csv, tsv, jsonl, json or parquet. Labels are class ids (as on the hub) or class names ("entailment");
STS-B labels are scores. Every split is checked against the task before any training starts.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from neoembed.glue.tasks import GlueError, GlueTask

HUB_ID = "nyu-mll/glue"
LABEL = "label"
_READERS = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t", "quoting": csv.QUOTE_NONE}),  # GLUE's tsvs have bare quotes
    ".jsonl": ("json", {}),
    ".json": ("json", {}),
    ".parquet": ("parquet", {}),
}


def _splits(task: GlueTask) -> tuple[str, ...]:
    return ("train", *task.eval_splits)


def task_files(task: GlueTask, data_dir: Path) -> dict[str, Path]:
    """The local file of each split the task needs."""
    root = data_dir / task.name if (data_dir / task.name).is_dir() else data_dir
    if not root.is_dir():
        raise GlueError(f"data directory {root} does not exist")
    files = {}
    for split in _splits(task):
        found = [p for p in sorted(root.glob(f"{split}.*")) if p.suffix in _READERS]
        if len(found) != 1:
            problem = "no file" if not found else f"several files ({', '.join(p.name for p in found)})"
            raise GlueError(
                f"{root}: {problem} for split {split!r} of task {task.name}; expected one "
                f"{split}.{{csv,tsv,jsonl,json,parquet}} with columns {', '.join(task.text_columns)}, {LABEL}"
            )
        files[split] = found[0]
    return files


def _read_file(task: GlueTask, path: Path):
    from datasets import load_dataset

    builder, options = _READERS[path.suffix]
    if builder == "csv":
        # Text columns stay strings ("1990", "NA" are sentences); the label column is checked below.
        options = {**options, "converters": {c: str for c in task.text_columns}, "keep_default_na": False}
    try:
        return load_dataset(builder, data_files=str(path), split="train", **options)
    except Exception as err:  # datasets/pandas/arrow raise many types; the file is what the user must fix
        raise GlueError(f"{path}: cannot read as {builder}: {type(err).__name__}: {err}") from None


def _read_hub(task: GlueTask, split: str):
    from datasets import load_dataset

    try:
        return load_dataset(HUB_ID, task.name, split=split)
    except Exception as err:  # offline, missing config, ...: say what to do instead
        raise GlueError(
            f"cannot load {HUB_ID} ({task.name}, {split}) from the hub: {type(err).__name__}: {err}\n"
            "Offline? Pass --data-dir with local files in GLUE's columns."
        ) from None


def _class_id(task: GlueTask, value) -> int | None:
    """The class id a label cell stands for, or None when it is not one of the task's classes."""
    if isinstance(value, str):
        value = value.strip()
        if value in task.label_names:
            return task.label_names.index(value)
        if not value.lstrip("-").isdigit():
            return None
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < task.num_labels:
        return value
    return None


def _score(value) -> float | None:
    try:
        score = float(value)
    except (TypeError, ValueError):
        return None
    return score if math.isfinite(score) else None


def conform(dataset, task: GlueTask, where: str):
    """Check a split against the task and return it with only the text columns and a typed label.

    Errors name the file (`where`), the column and the first bad row (1-based, header not counted).
    """
    from datasets import Value

    needed = [*task.text_columns, LABEL]
    missing = [c for c in needed if c not in dataset.column_names]
    if missing:
        raise GlueError(
            f"{where}: task {task.name} needs columns {', '.join(needed)}; missing {', '.join(missing)} "
            f"(found {', '.join(dataset.column_names)})"
        )
    for column in task.text_columns:
        for row, text in enumerate(dataset[column], start=1):
            if not isinstance(text, str):
                raise GlueError(f"{where}: row {row}: column {column!r} is {text!r}, not text")
    if task.is_regression:
        expected = "a number (STS-B similarity score, 0 to 5)"
    else:
        names = ", ".join(f"{i}={n}" for i, n in enumerate(task.label_names))
        expected = f"a class id or name of task {task.name} ({names})"
    labels = []
    for row, value in enumerate(dataset[LABEL], start=1):
        parsed = _score(value) if task.is_regression else _class_id(task, value)
        if parsed is None:
            raise GlueError(f"{where}: row {row}: label {value!r} is not {expected}")
        labels.append(parsed)
    dtype = "float32" if task.is_regression else "int64"
    dataset = dataset.select_columns(list(task.text_columns)).add_column(LABEL, labels)
    return dataset.cast_column(LABEL, Value(dtype))


def load_task_data(
    task: GlueTask,
    data_dir: Path | None = None,
    *,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    seed: int = 0,
):
    """A DatasetDict with `train` and the task's dev splits, checked; optionally a seeded subsample."""
    from datasets import DatasetDict

    if data_dir is None:
        sources = {
            split: (_read_hub(task, split), f"{HUB_ID}/{task.name}/{split}") for split in _splits(task)
        }
    else:
        sources = {split: (_read_file(task, p), str(p)) for split, p in task_files(task, data_dir).items()}
    splits = {}
    for split, (dataset, where) in sources.items():
        dataset = conform(dataset, task, where)
        limit = max_train_samples if split == "train" else max_eval_samples
        if limit is not None and limit < len(dataset):
            dataset = dataset.shuffle(seed=seed).select(range(limit))
        if len(dataset) == 0:
            raise GlueError(f"{where}: no rows")
        splits[split] = dataset
    return DatasetDict(splits)


def tokenize(data, task: GlueTask, tokenizer, max_length: int):
    """Tokenise single sentences or sentence pairs (truncated to `max_length`); padding is per batch."""

    def encode(batch):
        return tokenizer(*(batch[c] for c in task.text_columns), truncation=True, max_length=max_length)

    return data.map(
        encode, batched=True, remove_columns=list(task.text_columns), desc=f"tokenise {task.name}"
    )
