"""Paired significance of score differences between models evaluated on the same tasks.

mteb reports one main score per task; whether model B really beats model A on it depends on how the
difference varies over the task's own queries or examples. mteb, sentence-transformers and the NeoBERT
harness offer no such test, so it is written here, on top of mteb's saved predictions and mteb's own metric
functions (the score of any resample is computed exactly as mteb computes the full score):

- Retrieval and reranking (nDCG/MAP/recall/precision/hit-rate main scores): per-query scores from
  ``pytrec_eval`` through ``mteb``'s ``calculate_retrieval_scores``; the main score is their mean.
- Pair classification and STS: the task's own metric (e.g. max AP, cosine Spearman) recomputed on each
  resample of pairs (not a mean over pairs, so every resample is scored in full).
- Classification with accuracy as main score: per-example accuracy averaged over mteb's experiments.

For each task, a **paired bootstrap**: both models are scored on the same resampled examples; the percentile
interval of the difference is its confidence interval, and the two-sided p-value is the share of resampled
differences at least as far from the observed one as the observed one is from zero (the bootstrap
distribution shifted to the null). The average over tasks is resampled the same way, each task on its own
examples, when every task has per-example predictions; otherwise (other task types, or results cached
without predictions) by a **task-level bootstrap** over the per-task differences.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from neoembed.mteb_setup import mteb  # noqa: F401 - sets MTEB_CACHE before mteb loads

import numpy as np
from mteb import AbsTask
from mteb.abstasks import (
    AbsTaskClassification,
    AbsTaskMultilabelClassification,
    AbsTaskPairClassification,
    AbsTaskRetrieval,
    AbsTaskSTS,
)

N_RESAMPLES = 1000
CONFIDENCE = 0.95
SEED = 0
CHUNK = 50  # resamples drawn at once

# Scores a model on resamples of one split and subset: indices of shape (resamples, n) -> scores (resamples,).
ResampleScorer = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ExampleScores:
    """One split and subset of a task, scoreable on any resample of its `n` examples."""

    n: int
    score: ResampleScorer


@dataclass(frozen=True)
class Difference:
    """`model` minus `baseline` on one summary row (or the average), main scores in [0, 1]."""

    model: str
    baseline: str
    row: str
    difference: float
    low: float | None
    high: float | None
    p_value: float | None
    method: str  # "examples" | "tasks" | "scores" (no interval: no per-example predictions)
    n: int  # examples (summed over splits, subsets and subtasks) or tasks resampled

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < 1 - CONFIDENCE


# Retrieval main scores that are means of per-query pytrec_eval measures.
_PYTREC_PREFIXES = {
    "ndcg_at_": "ndcg_cut_",
    "map_at_": "map_cut_",
    "recall_at_": "recall_",
    "precision_at_": "P_",
}
_PYTREC_PREFIXES["hit_rate_at_"] = "success_"


def _split_data(task: AbsTask, subset: str, split: str):
    dataset = task.dataset
    assert dataset is not None  # the task's load_data ran
    return dataset[split] if subset not in dataset and subset == "default" else dataset[subset][split]


def _mean_scorer(values: np.ndarray) -> ExampleScores:
    return ExampleScores(len(values), lambda idx: values[idx].mean(axis=1))


def _full_scorer(n: int, score_one: Callable[[np.ndarray], float]) -> ExampleScores:
    return ExampleScores(n, lambda idx: np.array([score_one(row) for row in idx]))


def _retrieval_scores(
    task: AbsTaskRetrieval, predictions: Mapping, subset: str, split: str
) -> ExampleScores | None:
    from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores

    main = task.metadata.main_score
    measure = next((m + main[len(p) :] for p, m in _PYTREC_PREFIXES.items() if main.startswith(p)), None)
    if measure is None:
        return None
    qrels = {q: docs for q, docs in _split_data(task, subset, split)["relevant_docs"].items() if docs}
    k_values = sorted({*task.k_values, int(main.rsplit("_", 1)[1])})
    per_query = calculate_retrieval_scores(
        predictions, qrels, k_values, skip_first_result=task.skip_first_result
    ).all_scores
    # A query the model returned nothing for scores 0; sorted ids align the two models' queries.
    return _mean_scorer(np.array([per_query.get(q, {}).get(measure, 0.0) for q in sorted(qrels)]))


# mteb's pair-classification scoring functions: (prediction column, whether higher means more similar), as
# `AbsTaskPairClassification._compute_metrics` lists them; and the functions each AP main score takes the best of.
_PAIR_SCORES = {
    "similarity": ("similarity_scores", True),
    "cosine": ("cosine_scores", True),
    "manhattan": ("manhattan_distances", False),
    "euclidean": ("euclidean_distances", False),
    "dot": ("dot_scores", True),
}
_AP_FUNCTIONS = {"max_ap": tuple(_PAIR_SCORES)} | {f"{name}_ap": (name,) for name in _PAIR_SCORES}


def _pair_classification_scores(
    task: AbsTaskPairClassification, predictions: Mapping, subset: str, split: str
) -> ExampleScores:
    from datasets import Dataset

    data = _split_data(task, subset, split)
    if len(data) == 1:  # mteb's v1 layout: the whole split in one row
        data = Dataset.from_dict(data[0])
    labels = np.asarray(data[task.label_column_name])
    columns = {k: np.asarray(v) for k, v in predictions.items()}
    main = task.metadata.main_score
    functions = _AP_FUNCTIONS.get(main)
    if functions is not None and all(_PAIR_SCORES[f][0] in columns for f in functions):
        # An AP main score alone, as `_compute_metrics` computes it (average precision of the signed scores,
        # the best of the scoring functions), without its accuracy and F1 threshold searches: those are
        # Python loops over every pair, 20x the time of the AP, and not the main score.
        signed = [columns[_PAIR_SCORES[f][0]] * (1 if _PAIR_SCORES[f][1] else -1) for f in functions]
        return ExampleScores(
            len(labels), lambda idx: np.max([average_precisions(labels[idx], s[idx]) for s in signed], axis=0)
        )
    # mteb's saved predictions, cut to the resampled examples: the same keys as its own distances
    return _full_scorer(
        len(labels),
        lambda i: task._compute_metrics(cast(Any, {k: v[i] for k, v in columns.items()}), labels[i])[main],
    )


def average_precisions(labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """sklearn's `average_precision_score` of each row of (rows, n) binary `labels` against `scores`, ties
    included: the sum over distinct score thresholds, highest first, of (recall gained) x (precision there).

    Written out because sklearn validates its input on every call, which on a few hundred pairs costs 20x the
    arithmetic: a paired bootstrap scores thousands of resamples (a third of `mteb-eval`'s analysis time).
    Here every resample of a chunk is scored at once."""
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked = np.take_along_axis(scores, order, axis=1)
    true_positives = np.cumsum(np.take_along_axis(labels, order, axis=1), axis=1)
    # A threshold ends each run of equal scores: its precision counts every pair of the run.
    threshold = np.concatenate([ranked[:, 1:] != ranked[:, :-1], np.ones((len(ranked), 1), bool)], axis=1)
    at_threshold = np.where(threshold, true_positives, 0)
    before = np.maximum.accumulate(np.pad(at_threshold[:, :-1], ((0, 0), (1, 0))), axis=1)
    precision = true_positives / np.arange(1, ranked.shape[1] + 1)
    gained = np.where(threshold, true_positives - before, 0)
    return (gained * precision).sum(axis=1) / np.maximum(true_positives[:, -1], 1)


def _sts_scores(task: AbsTaskSTS, predictions: Mapping, subset: str, split: str) -> ExampleScores:
    gold = np.array([task._normalize(s) for s in _split_data(task, subset, split)["score"]])
    columns = {k: np.asarray(v) for k, v in predictions.items() if len(v) == len(gold)}
    main = task.metadata.main_score
    # mteb's saved predictions, cut to the resampled examples; `main` is one of the scores' keys
    return _full_scorer(
        len(gold),
        lambda i: cast(
            Any, task._calculate_scores(cast(Any, {k: v[i] for k, v in columns.items()}), gold[i])
        )[main],
    )


def _classification_scores(
    task: AbsTaskClassification, predictions: Sequence, subset: str, split: str
) -> ExampleScores | None:
    if task.metadata.main_score != "accuracy":
        return None
    gold = np.asarray(_split_data(task, subset, split)[task.label_column_name])
    correct = np.mean([np.asarray(experiment) == gold for experiment in predictions], axis=0)
    return _mean_scorer(correct.astype(float))


def _scorer_for(task: AbsTask):
    if isinstance(task, AbsTaskRetrieval):
        return _retrieval_scores
    if isinstance(task, AbsTaskPairClassification):
        return _pair_classification_scores
    if isinstance(task, AbsTaskSTS):
        return _sts_scores
    if isinstance(task, AbsTaskClassification) and not isinstance(task, AbsTaskMultilabelClassification):
        return _classification_scores
    return None


def supports_example_scores(task: AbsTask) -> bool:
    """Whether `task`'s main score can be resampled over its examples from mteb's saved predictions."""
    return _scorer_for(task) is not None


def example_scores(task: AbsTask, predictions_file: Path) -> list[ExampleScores] | None:
    """Per split and subset, the resampleable scores of one model's saved predictions on `task` (a leaf
    task); None when the file is missing or incomplete, or the task type cannot be resampled."""
    scorer = _scorer_for(task)
    if scorer is None or not predictions_file.is_file():
        return None
    saved = json.loads(predictions_file.read_text(encoding="utf-8"))
    units = []
    task.load_data()
    for split in task.eval_splits:
        for subset in task.hf_subsets:
            if split not in saved.get(subset, {}):
                return None
            unit = scorer(task, saved[subset][split], subset, split)
            if unit is None:
                return None
            units.append(unit)
    return units


def _row_replicates(parts: Sequence[Sequence[ExampleScores]], indices: Sequence[np.ndarray]) -> np.ndarray:
    """A row's score on each resample: the mean over its parts of the mean over their splits and subsets."""
    flat = iter(indices)
    return np.mean([np.mean([unit.score(next(flat)) for unit in part], axis=0) for part in parts], axis=0)


