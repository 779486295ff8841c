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


def _text(source: str, what: str, i: int) -> str:
    return f"{source} {what} number {i}."


def _rows_of(source: str, shape) -> list[dict]:
    return [shape(lambda what, i=i: _text(source, what, i)) for i in range(2)]


# Every repository manifest's source (WordNet aside: tests/test_data_wordnet.py) in the shape its hub dataset
# has: name -> (config folder or None, file format, row shape). A row's texts are "<source> <what> number <i>."
REPOSITORY_SHAPES = {
    "agnews": ("pair", "parquet", lambda t: {"title": t("title"), "description": t("description")}),
    "allnli": (
        "triplet",
        "parquet",
        lambda t: {"anchor": t("anchor"), "positive": t("positive"), "negative": t("negative")},
    ),
    "amazonqa": (None, "jsonl", lambda t: {"query": t("query"), "pos": [t("pos"), t("second pos")]}),
    "concurrentqa": (
        None,
        "jsonl",
        lambda t: {
            "question": t("question"),
            "pos_paras": [{"title": "T", "text": t("pos para")}, {"title": "U", "text": t("second para")}],
            "neg_paras": [{"title": "N", "text": t("neg para a")}, {"title": "M", "text": t("neg para b")}],
        },
    ),
    "githubissues": ("positive", "parquet", lambda t: {"anchor": t("anchor"), "positive": t("positive")}),
    "gooaq": (
        "triplet-5",
        "parquet",
        lambda t: {
            "question": t("question"),
            "answer": t("answer"),
            **{f"negative_{k}": t(f"negative {k}") for k in range(1, 6)},
        },
    ),
    "medmcqa": (
        None,
        "parquet",
        lambda t: {
            "id": "x",
            "question": t("question"),
            **{f"op{c}": t(f"option {c}") for c in "abcd"},
            "cop": 1,
            "choice_type": "single",
            "exp": t("exp"),
            "subject_name": "Anatomy",
            "topic_name": None,
        },
    ),
    "npr": ("pair", "parquet", lambda t: {"title": t("title"), "body": t("body")}),
    "paq": (None, "jsonl", lambda t: {"set": [t("question"), t("answer")]}),
    "pubmedqa": (
        "triplet-20",
        "parquet",
        lambda t: {
            "anchor": t("anchor"),
            "positive": t("positive"),
            **{f"negative_{k}": t(f"negative {k}") for k in range(1, 21)},
        },
    ),
    "qqp": (
        None,
        "jsonl",
        lambda t: {"set": {"query": t("query"), "pos": [t("pos")], "neg": [t("neg a"), t("neg b")]}},
    ),
    "sentencecompression": (None, "jsonl", lambda t: {"set": [t("original"), t("compressed")]}),
    "stackexchange-body": ("body-body-pair", "parquet", lambda t: {"body1": t("body1"), "body2": t("body2")}),
    "stackexchange-post": ("post-post-pair", "parquet", lambda t: {"post1": t("post1"), "post2": t("post2")}),
    "stackoverflowdupquestions": (
        None,
        "jsonl",
        lambda t: {"query": t("query"), "positive": [t("positive")], "negative": [t("neg a"), t("neg b")]},
    ),
    "sts12": (
        None,
        "jsonl",
        lambda t: {"sentence1": t("sentence1"), "sentence2": t("sentence2"), "score": 4.6},
    ),
    "stsbenchmark": (
        None,
        "jsonl",
        lambda t: {"sentence1": t("sentence1"), "sentence2": t("sentence2"), "score": 5.0},
    ),
    "triviaqa": (
        "triplet",
        "parquet",
        lambda t: {"anchor": t("anchor"), "positive": t("positive"), "negative": t("negative")},
    ),
    "wikihow": (None, "parquet", lambda t: {"text": t("text"), "summary": t("summary")}),
    "yahooanswers": ("title-answer-pair", "parquet", lambda t: {"title": t("title"), "answer": t("answer")}),
}


