"""build-data without mining: manifests, mapping of real source shapes, filters, dedup, leakage, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from data_source_fixtures import EVAL_TEXT, write_manifests, write_sources
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.data.build import Build, BuildConfig, build
from neoembed.data.manifest import ManifestError, load_manifest, load_manifests
from neoembed.data.normalize import text_key

REPO = Path(__file__).resolve().parents[1]
RELEASE_SOURCES = {
    "allnli", "amazonqa", "concurrentqa", "fever", "githubissues", "gooaq", "msmarco", "paq", "pubmedqa", "qqp",
    "sentencecompression", "stackexchange-body", "stackexchange-post", "stackoverflowdupquestions", "sts12",
    "stsbenchmark", "triviaqa", "wikihow",
}  # fmt: skip
PAPER_SOURCES = {"agnews", "npr", "medmcqa", "yahooanswers"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("sources"))


@pytest.fixture
def config(tmp_path, sources):
    eval_file = tmp_path / "eval.txt"
    eval_file.write_text(EVAL_TEXT.upper() + "\n")  # normalised match: case does not hide leakage
    return BuildConfig(
        manifests=write_manifests(tmp_path / "manifests"),
        out=tmp_path / "out",
        local_data=sources,
        eval_texts=(eval_file,),
        rows_per_shard=2,
        mine=False,
    )


def read_source(out: Path, name: str) -> list[dict]:
    return [r for p in sorted((out / name).glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]


def test_repository_manifests_cover_every_source_and_validate():
    manifests = load_manifests(REPO / "data_manifests")
    debian = {"wordnet", "manpages", "packages"}  # the sources read from Debian's mirror
    assert set(manifests) == RELEASE_SOURCES | PAPER_SOURCES | debian
    assert {n for n, (m, _) in manifests.items() if m.paper == "paper"} == PAPER_SOURCES
    assert manifests["sts12"][0].options.min_score == 4.0
    assert manifests["gooaq"][0].mapping.negatives == [f"negative_{i}" for i in range(1, 6)]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ("unknown_field: 1\n", "field unknown_field: unknown field"),
        ("mapping: {query: anchor, positive: 'pos[x'}\n", "field mapping.positive"),
        ("options: {min_chars: many}\n", "field options.min_chars"),
        ("mapping: {query: a, positive: p, group: g, relations: [h]}\n", "relations or group"),
        ("mapping: {query: a, positive: p, relations: [h, h]}\n", "field mapping.relations: "),
    ],
)
def test_manifest_errors_name_file_and_field(tmp_path, edit, field):
    text = "name: bad\ndescription: d\ndataset: a/b\nlicence: l\nlicence_source: s\npaper: release\n"
    if not edit.startswith("mapping"):
        text += "mapping: {query: anchor, positive: positive}\n"
    path = tmp_path / "bad.yaml"
    path.write_text(text + edit)
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_a_single_group_column_is_read_as_one_relation(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(
        "name: old\ndescription: d\ndataset: a/b\nlicence: l\nlicence_source: s\npaper: release\n"
    )
    with path.open("a") as fh:
        fh.write("mapping: {query: q, positive: p, group: thread}\n")
    assert load_manifest(path)[0].mapping.relations == ["thread"]


def test_missing_column_names_manifest_and_field(tmp_path, sources):
    bad = "name: allnli\ndescription: d\ndataset: x/y\nconfig: triplet\nlicence: l\nlicence_source: s\npaper: release\n"
    bad += "mapping: {query: anchor, positive: answer}\n"
    cfg = BuildConfig(
        manifests=write_manifests(tmp_path / "m", ["allnli"], {"allnli": bad}),
        out=tmp_path / "out",
        local_data=sources,
        mine=False,
    )
    with pytest.raises(ManifestError, match=r"manifest allnli: field mapping\.positive: .*'answer'"):
        build(cfg)


def test_maps_real_source_shapes_and_counts_every_drop(config):
    stats = build(config).stats
    allnli = read_source(config.out, "allnli")
    texts, keys = ("query", "positive", "negatives", "source"), ("query_key", "positive_key", "negative_keys")
    assert {k: allnli[0][k] for k in texts} == {
        "query": "A man is playing a guitar.",
        "positive": "A person plays music.",
        "negatives": ["Nobody plays."],
        "source": "allnli",
    }
    # every text's identity is stored beside it
    assert [allnli[0][k] for k in keys] == [
        text_key("A man is playing a guitar."),
        text_key("A person plays music."),
        [text_key("Nobody plays.")],
    ]
    assert (
        allnli[2]["query"] == "A woman reads" and allnli[2]["negatives"] == []
    )  # cleaned, empty negative gone
    dropped = stats["sources"]["allnli"]["dropped"]
    assert (dropped["empty"], dropped["same_as_query"], dropped["too_short"], dropped["leakage"]) == (
        1,
        1,
        1,
        1,
    )
    assert stats["sources"]["allnli"]["kept"] == len(allnli) == 3

    (gooaq,) = read_source(config.out, "gooaq")
    assert gooaq["negatives"] == [f"Dogs live about {8 + i} years." for i in range(1, 6)]
    assert stats["sources"]["gooaq"]["dropped"]["duplicate"] == 1  # same pair as allnli, other punctuation

    msmarco = read_source(config.out, "msmarco")
    assert [(r["query"], r["positive"]) for r in msmarco] == [
        ("capital of france", "The capital of France is Paris."),
        ("what is photosynthesis", "Photosynthesis turns light into chemical energy."),
    ]  # the score-0 qrel is not a positive

    (qqp,) = read_source(config.out, "qqp")
    assert qqp["positive"] == "What is the fastest way to learn Python?"
    assert qqp["negatives"] == ["How do I learn Java?", "Is Python slow?"]
    assert stats["sources"]["qqp"]["dropped"]["malformed"] == 1
    assert stats["sources"]["qqp"]["malformed_example"] == {
        "where": "row 1",
        "error": "set.pos[0]: no element [0]",
    }

    assert [r["query"] for r in read_source(config.out, "sts")] == ["A plane is taking off."]
    assert stats["sources"]["sts"]["dropped"]["low_score"] == 1
    assert stats["total"]["rows_out"] == sum(s["rows_out"] for s in stats["sources"].values()) == 8
    markdown = (config.out / "stats.md").read_text()
    assert "| allnli | 7 |" in markdown and "set.pos[0]: no element [0]" in markdown


def test_rebuild_is_byte_identical(config, tmp_path):
    build(config)
    again = BuildConfig(**{**config.__dict__, "out": tmp_path / "again"})
    build(again)
    files = sorted(p.relative_to(config.out) for p in config.out.rglob("*") if p.is_file())
    files = [f for f in files if f.name != "build.jsonl"]  # the log holds timings
    assert any(f.suffix == ".parquet" for f in files)
    for f in files:
        assert (config.out / f).read_bytes() == (again.out / f).read_bytes(), f


@pytest.mark.faults
def test_resumes_after_a_crash_without_losing_or_duplicating_rows(config, tmp_path, monkeypatch):
    reference = build(BuildConfig(**{**config.__dict__, "out": tmp_path / "reference"})).stats
    original = Build.build_unit
    calls = []

    def crash_on_fourth(self, unit):
        calls.append(unit)
        if len(calls) == 4:
            raise KeyboardInterrupt  # as if killed while building the fourth part
        original(self, unit)

    monkeypatch.setattr(Build, "build_unit", crash_on_fourth)
    with pytest.raises(KeyboardInterrupt):
        build(config)
    assert not (config.out / "stats.json").exists()
    first = config.out / calls[0].path
    mtime = first.stat().st_mtime_ns
    # A kill mid-write leaves a temporary file and possibly a part without its marker: both are redone.
    (config.out / calls[1].path).with_suffix(".json").unlink()
    (config.out / calls[1].path.parent / f".{calls[1].path.name}.tmp999").write_bytes(b"partial")

    monkeypatch.setattr(Build, "build_unit", original)
    resumed = build(config).stats
    assert resumed == reference
    assert first.stat().st_mtime_ns == mtime  # finished parts are not rebuilt
    for name in reference["sources"]:
        assert read_source(config.out, name) == read_source(tmp_path / "reference", name)


@pytest.mark.faults
def test_a_part_replaced_by_another_builds_part_is_refused_for_training_and_built_again(config, tmp_path):
    from neoembed.data.records import RecordsError, load_records

    stats = build(config).stats
    other = build(BuildConfig(**{**config.__dict__, "out": tmp_path / "other", "rows_per_shard": 3})).stats
    assert stats["sources"]["allnli"]["part_checksums"] != other["sources"]["allnli"]["part_checksums"]
    part = config.out / "allnli" / "part-00000.parquet"
    rows = read_source(config.out, "allnli")
    shutil.copy(tmp_path / "other" / "allnli" / "part-00000.parquet", part)  # a valid part, other rows
    with pytest.raises(RecordsError, match="part-00000.parquet is damaged or replaced"):
        load_records(config.out)
    assert build(config).stats == stats  # the same build again notices and writes the part anew
    assert read_source(config.out, "allnli") == rows
    assert len(load_records(config.out)["allnli"]) == stats["sources"]["allnli"]["rows_out"]


def test_shards_split_the_units_and_merge_to_the_same_result(config, tmp_path):
    reference = build(BuildConfig(**{**config.__dict__, "out": tmp_path / "reference"})).stats
    assert build(BuildConfig(**{**config.__dict__, "shard": (0, 2)})) is None  # half the units: no stats yet
    merged = build(BuildConfig(**{**config.__dict__, "shard": (1, 2)})).stats
    assert merged == reference


def test_cli_builds_and_reports_errors(config, tmp_path):
    runner = CliRunner()
    args = ["build-data", "--manifests", str(config.manifests), "--out", str(config.out), "--sources", "all"]
    args += ["--local-data", str(config.local_data), "--no-mine", "--max-rows", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads((config.out / "stats.json").read_text())["total"]["rows_read"] == 15

    result = runner.invoke(app, [*args[:5], "--sources", "nope"])
    assert result.exit_code == 2 and "unknown source(s) ['nope']" in result.output


def test_load_records_reads_a_finished_build(config):
    from neoembed.data.records import RecordsError, load_records

    with pytest.raises(RecordsError, match="no stats.json"):
        load_records(config.out)
    stats = build(config).stats
    records = load_records(config.out)
    assert {n: len(d) for n, d in records.items()} == {n: s["rows_out"] for n, s in stats["sources"].items()}
    assert records["qqp"].column_names == [
        *("query", "positive", "negatives", "source"),
        *("query_key", "positive_key", "negative_keys"),
    ]
    assert records["qqp"][0]["negatives"] == ["How do I learn Java?", "Is Python slow?"]
    with pytest.raises(RecordsError, match="not in this build"):
        load_records(config.out, ["nope"])


def test_unreachable_hub_source_says_how_to_build_offline(tmp_path):
    from neoembed.data.sources import SourceError

    cfg = BuildConfig(manifests=write_manifests(tmp_path / "m", ["gooaq"]), out=tmp_path / "out", mine=False)
    with pytest.raises(
        SourceError,
        match=r"source gooaq: cannot load hub dataset tomaarsen/gooaq-hard-negatives .*--local-data",
    ):
        build(cfg)


def test_negatives_that_are_evaluation_texts_are_dropped_and_counted():
    from neoembed.data.normalize import Limits, clean, clean_negatives, text_key

    limits = Limits(min_chars=1, max_chars=1000, min_score=None)
    leak_keys = {text_key(clean("A passage from the MTEB test set."))}
    given = ["a passage from the MTEB TEST set.", "Another passage.", "Another passage."]
    kept, leaked, _ = clean_negatives(given, query_key=1, positive_key=2, limits=limits, leak_keys=leak_keys)
    assert kept == ["Another passage."] and leaked == 1


DICTIONARY = """
name: dictionary
description: a term -> definition source
dataset: some/dictionary
licence: l
licence_source: s
paper: release
mapping: {query: term, positive: definition, negatives: [other]}
"""


def dictionary_build(root: Path, rows: list[dict]) -> BuildConfig:
    path = root / "local" / "dictionary" / "train.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    manifests = write_manifests(root / "manifests", ["dictionary"], {"dictionary": DICTIONARY})
    return BuildConfig(manifests=manifests, out=root / "out", local_data=root / "local", mine=False)


def test_foldoc_held_out_texts_in_a_training_source_are_dropped_and_counted(tmp_path):
    from neoembed.data.foldoc import foldoc_retrieval

    queries, corpus, _ = foldoc_retrieval()
    term = next(t for t in queries.values() if len(t) >= 12)  # long enough to pass the length filter
    definition, other_definition = corpus["f1"], corpus["f2"]
    config = dictionary_build(
        tmp_path,
        [
            {"term": "what is this?", "definition": definition.upper() + "!", "other": "A kept negative."},
            {"term": term, "definition": "Written elsewhere, not by FOLDOC.", "other": "A negative."},
            {"term": "what is a cat?", "definition": "A small feline.", "other": other_definition},
        ],
    )
    stats = build(config).stats
    source = stats["sources"]["dictionary"]
    assert source["dropped"]["leakage"] == 2
    assert source["rows_dropped_for_leakage"] == {"foldoc": 2, "eval_texts": 0}
    assert source["negatives_dropped_for_leakage"] == 1
    assert stats["config"]["guarded_texts"]["foldoc"] > 1500
    (row,) = read_source(config.out, "dictionary")
    assert (row["query"], row["positive"], row["negatives"]) == ("what is a cat?", "A small feline.", [])
    assert "foldoc 2 (" in (config.out / "stats.md").read_text()


def test_a_change_of_the_guarded_texts_rebuilds_what_it_affects(tmp_path, monkeypatch):
    import neoembed.data.leakage

    rows = [{"term": f"question {i}", "definition": f"Answer number {i}.", "other": "n"} for i in range(3)]
    config = dictionary_build(tmp_path, rows)
    assert build(config).stats["sources"]["dictionary"]["kept"] == 3
    guarded = neoembed.data.leakage.heldout_texts()
    monkeypatch.setattr(neoembed.data.leakage, "heldout_texts", lambda: [*guarded, "Answer number 1."])
    stats = build(
        config
    ).stats  # the same output directory: a resume, were the fingerprint blind to the guard
    assert stats["sources"]["dictionary"]["rows_dropped_for_leakage"]["foldoc"] == 1
    assert [r["query"] for r in read_source(config.out, "dictionary")] == ["question 0", "question 2"]


# Variants of one evaluation text that a reader sees as the same: invisible format characters, a byte-order
# mark, fullwidth letters, case, punctuation and spacing. Each must leak into no build.
EVALUATION_TEXT = "A compiler translates source code into machine code."
VARIANTS = [
    "A com\u200bpiler translates source code into machine code.",  # zero-width space inside a word
    "\ufeffA compiler translates source code into machine code.",  # leading byte-order mark
    "Ａ ｃｏｍｐｉｌｅｒ ｔｒａｎｓｌａｔｅｓ ｓｏｕｒｃｅ ｃｏｄｅ ｉｎｔｏ ｍａｃｈｉｎｅ ｃｏｄｅ．",  # fullwidth
    "a COMPILER translates source code into machine code",
    "A compiler  translates source-code into machine code!",
    "A com\u00adpiler translates source code into ma\u200dchine code.",  # soft hyphen, zero-width joiner
    "A com\u034fpiler translates source code into machine code.",  # combining grapheme joiner
    "A compiler\ufe0f translates source code into machine code.",  # variation selector
    "A comp\u3164iler translates source code into mach\uffa0ine code.",  # Hangul fillers
    "A compiler\u2800translates source code into machine code.",  # Braille blank between words
    "A compiler translates source code into machine code.",
]


@pytest.mark.faults
def test_every_variant_of_an_evaluation_text_has_its_key_and_is_kept_out(tmp_path):
    from neoembed.data.normalize import text_key

    assert {text_key(v) for v in VARIANTS} == {text_key(EVALUATION_TEXT)}
    assert text_key("A compiler translates source code into assembly.") != text_key(EVALUATION_TEXT)
    eval_file = tmp_path / "eval.txt"
    eval_file.write_text(EVALUATION_TEXT + "\n")
    rows = [
        {"term": f"what does tool {i} do?", "definition": v, "other": "n"} for i, v in enumerate(VARIANTS)
    ]
    rows.append({"term": "what is a cat?", "definition": "A small feline.", "other": "n"})
    config = dictionary_build(tmp_path, rows)
    stats = build(BuildConfig(**{**config.__dict__, "eval_texts": (eval_file,)})).stats
    assert stats["sources"]["dictionary"]["rows_dropped_for_leakage"]["eval_texts"] == len(VARIANTS)
    assert [r["query"] for r in read_source(config.out, "dictionary")] == ["what is a cat?"]


@pytest.mark.faults
def test_variants_of_one_pair_are_kept_once(tmp_path):
    rows = [{"term": "what does a compiler do?", "definition": v, "other": "n"} for v in VARIANTS]
    stats = build(dictionary_build(tmp_path, rows)).stats
    assert stats["sources"]["dictionary"]["dropped"]["duplicate"] == len(VARIANTS) - 1


@pytest.mark.faults
def test_every_character_that_draws_nothing_is_dropped_from_the_key_and_every_blank_is_a_space():
    import unicodedata

    import regex

    from neoembed.data.normalize import text_key

    # Default_Ignorable_Code_Point (4,174 code points in Unicode 16) and every format character (Cf) that
    # Python's own Unicode tables know, whichever Unicode version the regex package carries
    ignorable = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    invisible = [
        chr(cp) for cp in range(0x110000) if ignorable.match(chr(cp)) or unicodedata.category(chr(cp)) == "Cf"
    ]
    assert len(invisible) > 4000
    word = text_key("compiler")
    assert [hex(ord(c)) for c in invisible if text_key(f"comp{c}iler") != word] == []
    # blank look-alikes that are not ignorable: no-break and typographic spaces, the ideographic space, Braille
    # two more that draw nothing, though no Unicode property says so
    assert text_key("comp\u2d7fil\U0001d159er") == word
    blanks = ["\u00a0", "\u2007", "\u202f", "\u205f", "\u3000", "\u2800", "\u1680"]
    assert {text_key(f"source{b}code") for b in blanks} == {text_key("source code")}
    assert text_key("sourcecode") != text_key("source code")


@pytest.mark.faults
@pytest.mark.parametrize("nothing", ["\u2800", "\u2d7f", "\U0001d159", "\u200b", "\u2800 \U0001d159"])
def test_a_text_that_shows_nothing_is_empty_though_clean_keeps_it(nothing):
    from neoembed.data.normalize import Limits, check, clean, clean_negatives, text_key

    limits = Limits(min_chars=1, max_chars=100, min_score=None)
    text = clean(nothing * 3)
    assert text  # not whitespace to str.split: clean alone would store it
    query, key = "what is a compiler?", text_key("what is a compiler?")
    assert check(query, text, key, text_key(text), None, limits) == "empty"
    assert check(text, query, text_key(text), key, None, limits) == "empty"
    assert clean_negatives([nothing * 3, "a real negative"], key, 0, limits)[0] == ["a real negative"]