def _resampled_differences(
    ours: Sequence[Sequence[ExampleScores]],
    theirs: Sequence[Sequence[ExampleScores]],
    n_resamples: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Row score differences on `n_resamples` resamples, both models on the same indices; drawn in chunks
    so that a task with many examples never holds all index matrices at once."""
    differences = []
    for start in range(0, n_resamples, CHUNK):
        size = min(CHUNK, n_resamples - start)
        indices = [rng.integers(0, unit.n, size=(size, unit.n)) for part in ours for unit in part]
        differences.append(_row_replicates(ours, indices) - _row_replicates(theirs, indices))
    return np.concatenate(differences)


def _interval_and_p(observed: float, replicates: np.ndarray) -> tuple[float, float, float]:
    alpha = 1 - CONFIDENCE
    low, high = np.quantile(replicates, [alpha / 2, 1 - alpha / 2])
    extreme = np.sum(np.abs(replicates - observed) >= abs(observed) - 1e-12)
    return float(low), float(high), float((1 + extreme) / (1 + len(replicates)))


@dataclass(frozen=True)
class RowInput:
    """What one model has for one summary row: its main score, and its example scores per part (or None)."""

    score: float | None
    parts: list[list[ExampleScores]] | None


def _sizes(parts: Sequence[Sequence[ExampleScores]]) -> list[int]:
    return [unit.n for part in parts for unit in part]


def mean_of(inputs: Sequence[RowInput]) -> RowInput:
    """Several runs of one recipe (seeds) as one model: the mean of their main scores, and on any resample of
    the examples the mean of their resampled scores, so that a paired test of two recipes compares their
    seed-averaged scores query by query. Per-example scores only where every run has them, on the same
    examples."""
    scores = [i.score for i in inputs if i.score is not None]
    score = float(np.mean(scores)) if len(scores) == len(inputs) else None
    runs = [i.parts for i in inputs if i.parts is not None]
    if len(runs) < len(inputs) or len({tuple(_sizes(parts)) for parts in runs}) != 1:
        return RowInput(score, None)
    return RowInput(score, [[_averaged(units) for units in zip(*part)] for part in zip(*runs)])


def _averaged(units: Sequence[ExampleScores]) -> ExampleScores:
    return ExampleScores(units[0].n, lambda indices: np.mean([u.score(indices) for u in units], axis=0))


def compare_pair(
    model: str,
    baseline: str,
    rows: Mapping[str, tuple[RowInput, RowInput]],
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> list[Difference]:
    """Differences (model - baseline) per row both have a score for, then the average over those rows."""
    rng = np.random.default_rng(seed)
    out: list[Difference] = []
    replicates: list[np.ndarray | None] = []
    for name, (ours, theirs) in rows.items():
        if ours.score is None or theirs.score is None:
            continue
        if ours.parts is None or theirs.parts is None or _sizes(ours.parts) != _sizes(theirs.parts):
            diff = ours.score - theirs.score
            out.append(Difference(model, baseline, name, diff, None, None, None, "scores", 0))
            replicates.append(None)
            continue
        everything = [np.arange(u.n)[None, :] for part in ours.parts for u in part]
        observed = float(
            _row_replicates(ours.parts, everything)[0] - _row_replicates(theirs.parts, everything)[0]
        )
        sample = _resampled_differences(ours.parts, theirs.parts, n_resamples, rng)
        n = sum(_sizes(ours.parts))
        out.append(
            Difference(model, baseline, name, observed, *_interval_and_p(observed, sample), "examples", n)
        )
        replicates.append(sample)
    if out:
        out.append(_average(model, baseline, out, replicates, n_resamples, rng))
    return out


def _average(model, baseline, rows: list[Difference], replicates, n_resamples, rng) -> Difference:
    observed = float(np.mean([d.difference for d in rows]))
    if all(r is not None for r in replicates):
        sample = np.mean(replicates, axis=0)
        n, method = sum(d.n for d in rows), "examples"
    else:  # resample the tasks themselves: the only variation known for tasks without predictions
        diffs = np.array([d.difference for d in rows])
        sample = diffs[rng.integers(0, len(diffs), size=(n_resamples, len(diffs)))].mean(axis=1)
        n, method = len(diffs), "tasks"
    return Difference(model, baseline, "Average", observed, *_interval_and_p(observed, sample), method, n)