def write_repository_sources(root: Path) -> Path:
    """A local copy of every repository manifest's source (but WordNet) under `root/<source>`; returns root.

    A source with a config keeps it in a sub-folder of that name, as `--local-data` reads it; FEVER and MS
    MARCO are mteb retrieval repositories (corpus, queries, qrels configs named in a README).
    """
    for name, (config, fmt, shape) in REPOSITORY_SHAPES.items():
        folder = root / name / config if config else root / name
        write = _parquet if fmt == "parquet" else _jsonl
        write(folder / f"train.{fmt}", _rows_of(name, shape))
    for name, title in (("fever", "Page"), ("msmarco", "")):
        repo = root / name
        _parquet(
            repo / "corpus" / "corpus.parquet",
            [{"_id": f"d{i}", "title": title, "text": _text(name, "passage", i)} for i in range(3)],
        )
        _parquet(
            repo / "queries" / "queries.parquet",
            [{"_id": f"q{i}", "text": _text(name, "query", i)} for i in range(2)],
        )
        _parquet(
            repo / "qrels" / "train.parquet",
            [{"query-id": f"q{i}", "corpus-id": f"d{i}", "score": 1} for i in range(2)],
        )
        (repo / "README.md").write_text(
            _readme(
                {
                    "corpus": {"corpus": "corpus/*.parquet"},
                    "queries": {"queries": "queries/*.parquet"},
                    "default": {"train": "qrels/*.parquet"},
                }
            )
        )
    return root


# Debian's English description index (dists/<suite>/main/i18n/Translation-en), in its real shape: stanzas of
# Package, Description-md5 and Description-en (the synopsis, then continuation lines; " ." breaks paragraphs,
# a second leading space marks a verbatim line). Real stanzas, shortened, and cases the reader must skip.
TRANSLATION_EN = """\
Package: 0ad
Description-md5: d943033bedada21853d2ae54a2578a7b
Description-en: Real-time strategy game of ancient warfare
 0 A.D. (pronounced "zero ey-dee") is a free, open-source, cross-platform
 real-time strategy (RTS) game of ancient warfare.

Package: 0ad-data
Description-md5: 26581e685027d5ae84824362a4ba59ee
Description-en: Real-time strategy game of ancient warfare (data files)
 0 A.D. (pronounced "zero ey-dee") is a free, open-source, cross-platform
 real-time strategy (RTS) game of ancient warfare.
 .
 This package contains the main data files required by 0 A.D.

Package: 0xffff
Description-md5: 183c49f6505eb3432d1b069800f1f5b6
Description-en: Open Free Fiasco Firmware Flasher
 The 0xFFFF utility implements a free userspace handler for the NOLO
 bootloader and extended features for flashing Nokia Internet Tablets.
 .
 Supported operations currently include:
  * generating and unpacking FIASCO images on local device
  * editing Maemo firmware packages

Package: afl-clang
Description-md5: 0b2a4d6c0b1a8e4c5d3f2e1a0b9c8d7e
Description-en: transitional package
 This is a transitional package. It can safely be removed once afl++ is installed.

Package: minisat2
Description-md5: 1c3b5e7d2c4a6b8d0e2f4a6c8e0b2d4f
Description-en: transitional package
 This is a transitional package for minisat, and can be safely removed after
 the installation is complete.

Package: node-foo
Description-md5: 2d4c6e8f3d5b7c9e1f3a5b7d9f1c3e5a
Description-en: JSON without touching any globals
 Node.js is an event-based server-side JavaScript engine.

Package: tiny
Description-md5: 3e5d7f9a4e6c8d0f2a4b6c8e0a2d4f6b
Description-en: short
 A synopsis under eight characters makes no query worth training on.
"""


def write_translation(path: Path, compress: bool = True) -> Path:
    """The index above at `path`, xz-compressed (as the mirror serves Translation-en.xz) or plain."""
    import lzma

    data = TRANSLATION_EN.encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(lzma.compress(data, format=lzma.FORMAT_XZ) if compress else data)
    return path
