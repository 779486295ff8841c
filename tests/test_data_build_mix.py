"""build-data for the paper's mix: long texts cut to a token budget, symmetric pairs, the benchmark-named guard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from data_source_fixtures import write_manifests
from datasets import Dataset, DatasetDict

from neoembed.data.build import BuildConfig, build
from neoembed.data.stats import leakage_summary
from neoembed.errors import InputError, RunError

PAIRS = """
name: pairs
description: (question, duplicate question) pairs
dataset: some/pairs
licence: l
licence_source: s
paper: release
mapping: {query: q1, positive: q2, negatives: [other]}
"""


def pairs_build(root: Path, rows: list[dict], manifest: str = PAIRS, **config) -> BuildConfig:
    path = root / "local" / "pairs" / "train.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    manifests = write_manifests(root / "manifests", ["pairs"], {"pairs": manifest})
    return BuildConfig(manifests=manifests, out=root / "out", local_data=root / "local", mine=False, **config)


def written(config: BuildConfig) -> list[dict]:
    import pyarrow.parquet as pq

    return [
        r for p in sorted((config.out / "pairs").glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()
    ]


# Long texts -------------------------------------------------------------------------------------------------

LONG = " ".join(f"word{i} stack trace line {i}." for i in range(1500))  # ~40k characters, ~9k tokens


def test_long_texts_are_cut_to_the_token_budget_and_counted(tmp_path):
    from transformers import AutoTokenizer

    from neoembed.embedder import packaged_minilm_path

    rows = [
        {"q1": "Crash on start", "q2": LONG, "other": "Héllo " + LONG},
        {"q1": "A short question?", "q2": "A short answer.", "other": "A short negative."},
    ]
    stats = build(pairs_build(tmp_path, rows, max_tokens=64)).stats
    source = stats["sources"]["pairs"]
    assert source["kept"] == 2 and source["dropped"]["too_long"] == 0
    assert source["truncated"] == {"query": 0, "positive": 1, "negatives": 1}
    assert stats["total"]["truncated"]["positive"] == 1
    assert "queries 0, positives 1, negatives 1" in (tmp_path / "out" / "stats.md").read_text()
    first, second = written(pairs_build(tmp_path, rows, max_tokens=64))
    tokenizer = AutoTokenizer.from_pretrained(packaged_minilm_path())
    for text in (first["positive"], first["negatives"][0]):
        assert len(tokenizer(text)["input_ids"]) <= 64  # the budget holds [CLS] and [SEP]
        assert len(tokenizer(text)["input_ids"]) >= 60  # cut at the budget, not far below it
    assert LONG.startswith(first["positive"])
    assert second["positive"] == "A short answer."


def test_without_a_token_budget_the_character_cap_drops_long_texts(tmp_path):
    rows = [{"q1": "Crash on start", "q2": LONG, "other": "x y z"}]
    source = build(pairs_build(tmp_path, rows, max_tokens=0)).stats["sources"]["pairs"]
    assert source["kept"] == 0 and source["dropped"]["too_long"] == 1


def test_an_evaluation_text_longer_than_the_budget_still_leaks_when_cut(tmp_path):
    eval_file = tmp_path / "eval.txt"
    eval_file.write_text(LONG + "\n")
    rows = [{"q1": "Crash on start", "q2": LONG, "other": "x y z"}]
    source = build(pairs_build(tmp_path, rows, max_tokens=64, eval_texts=(eval_file,))).stats["sources"][
        "pairs"
    ]
    assert source["kept"] == 0 and source["rows_dropped_for_leakage"]["eval_texts"] == 1


# Symmetric pairs --------------------------------------------------------------------------------------------

SYMMETRIC_ROWS = [
    {"q1": "How do I learn Python?", "q2": "What is the best way to learn Python?", "other": "Who is Ada?"},
    {"q1": "what is the BEST way to learn python", "q2": "How do I learn Python!", "other": "Who is Bob?"},
    {"q1": "Is coffee bad for you?", "q2": "Does coffee harm health?", "other": "Who is Eve?"},
]


def test_reversed_pairs_of_a_symmetric_source_are_duplicates(tmp_path):
    asymmetric = build(pairs_build(tmp_path / "a", SYMMETRIC_ROWS)).stats["sources"]["pairs"]
    assert asymmetric["kept"] == 3  # (a, b) then (b, a): two pairs when order matters
    symmetric = build(pairs_build(tmp_path / "s", SYMMETRIC_ROWS, PAIRS + "symmetric: true\n")).stats
    source = symmetric["sources"]["pairs"]
    assert source["kept"] == 2 and source["dropped"]["duplicate"] == 1 and source["reversed"] == 0


def test_both_directions_writes_each_symmetric_pair_twice(tmp_path):
    config = pairs_build(tmp_path, SYMMETRIC_ROWS, PAIRS + "symmetric: true\n", both_directions=True)
    stats = build(config).stats
    assert stats["sources"]["pairs"]["reversed"] == 2 and stats["sources"]["pairs"]["kept"] == 4
    pairs = [(r["query"], r["positive"], r["negatives"]) for r in written(config)]
    assert pairs == [
        ("How do I learn Python?", "What is the best way to learn Python?", ["Who is Ada?"]),
        ("What is the best way to learn Python?", "How do I learn Python?", ["Who is Ada?"]),
        ("Is coffee bad for you?", "Does coffee harm health?", ["Who is Eve?"]),
        ("Does coffee harm health?", "Is coffee bad for you?", ["Who is Eve?"]),
    ]
    keys = [(r["query_key"], r["positive_key"]) for r in written(config)]
    assert keys[1] == keys[0][::-1]
    # An asymmetric source is never reversed, whatever the option says.
    asymmetric = pairs_build(tmp_path / "a", SYMMETRIC_ROWS, both_directions=True)
    assert build(asymmetric).stats["sources"]["pairs"]["reversed"] == 0


def test_repository_manifests_mark_the_duplicate_and_sts_sources_symmetric():
    from neoembed.data.manifest import load_manifests
    from neoembed.packaged import manifests_dir

    symmetric = {name for name, (m, _) in load_manifests(manifests_dir()).items() if m.symmetric}
    assert symmetric == {
        "qqp", "stackexchange-body", "stackexchange-post", "stackoverflowdupquestions", "sts12", "stsbenchmark",
    }  # fmt: skip


# Leakage guard by benchmark ---------------------------------------------------------------------------------

QUORA_QUERY = "How can I be a good geologist?"
STS_SENTENCE = "A man is playing a large flute."


def local_tasks(monkeypatch, tmp_path, broken: bool = False):
    """Real mteb task classes (QuoraRetrieval, STSBenchmark) whose data is a few local rows, registered where
    task names resolve; with `broken`, CQADupstackUnixRetrieval's data cannot be loaded."""
    import mteb
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData

    import neoembed.evaluation.tasks

    monkeypatch.setenv("NEOEMBED_CACHE", str(tmp_path / "cache"))
    quora_class, sts_class = type(mteb.get_task("QuoraRetrieval")), type(mteb.get_task("STSBenchmark"))
    loads = []

    class Quora(quora_class):
        def load_data(self, **kwargs):
            loads.append("QuoraRetrieval")
            queries = {"q1": QUORA_QUERY.upper(), "q2": "What is a rock?"}
            corpus = {"d1": "What should I do to be a great geologist?", "d2": "How do I become a geologist?"}
            self.dataset = {
                "default": {
                    "test": RetrievalSplitData(
                        queries=Dataset.from_dict({"id": list(queries), "text": list(queries.values())}),
                        corpus=Dataset.from_dict({"id": list(corpus), "text": list(corpus.values())}),
                        relevant_docs={"q1": {"d1": 1}},
                        top_ranked=None,
                    )
                }
            }
            self.data_loaded = True

    class STS(sts_class):
        def load_data(self, **kwargs):
            loads.append("STSBenchmark")
            test = {"sentence1": [STS_SENTENCE], "sentence2": ["A man is playing a flute."], "score": [3.8]}
            self.dataset = DatasetDict({"test": Dataset.from_dict(test)})
            self.data_loaded = True

    class Missing(type(mteb.get_task("CQADupstackUnixRetrieval"))):
        def load_data(self, **kwargs):
            raise ConnectionError(
                "Couldn't reach 'mteb/cqadupstack-unix' on the Hub (LocalEntryNotFoundError)"
            )

    registry = {"QuoraRetrieval": Quora, "STSBenchmark": STS}
    if broken:
        registry["CQADupstackUnixRetrieval"] = Missing
    for name, cls in registry.items():
        monkeypatch.setitem(neoembed.evaluation.tasks.LOCAL_TASKS, name, cls)
    return loads


