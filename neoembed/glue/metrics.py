"""GLUE's official dev metrics, computed the way the reference GLUE metric does (scikit-learn and scipy)."""

from __future__ import annotations

import warnings

import numpy as np

from neoembed.glue.tasks import GlueTask


def _correlation(fn, predictions: np.ndarray, labels: np.ndarray) -> float:
    """A correlation that is 0 (not NaN) for a constant prediction, so a collapsed model ranks lowest
    in early stopping and the grid instead of breaking the comparison."""
    if np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn(predictions, labels)[0])


def compute_metrics(task: GlueTask, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's metrics plus `score`, their mean (GLUE's rule for tasks with two metrics).

    `predictions` are model outputs: logits of shape (n, num_labels), or (n,) / (n, 1) scores for STS-B.
    """
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    predictions = np.asarray(predictions)
    labels = np.asarray(labels)
    if task.is_regression:
        predicted = predictions.reshape(len(labels)).astype(np.float64)
    else:
        predicted = predictions.argmax(-1) if predictions.ndim == 2 else predictions
    values = {
        "accuracy": lambda: float((predicted == labels).mean()),
        "f1": lambda: float(f1_score(labels, predicted, zero_division=0.0)),
        "matthews_correlation": lambda: float(matthews_corrcoef(labels, predicted)),
        "pearson": lambda: _correlation(pearsonr, predicted, labels),
        "spearman": lambda: _correlation(spearmanr, predicted, labels),
    }
    result = {name: values[name]() for name in task.metrics}
    result["score"] = float(np.mean(list(result.values())))
    return result
