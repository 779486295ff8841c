"""Local copies of real contrastive sources, in the exact shapes their hub datasets have, plus manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

MANIFESTS = {
    "allnli": """
name: allnli
description: all-nli triplet
dataset: sentence-transformers/all-nli
config: triplet
split: train
licence: CC BY-SA 4.0
licence_source: the test fixture
paper: release
mapping: {query: anchor, positive: positive, negatives: [negative]}
""",
    "gooaq": """
name: gooaq
description: gooaq triplet-5
dataset: tomaarsen/gooaq-hard-negatives
config: triplet-5
split: train
licence: Apache-2.0
licence_source: the test fixture
paper: release
mapping:
  query: question
  positive: answer
  negatives: [negative_1, negative_2, negative_3, negative_4, negative_5]
""",
    "msmarco": """
name: msmarco
description: mteb retrieval layout
kind: retrieval
dataset: mteb/msmarco
licence: MS MARCO terms
licence_source: the test fixture
paper: release
retrieval: {qrels: {config: default, split: train}}
mapping: {query: query, positive: text}
""",
    "qqp": """
name: qqp
description: embedding-data set rows
dataset: embedding-data/QQP_triplets
licence: Quora terms
licence_source: the test fixture
paper: release
mapping: {query: set.query, positive: "set.pos[0]", negatives: [set.neg]}
""",
    "sts": """
name: sts
description: mteb sts layout
dataset: mteb/stsbenchmark-sts
licence: CC BY-SA 3.0
licence_source: the test fixture
paper: release
mapping: {query: sentence1, positive: sentence2, score: score}
options: {min_score: 4.0}
""",
}

EVAL_TEXT = "Which planet is known as the red planet?"


def _readme(configs: dict[str, dict[str, str]]) -> str:
    lines = ["---", "configs:"]
    for name, splits in configs.items():
        lines += [f"- config_name: {name}", "  data_files:"]
        lines += [f"  - split: {split}\n    path: {path}" for split, path in splits.items()]
    return "\n".join(lines + ["---", ""])


def _parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_sources(root: Path) -> Path:
    """Hub-snapshot-shaped copies of five sources under `root/<source>`; returns root."""
    allnli = root / "allnli"
    _parquet(
        allnli / "triplet" / "train-00000-of-00001.parquet",
        [
            {
                "anchor": "A man is playing a guitar.",
                "positive": "A person plays music.",
                "negative": "Nobody plays.",
            },
            {
                "anchor": "Two dogs run in a field.",
                "positive": "Animals are running.",
                "negative": "A cat sleeps.",
            },
            {"anchor": "  A   woman  reads ", "positive": "Someone is reading a book.", "negative": ""},
            {"anchor": "", "positive": "Empty anchors are dropped.", "negative": "x y z"},
            {"anchor": "Same text twice.", "positive": "same text, twice", "negative": "other"},
            {"anchor": "ok", "positive": "Too short a query is dropped.", "negative": "n"},
            {"anchor": EVAL_TEXT, "positive": "Mars is called the red planet.", "negative": "Venus is hot."},
        ],
    )
    (allnli / "README.md").write_text(_readme({"triplet": {"train": "triplet/train-*"}}))

    gooaq = root / "gooaq"
    _parquet(
        gooaq / "triplet-5" / "train-00000-of-00001.parquet",
        [
            {
                "question": "how long do cats live?",
                "answer": "Indoor cats usually live 12 to 18 years.",
                **{f"negative_{i}": f"Dogs live about {8 + i} years." for i in range(1, 6)},
            },
            # The same pair as the first allnli row, with other spacing and punctuation: a cross-source dup.
            {
                "question": "a man is playing a guitar",
                "answer": "A person plays music!",
                **{f"negative_{i}": f"negative {i}" for i in range(1, 6)},
            },
        ],
    )
    (gooaq / "README.md").write_text(_readme({"triplet-5": {"train": "triplet-5/train-*"}}))

    # mteb retrieval repositories: corpus, queries and qrels configs of parquet files.
    msmarco = root / "msmarco"
    _parquet(
        msmarco / "corpus" / "corpus-00000-of-00001.parquet",
        [
            {"_id": "d1", "title": "", "text": "The capital of France is Paris."},
            {"_id": "d2", "title": "", "text": "Photosynthesis turns light into chemical energy."},
            {"_id": "d3", "title": "", "text": "An unrelated passage that no qrel names."},
        ],
    )
    _parquet(
        msmarco / "queries" / "queries-00000-of-00001.parquet",
        [{"_id": "q1", "text": "capital of france"}, {"_id": "q2", "text": "what is photosynthesis"}],
    )
    _parquet(
        msmarco / "qrels" / "train-00000-of-00001.parquet",
        [
            {"query-id": "q1", "corpus-id": "d1", "score": 1},
            {"query-id": "q2", "corpus-id": "d2", "score": 1},
            {"query-id": "q2", "corpus-id": "d3", "score": 0},
        ],
    )
    (msmarco / "README.md").write_text(
        _readme(
            {
                "corpus": {"corpus": "corpus/corpus-*"},
                "queries": {"queries": "queries/queries-*"},
                "default": {"train": "qrels/train-*"},
            }
        )
    )

    _jsonl(
        root / "qqp" / "train.jsonl",
        [
            {
                "set": {
                    "query": "How do I learn Python quickly?",
                    "pos": ["What is the fastest way to learn Python?"],
                    "neg": ["How do I learn Java?", "Is Python slow?"],
                }
            },
            {"set": {"query": "A row without positives is malformed.", "pos": [], "neg": []}},
        ],
    )
    _jsonl(
        root / "sts" / "train.jsonl",
        [
            {"sentence1": "A plane is taking off.", "sentence2": "An air plane is taking off.", "score": 5.0},
            {"sentence1": "A man is slicing a tomato.", "sentence2": "A dog barks at a car.", "score": 0.4},
        ],
    )
    return root


def write_manifests(root: Path, names=None, overrides: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in {**MANIFESTS, **(overrides or {})}.items():
        if names is None or name in names:
            (root / f"{name}.yaml").write_text(text.lstrip())
    return root