def guarded_build(config: BuildConfig) -> dict:
    """The build as `neoembed build-data` runs it: the benchmark's texts collected on the evaluation side."""
    from neoembed.evaluation import benchmark_texts

    return build(
        config, benchmark=benchmark_texts(config.eval_benchmark, config.eval_benchmark_missing)
    ).stats


BENCHMARK_ROWS = [
    {"q1": "How can I be a good geologist", "q2": "What should I do to be a great geologist?", "other": "n"},
    {"q1": "Two dogs run in a field.", "q2": "A MAN IS PLAYING A LARGE FLUTE", "other": "n"},
    {"q1": "What is a rock?", "q2": "A rock is a mineral aggregate.", "other": "n"},
    {
        "q1": "Is coffee bad for you?",
        "q2": "Does coffee harm health?",
        "other": "A man is playing a large flute.",
    },
]


def test_the_benchmark_guard_drops_planted_test_texts_and_reports_them_per_task(tmp_path, monkeypatch):
    loads = local_tasks(monkeypatch, tmp_path)
    config = pairs_build(tmp_path, BENCHMARK_ROWS, eval_benchmark="QuoraRetrieval, STSBenchmark")
    stats = guarded_build(config)
    source = stats["sources"]["pairs"]
    assert source["rows_dropped_for_leakage"] == {
        "foldoc": 0,
        "eval_texts": 0,
        "QuoraRetrieval": 2,
        "STSBenchmark": 1,
    }
    assert source["negatives_dropped_for_leakage"] == 1
    assert [r["query"] for r in written(config)] == ["Is coffee bad for you?"]
    assert (
        stats["config"]["guarded_texts"]["QuoraRetrieval"] == 2
    )  # queries only: the corpus is not test input
    assert stats["config"]["guarded_texts"]["STSBenchmark"] == 2
    assert stats["config"]["eval_benchmark"] == "QuoraRetrieval, STSBenchmark"
    assert "QuoraRetrieval 2 (" in (config.out / "stats.md").read_text()
    # What an exported model's card says about the build it was trained on.
    summary = leakage_summary(config.out)
    assert "QuoraRetrieval 2 rows (2 texts)" in summary and "STSBenchmark 1 rows" in summary
    # Collected once: a second build in a fresh directory reads the cached keys, not the tasks' data.
    assert sorted(loads) == ["QuoraRetrieval", "STSBenchmark"]
    assert len(list((tmp_path / "cache" / "leakage").glob("*.npy"))) == 2
    again = guarded_build(
        pairs_build(tmp_path / "again", BENCHMARK_ROWS, eval_benchmark="QuoraRetrieval,STSBenchmark")
    )
    assert again["sources"]["pairs"]["rows_dropped_for_leakage"] == source["rows_dropped_for_leakage"]
    assert len(loads) == 2


