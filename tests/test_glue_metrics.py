"""GLUE metrics against hand-computed values, and the task table."""

import math

import numpy as np
import pytest

from neoembed.glue.metrics import compute_metrics
from neoembed.glue.tasks import TASKS, GlueError, select_tasks


def test_matthews_correlation_by_hand():
    # TP=2 TN=2 FP=1 FN=1: (2*2 - 1*1) / sqrt(3*3*3*3) = 3/9
    labels = np.array([1, 1, 1, 0, 0, 0])
    predictions = np.array([1, 1, 0, 0, 0, 1])
    result = compute_metrics(TASKS["cola"], predictions, labels)
    assert result["matthews_correlation"] == pytest.approx(1 / 3)
    assert result["score"] == pytest.approx(1 / 3)


def test_f1_and_accuracy_from_logits_by_hand():
    # predicted classes 1,1,1,0,0 vs labels 1,0,1,1,0: TP=2 FP=1 FN=1 -> P=R=F1=2/3; accuracy 3/5
    logits = np.array([[0.1, 0.9], [0.2, 0.8], [-1.0, 1.0], [2.0, 0.0], [0.5, -0.5]])
    labels = np.array([1, 0, 1, 1, 0])
    for name in ("mrpc", "qqp"):
        result = compute_metrics(TASKS[name], logits, labels)
        assert result["f1"] == pytest.approx(2 / 3)
        assert result["accuracy"] == pytest.approx(3 / 5)
        assert result["score"] == pytest.approx((2 / 3 + 3 / 5) / 2)


def test_pearson_and_spearman_by_hand():
    # x deviations (-1.5,-.5,.5,1.5), y = x^2 deviations (-6.5,-3.5,1.5,8.5): r = 25 / sqrt(5 * 129)
    scores = np.array([[1.0], [2.0], [3.0], [4.0]])  # regression head output, shape (n, 1)
    labels = np.array([1.0, 4.0, 9.0, 16.0])
    result = compute_metrics(TASKS["stsb"], scores, labels)
    assert result["pearson"] == pytest.approx(25 / math.sqrt(645))
    assert result["spearman"] == pytest.approx(1.0)  # same order
    assert result["score"] == pytest.approx((25 / math.sqrt(645) + 1) / 2)
    # ranks differ from values: x=(1,2,3), y=(1,3,2) -> both correlations are 1/2
    result = compute_metrics(TASKS["stsb"], np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0]))
    assert result["pearson"] == pytest.approx(0.5) and result["spearman"] == pytest.approx(0.5)


def test_constant_prediction_scores_zero_not_nan():
    result = compute_metrics(TASKS["stsb"], np.full(4, 2.5), np.array([0.0, 1.0, 4.0, 5.0]))
    assert result == {"pearson": 0.0, "spearman": 0.0, "score": 0.0}


def test_three_class_accuracy():
    logits = np.eye(3)[[0, 1, 2, 2]]  # predicts 0, 1, 2, 2
    assert compute_metrics(TASKS["mnli"], logits, np.array([0, 1, 1, 2]))["accuracy"] == pytest.approx(0.75)


def test_task_selection():
    assert [t.name for t in select_tasks(["all"], ["sst2", "rte"])] == ["sst2", "rte"]
    assert [t.name for t in select_tasks([], ["cola"])] == ["cola"]
    assert [t.name for t in select_tasks(["RTE", "rte", "mnli"], [])] == ["rte", "mnli"]
    with pytest.raises(GlueError, match="unknown GLUE task 'sst3'.*cola, sst2"):
        select_tasks(["sst3"], [])
