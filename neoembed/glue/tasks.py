"""The nine GLUE tasks: their columns in `nyu-mll/glue`, label names, dev splits and official metrics."""

from __future__ import annotations

from dataclasses import dataclass

from neoembed.errors import InputError


class GlueError(InputError):
    """Bad input to the GLUE harness (task, data, model or recipe); the message names what and where."""


@dataclass(frozen=True)
class GlueTask:
    name: str
    text_columns: tuple[str, ...]  # one sentence or a sentence pair, in the hub dataset's column names
    label_names: tuple[str, ...]  # class names in label-id order; empty for the regression task (STS-B)
    metrics: tuple[str, ...]  # the official dev metrics, averaged into the task score
    eval_splits: tuple[str, ...] = ("validation",)  # the first one drives early stopping

    @property
    def is_regression(self) -> bool:
        return not self.label_names

    @property
    def num_labels(self) -> int:
        return 1 if self.is_regression else len(self.label_names)


TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask("cola", ("sentence",), ("unacceptable", "acceptable"), ("matthews_correlation",)),
        GlueTask("sst2", ("sentence",), ("negative", "positive"), ("accuracy",)),
        GlueTask("mrpc", ("sentence1", "sentence2"), ("not_equivalent", "equivalent"), ("f1", "accuracy")),
        GlueTask("stsb", ("sentence1", "sentence2"), (), ("pearson", "spearman")),
        GlueTask("qqp", ("question1", "question2"), ("not_duplicate", "duplicate"), ("f1", "accuracy")),
        GlueTask(
            "mnli",
            ("premise", "hypothesis"),
            ("entailment", "neutral", "contradiction"),
            ("accuracy",),
            eval_splits=("validation_matched", "validation_mismatched"),
        ),
        GlueTask("qnli", ("question", "sentence"), ("entailment", "not_entailment"), ("accuracy",)),
        GlueTask("rte", ("sentence1", "sentence2"), ("entailment", "not_entailment"), ("accuracy",)),
        GlueTask("wnli", ("sentence1", "sentence2"), ("not_entailment", "entailment"), ("accuracy",)),
    )
}

# The tasks the paper averages (its GLUE table has no WNLI, as is usual since BERT).
PAPER_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")


def get_task(name: str) -> GlueTask:
    try:
        return TASKS[name.strip().lower()]
    except KeyError:
        raise GlueError(f"unknown GLUE task {name!r}; choose from {', '.join(TASKS)} or 'all'") from None


def select_tasks(names: list[str], default: list[str]) -> list[GlueTask]:
    """Resolve task names; 'all' (or no name) means `default`, the recipe's task list. Order is kept."""
    wanted = [n for n in names if n.strip()] or ["all"]
    expanded = [d for n in wanted for d in (default if n.strip().lower() == "all" else [n])]
    tasks = [get_task(n) for n in expanded]
    return list({t.name: t for t in tasks}.values())
