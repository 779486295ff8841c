"""Summary aggregation checked against hand-computed numbers on stored mteb result files.

The fixtures (tests/fixtures/mteb/<model>/<task>.json) are mteb TaskResult files:
- model-a: MSMARCO dev 0.40 (plus a stray test split at 0.99 that must be ignored), the twelve CQADupstack
  subsets at 0.30, 0.31, ..., 0.41 (mean 0.355), STS12 0.70, Banking77Classification 0.80.
- model-b: MSMARCO dev 0.20, CQADupstack subsets 0.10, 0.12, ..., 0.32 (mean 0.21), STS12 0.50, and no
  Banking77Classification result (a failed task).
"""

import csv
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "mteb"
TASKS = ["MSMARCO", "CQADupstackRetrieval", "STS12", "Banking77Classification"]


@pytest.fixture(scope="module")
def results():
    from mteb import TaskResult

    return {
        model: {p.stem: TaskResult.from_disk(p) for p in sorted((FIXTURES / model).glob("*.json"))}
        for model in ("model-a", "model-b")
    }


@pytest.fixture(scope="module")
def summary(results):
    from neoembed.evaluation.summary import summarize
    from neoembed.evaluation.tasks import select_tasks

    return summarize(results, select_tasks(TASKS))


def test_msmarco_uses_dev_split_and_cqadupstack_averages_its_subsets(summary):
    assert [r.name for r in summary.rows] == TASKS
    a, b = summary.scores["model-a"], summary.scores["model-b"]
    assert a["MSMARCO"] == pytest.approx(0.40)
    assert a["CQADupstackRetrieval"] == pytest.approx(0.355)
    assert b["CQADupstackRetrieval"] == pytest.approx(0.21)
    assert b["Banking77Classification"] is None


def test_type_and_overall_averages_include_msmarco_and_cqadupstack(summary):
    assert summary.type_average("model-a", "Retrieval").score == pytest.approx((0.40 + 0.355) / 2)
    overall_a = summary.overall("model-a")
    assert overall_a.score == pytest.approx((0.40 + 0.355 + 0.70 + 0.80) / 4)
    assert (overall_a.n_scored, overall_a.n_rows) == (4, 4)
    overall_b = summary.overall("model-b")
    assert overall_b.score == pytest.approx((0.20 + 0.21 + 0.50) / 3)
    assert (overall_b.n_scored, overall_b.n_rows) == (3, 4)
    assert summary.type_average("model-b", "Classification").score is None


def test_cqadupstack_subsets_selected_one_by_one_form_one_row(results):
    from neoembed.evaluation.summary import summarize
    from neoembed.evaluation.tasks import select_tasks

    tasks = select_tasks(["CQADupstackAndroidRetrieval", "STS12", "CQADupstackGisRetrieval"])
    summary = summarize(results, tasks)
    assert [r.name for r in summary.rows] == ["CQADupstackRetrieval", "STS12"]
    # Android is subset 0 (0.30), Gis is subset 3 (0.33).
    assert summary.scores["model-a"]["CQADupstackRetrieval"] == pytest.approx((0.30 + 0.33) / 2)


def test_a_missing_cqadupstack_subset_leaves_the_row_unscored(results):
    from neoembed.evaluation.summary import summarize
    from neoembed.evaluation.tasks import select_tasks

    partial = {"model-a": {k: v for k, v in results["model-a"].items() if k != "CQADupstackTexRetrieval"}}
    summary = summarize(partial, select_tasks(["CQADupstackRetrieval"]))
    assert summary.scores["model-a"]["CQADupstackRetrieval"] is None


def test_written_markdown_csv_and_chart(summary, tmp_path):
    from neoembed.evaluation.summary import write_summary

    files = write_summary(summary, tmp_path)
    assert [f.name for f in files] == ["summary.md", "summary.csv", "summary.png"]
    markdown = files[0].read_text()
    assert "| MSMARCO | Retrieval | 40.00 | 20.00 |" in markdown
    assert "| CQADupstackRetrieval (mean of 12 subsets) | Retrieval | 35.50 | 21.00 |" in markdown
    assert "| Average (all 4 tasks) |  | 56.38 | 30.33 (3/4) |" in markdown
    rows = list(csv.DictReader(files[1].open()))
    overall = {r["model"]: r for r in rows if r["scope"] == "overall"}
    assert float(overall["model-a"]["score"]) == pytest.approx(56.375)
    assert (overall["model-b"]["n_scored"], overall["model-b"]["n_tasks"]) == ("3", "4")
    assert files[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pairs_with_their_own_baselines_are_tabled_and_drawn_as_such(tmp_path):
    """The quickstart's question: each fine-tuned model against its own base, not against the first model."""
    from neoembed.evaluation.runner import comparison_pairs
    from neoembed.evaluation.significance import Difference
    from neoembed.evaluation.summary import Row, Summary, plot_summary, to_markdown

    models = ["neo", "neo-embed", "mini", "mini-embed", "bm25"]
    overall = {"neo": 0.2, "neo-embed": 0.5, "mini": 0.6, "mini-embed": 0.7, "bm25": 0.4}
    summary = Summary(models, [Row("T", "Retrieval", ())], {m: {"T": overall[m]} for m in models})
    pairs = comparison_pairs(["neo-embed:neo", "mini-embed:mini", "bm25:best"], summary)
    assert pairs == [("neo-embed", "neo"), ("mini-embed", "mini"), ("bm25", "mini-embed")]
    assert comparison_pairs([], summary)[:2] == [("neo-embed", "neo"), ("mini", "neo")], "default: the first"

    summary.differences = [
        Difference(m, b, "Average", overall[m] - overall[b], None, None, None, "scores", 0) for m, b in pairs
    ]
    markdown = to_markdown(summary)
    assert "Paired differences, each model against its baseline:" in markdown
    assert "| Task | neo-embed - neo | mini-embed - mini | bm25 - mini-embed |" in markdown
    assert "| Average | +30.00 (no interval) | +10.00 (no interval) | -30.00 (no interval) |" in markdown
    plot_summary(summary, tmp_path / "pairs.png")
    assert (tmp_path / "pairs.png").stat().st_size > 5_000
