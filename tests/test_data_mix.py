"""The paper's mix, source side: every repository manifest against rows in its source's real schema, budgets
read by streaming, the STS rule, licence sources, and sizes far from a manifest's expected_rows."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from data_source_fixtures import REPOSITORY_SHAPES, write_repository_sources
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.data.build import BuildConfig, build
from neoembed.data.manifest import load_manifests
from neoembed.data.stats import size_warnings

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "data_manifests"
SOURCES = sorted([*REPOSITORY_SHAPES, "fever", "msmarco"])


def t(source: str, what: str, i: int = 0) -> str:
    return f"{source} {what} number {i}."


# The first record each repository manifest makes from its fixture: (query, positive, given negatives).
FIRST_RECORD = {
    "agnews": (t("agnews", "title"), t("agnews", "description"), []),
    "allnli": (t("allnli", "anchor"), t("allnli", "positive"), [t("allnli", "negative")]),
    "amazonqa": (t("amazonqa", "query"), t("amazonqa", "pos"), []),
    "concurrentqa": (
        t("concurrentqa", "question"),
        t("concurrentqa", "pos para"),
        [t("concurrentqa", "neg para a"), t("concurrentqa", "neg para b")],
    ),
    "fever": (t("fever", "query"), "Page " + t("fever", "passage"), []),  # title_in_positive
    "githubissues": (t("githubissues", "anchor"), t("githubissues", "positive"), []),
    "gooaq": (
        t("gooaq", "question"),
        t("gooaq", "answer"),
        [t("gooaq", f"negative {k}") for k in range(1, 6)],
    ),
    "medmcqa": (t("medmcqa", "question"), t("medmcqa", "exp"), []),
    "msmarco": (t("msmarco", "query"), t("msmarco", "passage"), []),
    "npr": (t("npr", "title"), t("npr", "body"), []),
    "paq": (t("paq", "question"), t("paq", "answer"), []),
    "pubmedqa": (
        t("pubmedqa", "anchor"),
        t("pubmedqa", "positive"),
        [t("pubmedqa", f"negative {k}") for k in range(1, 21)],
    ),
    "qqp": (t("qqp", "query"), t("qqp", "pos"), [t("qqp", "neg a"), t("qqp", "neg b")]),
    "sentencecompression": (t("sentencecompression", "compressed"), t("sentencecompression", "original"), []),
    "stackexchange-body": (t("stackexchange-body", "body1"), t("stackexchange-body", "body2"), []),
    "stackexchange-post": (t("stackexchange-post", "post1"), t("stackexchange-post", "post2"), []),
    "stackoverflowdupquestions": (
        t("stackoverflowdupquestions", "query"),
        t("stackoverflowdupquestions", "positive"),
        [t("stackoverflowdupquestions", "neg a"), t("stackoverflowdupquestions", "neg b")],
    ),
    "sts12": (t("sts12", "sentence1"), t("sts12", "sentence2"), []),
    "stsbenchmark": (t("stsbenchmark", "sentence1"), t("stsbenchmark", "sentence2"), []),
    "triviaqa": (t("triviaqa", "anchor"), t("triviaqa", "positive"), [t("triviaqa", "negative")]),
    "wikihow": (t("wikihow", "text"), t("wikihow", "summary"), []),
    "yahooanswers": (t("yahooanswers", "title"), t("yahooanswers", "answer"), []),
}


@pytest.fixture(scope="module")
def local_copies(tmp_path_factory):
    return write_repository_sources(tmp_path_factory.mktemp("local"))


def records(out: Path, name: str) -> list[dict]:
    return [r for p in sorted((out / name).glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]


def test_every_repository_manifest_builds_offline_from_its_real_schema(tmp_path, local_copies):
    debian = {"wordnet", "manpages", "packages"}  # read from Debian's mirror, not from a hub repository
    assert set(FIRST_RECORD) == set(SOURCES) == set(load_manifests(MANIFESTS)) - debian
    stats = build(
        BuildConfig(out=tmp_path / "out", sources=SOURCES, local_data=local_copies, mine=False)
    ).stats
    for name, (query, positive, negatives) in FIRST_RECORD.items():
        first = records(tmp_path / "out", name)[0]
        assert (first["query"], first["positive"], first["negatives"]) == (query, positive, negatives), name
        assert stats["sources"][name]["dropped"]["malformed"] == 0, name
        assert stats["sources"][name]["licence_source"], name
    # Every fixture is far smaller than its manifest's expected_rows: each such source is warned about, once.
    # PAQ is streamed up to its budget from a copy without dataset info: the stream ran out first, so it was
    # read whole and its size is known.
    expected = {n for n, (m, _) in load_manifests(MANIFESTS, SOURCES).items() if m.expected_rows}
    assert "paq" in expected and stats["sources"]["paq"]["rows_available"] == 2
    assert {w.split(":")[0] for w in stats["warnings"]} == expected
    assert "## Warnings" in (tmp_path / "out" / "stats.md").read_text()


def test_repository_manifests_state_licence_sources_pins_and_counts():
    manifests = {name: m for name, (m, _) in load_manifests(MANIFESTS).items()}
    assert all(m.licence_source.strip() for m in manifests.values())
    assert manifests["paq"].licence == "CC BY-SA 3.0" and "code" in manifests["paq"].licence_source
    assert manifests["stackoverflowdupquestions"].licence == "CC BY-NC-SA 4.0"
    assert manifests["medmcqa"].licence == "Apache-2.0"
    assert "cc-by-nc-sa-3.0" in manifests["fever"].licence_source
    assert "CC BY-SA 3.0" in manifests["fever"].licence_source  # both sides of the conflict are named
    assert manifests["fever"].revision == "bea83ef9e8fb933d90a2f1d5515737465d613e12"
    assert manifests["msmarco"].revision == "c5a29a104738b98a9e76336939199e264163d4a0"
    assert manifests["allnli"].revision == "cc6c526380e29912b5c6fa03682da4daf773c013"
    assert manifests["allnli"].expected_rows == 557_850  # the triplet split at that revision
    counts = {name: m.expected_rows for name, m in manifests.items()}
    assert (
        counts
        | {
            "amazonqa": 1_095_290,
            "githubissues": 9_457,
            "gooaq": 2_294_443,
            "stackexchange-body": 250_460,
            "stackexchange-post": 250_519,
            "wikihow": 128_543,
            "paq": 64_371_441,
        }
        == counts
    )
    budgets = {name: m.budget for name, m in manifests.items() if m.budget}
    assert budgets == {"paq": 500_000}


PAQ_ROWS = [{"set": [f"Question {i} about PAQ?", f"Answer passage {i} for PAQ."]} for i in range(50)]


def _paq_manifests(tmp_path: Path, budget: int) -> Path:
    text = (MANIFESTS / "paq.yaml").read_text().replace("budget: 500000", f"budget: {budget}")
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "paq.yaml").write_text(text)
    return tmp_path / "manifests"


def test_a_budget_streams_the_source_and_reads_no_more_than_it(tmp_path, monkeypatch):
    calls, consumed = [], []

    def fake_load_dataset(path, name=None, *, split, revision=None, streaming=False, **kwargs):
        calls.append({"path": path, "streaming": streaming, "split": split})

        def rows():
            for row in PAQ_ROWS:
                consumed.append(1)
                yield row

        if streaming:
            return datasets.IterableDataset.from_generator(rows)
        return datasets.Dataset.from_list(list(rows()))

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    config = BuildConfig(manifests=_paq_manifests(tmp_path, 7), out=tmp_path / "out", mine=False)
    stats = build(config).stats
    assert calls == [{"path": "embedding-data/PAQ_pairs", "streaming": True, "split": "train"}]
    assert len(consumed) <= 7 and stats["sources"]["paq"]["rows_read"] == 7
    assert [r["query"] for r in records(config.out, "paq")] == [f"Question {i} about PAQ?" for i in range(7)]
    assert stats["sources"]["paq"]["budget"] == 7

    # --max-rows below the budget caps further (still streamed); --no-budgets reads the whole source.
    calls.clear(), consumed.clear()
    stats = build(BuildConfig(**{**config.__dict__, "out": tmp_path / "few", "max_rows": 3})).stats
    assert calls[0]["streaming"] and len(consumed) <= 3 and stats["sources"]["paq"]["rows_read"] == 3
    calls.clear(), consumed.clear()
    stats = build(BuildConfig(**{**config.__dict__, "out": tmp_path / "all", "budgets": False})).stats
    assert not calls[0]["streaming"] and stats["sources"]["paq"]["rows_read"] == len(PAQ_ROWS)


def test_streamed_rows_are_the_first_rows_of_a_full_load(tmp_path, local_copies):
    """Streaming order is file order: the budgeted rows are the ones a full load would list first."""
    capped = build(
        BuildConfig(
            manifests=_paq_manifests(tmp_path, 1),
            out=tmp_path / "capped",
            local_data=local_copies,
            mine=False,
        )
    ).stats
    whole = BuildConfig(
        manifests=tmp_path / "manifests",
        out=tmp_path / "whole",
        local_data=local_copies,
        mine=False,
        budgets=False,
    )
    assert (
        capped["sources"]["paq"]["rows_read"] == 1 and build(whole).stats["sources"]["paq"]["rows_read"] == 2
    )
    assert records(tmp_path / "capped", "paq") == records(tmp_path / "whole", "paq")[:1]


def test_sts_rule_intended_keeps_high_scores_release_keeps_every_pair(tmp_path):
    rows = [(5.0, "A plane is taking off."), (4.0, "A man is playing a flute."), (0.0, "A cat sits.")]
    local = tmp_path / "local" / "sts12"
    local.mkdir(parents=True)
    (local / "train.jsonl").write_text(
        "".join(
            json.dumps({"sentence1": s, "sentence2": f"{s} Indeed.", "score": score}) + "\n"
            for score, s in rows
        )
    )

    def kept(rule: str) -> list[str]:
        out = tmp_path / rule
        cli = ["build-data", "--sources", "sts12", "--local-data", str(tmp_path / "local"), "--out", str(out)]
        result = CliRunner().invoke(app, [*cli, "--no-mine", "--sts-rule", rule])
        assert result.exit_code == 0, result.output
        return [r["query"] for r in records(out, "sts12")]

    assert kept("intended") == [rows[0][1], rows[1][1]]  # score >= 4
    assert kept("release") == [s for _, s in rows]  # the release's discarded filter: score 0 included
    stats = json.loads((tmp_path / "release" / "stats.json").read_text())
    assert stats["config"]["sts_rule"] == "release" and stats["sources"]["sts12"]["dropped"]["low_score"] == 0


def test_a_size_far_from_expected_is_a_warning_and_a_near_one_is_not():
    def source(available, expected):
        return {"rows_available": available, "expected_rows": expected}

    sources = {
        "halved": source(557_850, 1_115_700),
        "close": source(1_095_000, 1_095_290),
        "unknown": source(None, 64_371_441),
        "unstated": source(10, None),
    }
    (warning,) = size_warnings(sources)
    assert warning.startswith("halved: ") and "557,850" in warning and "1,115,700" in warning


def test_the_cli_prints_size_warnings(tmp_path, local_copies):
    result = CliRunner().invoke(
        app,
        ["build-data", "--sources", "githubissues", "--local-data", str(local_copies), "--out", str(tmp_path)]
        + ["--no-mine"],
    )
    assert result.exit_code == 0, result.output
    assert "warning: githubissues: the source has 2 rows, its manifest expects 9,457" in result.output