def test_a_benchmark_task_without_data_stops_the_build_or_is_skipped_and_reported(tmp_path, monkeypatch):
    local_tasks(monkeypatch, tmp_path, broken=True)
    spec = "STSBenchmark,CQADupstackUnixRetrieval,QuoraRetrieval"
    with pytest.raises(RunError, match=r"task CQADupstackUnixRetrieval .*--eval-benchmark-missing skip"):
        guarded_build(pairs_build(tmp_path, BENCHMARK_ROWS, eval_benchmark=spec))
    config = pairs_build(
        tmp_path / "skip", BENCHMARK_ROWS, eval_benchmark=spec, eval_benchmark_missing="skip"
    )
    with pytest.warns(UserWarning, match="CQADupstackUnixRetrieval skipped"):
        stats = guarded_build(config)
    assert list(stats["config"]["eval_benchmark_skipped"]) == ["CQADupstackUnixRetrieval"]
    assert stats["sources"]["pairs"]["rows_dropped_for_leakage"]["QuoraRetrieval"] == 2
    assert "NOT guarded" in (config.out / "stats.md").read_text()
    assert "Not guarded (data unavailable at build time): CQADupstackUnixRetrieval." in leakage_summary(
        config.out
    )


def test_benchmark_names_resolve_to_their_leaf_tasks():
    from neoembed.evaluation.benchmark_texts import resolve_tasks

    spec = "MTEB(eng, v2),QuoraRetrieval,StackOverflowDupQuestions,CQADupstackRetrieval"  # v1's overlaps too
    names = [t.metadata.name for t in resolve_tasks(spec)]
    for expected in ("StackOverflowDupQuestions", "StackExchangeClustering.v2", "STS12", "STSBenchmark"):
        assert expected in names
    assert "QuoraRetrieval" in names and "CQADupstackUnixRetrieval" in names  # an aggregate's subtasks
    assert len(names) == len(set(names))


def test_a_build_named_a_benchmark_needs_its_texts(tmp_path):
    """The data build never collects a benchmark itself: a config naming one without its texts is refused
    before anything is written, so no build runs unguarded by mistake."""
    with pytest.raises(InputError, match="eval_benchmark and the benchmark's texts go together"):
        build(pairs_build(tmp_path, BENCHMARK_ROWS, eval_benchmark="QuoraRetrieval"))
    assert not (tmp_path / "out" / "pairs").exists()
