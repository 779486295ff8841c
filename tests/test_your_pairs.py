"""Your own pairs in: a file as typed builds, trains and is refused with one line naming the file and line."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.data import BuildConfig, build, is_pairs_path, load_records, open_pairs
from neoembed.data.normalize import text_key
from neoembed.data.pairs_file import HOLDOUT_EVERY, is_held_out, parse_column_map

runner = CliRunner()

# A pair a row as sentence-transformers names the columns; distinct enough that dedup drops none.
PAIRS = [
    {
        "anchor": f"what does the word {w} mean",
        "positive": f"{w}: a term of the {d} trade, used since {1800 + i}",
    }
    for i, (w, d) in enumerate(
        (f"w{i}x", ("tanning", "milling", "weaving", "brewing", "masonry")[i % 5]) for i in range(80)
    )
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_csv(path, rows, columns=("anchor", "positive"), delimiter=","):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(columns)
        writer.writerows([[row.get(c, "") for c in columns] for row in rows])
    return path


def records(out):
    """The build's rows as plain tuples, in order."""
    (table,) = load_records(out).values()
    return [(r["query"], r["positive"], tuple(r["negatives"]), r["query_key"]) for r in table]


def build_pairs(path, out, **fields):
    result = build(BuildConfig(out=out, pairs=(path,), mine=False, **fields))
    assert result is not None
    return result


def test_jsonl_csv_tsv_parquet_json_folder_and_saved_dataset_give_the_same_build(tmp_path):
    from datasets import Dataset

    jsonl = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    expected = records(build_pairs(jsonl, tmp_path / "from-jsonl").out)
    assert len(expected) == len([p for p in PAIRS if not is_held_out(text_key(p["anchor"]))])

    (tmp_path / "csv").mkdir()
    (tmp_path / "folder").mkdir()
    write_jsonl(tmp_path / "folder" / "a.jsonl", PAIRS[:30])
    write_jsonl(tmp_path / "folder" / "b.jsonl", PAIRS[30:])
    (tmp_path / "array").mkdir()
    (tmp_path / "array" / "pairs.json").write_text(json.dumps(PAIRS), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(PAIRS), tmp_path / "pairs.parquet")
    Dataset.from_list(PAIRS).save_to_disk(str(tmp_path / "saved"))
    inputs = {
        "csv": write_csv(tmp_path / "csv" / "pairs.csv", PAIRS),
        "tsv": write_csv(tmp_path / "pairs.tsv", PAIRS, delimiter="\t"),
        "json array": tmp_path / "array" / "pairs.json",
        "parquet": tmp_path / "pairs.parquet",
        "folder": tmp_path / "folder",
        "saved dataset": tmp_path / "saved",
    }
    for name, path in inputs.items():
        assert is_pairs_path(path), name
        assert records(build_pairs(path, tmp_path / f"out-{name}").out) == expected, name
    assert not is_pairs_path(tmp_path / "from-jsonl")  # a build is read as a build
    (tmp_path / "from-jsonl" / "stats.json").unlink()
    assert not is_pairs_path(tmp_path / "from-jsonl")  # and an unfinished one, which the recipe resumes


def test_the_first_line_counts_every_drop_and_names_the_first_rows(tmp_path):
    rows = [*PAIRS, {"anchor": "   ", "positive": "blank anchor"}, {"anchor": "no positive here"}]
    kept_pair = next(p for p in PAIRS if not is_held_out(text_key(p["anchor"])))
    rows.append(dict(kept_pair))  # a duplicate of a trained row
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    result = runner.invoke(
        app, ["build-data", "--from", str(path), "--out", str(tmp_path / "o"), "--no-mine"]
    )
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    held = [i for i, p in enumerate(PAIRS, 1) if is_held_out(text_key(p["anchor"]))]
    kept = len(PAIRS) - len(held)
    assert first.startswith(f"mine: 83 rows read, {kept} kept, {83 - kept} dropped: ")
    assert "1 missing a column (mine.jsonl:82)" in first
    assert "1 empty (mine.jsonl:81)" in first
    named = ", ".join(f"mine.jsonl:{line}" for line in held[:3])
    assert f"{len(held)} held out for testing ({named}, ...)" in first
    assert "1 duplicated (mine.jsonl:83)" in first


def test_build_data_reads_your_file_whole(tmp_path):
    """The command line's CPU-friendly caps (WordNet, 10,000 rows) are for manifests: your file is read whole."""
    many = [
        {"anchor": f"question number {i}", "positive": f"answer number {i} of many"} for i in range(10_050)
    ]
    path = write_jsonl(tmp_path / "many.jsonl", many)
    result = runner.invoke(
        app, ["build-data", "--from", str(path), "--out", str(tmp_path / "o"), "--no-mine"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("many: 10,050 rows read")
    both = runner.invoke(
        app, ["build-data", "--from", str(path), "--sources", "wordnet", "--out", str(tmp_path / "x")]
    )
    assert both.exit_code == 2 and "with pairs files (--from) the files are the sources" in both.output


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        (
            "bad.jsonl",
            b'{"anchor": "a b", "positive": "c d"}\n{"anchor": "x", positive}\n',
            "bad.jsonl:2: not a JSON object",
        ),
        (
            "bad.jsonl",
            b'{"anchor": "a b", "positive": "c d"}\n["a list"]\n',
            "bad.jsonl:2: a JSON list, not an object",
        ),
        ("bad.csv", b"anchor,positive\nab,cd\nef,gh,ij\n", "bad.csv:3: 3 fields where the header has 2"),
        (
            "bad.tsv",
            b"anchor\tpositive\nab\tcd\n\xe9t\xe9\tsummer\n",
            "bad.tsv:3: not UTF-8 (byte 0xe9 at column 1)",
        ),
        (
            "bad.jsonl",
            b'{"anchor": "", "positive": "c d"}\n{"anchor": "x y"}\n',
            "bad.jsonl: no usable pair: 2 rows read",
        ),
        ("bad.jsonl", b'{"question": "a b", "answer": "c d"}\n', "its columns are ['question', 'answer']"),
        (
            "bad.json",
            b'[{"anchor": "a b", "positive": "c d"},\n {"anchor": }]\n',
            "bad.json:2: not valid JSON",
        ),
        ("bad.txt", b"a line\n", "not a pairs file"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_line_exit_2_nothing_written(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_bytes(content)
    out = tmp_path / "runs" / "built"
    result = runner.invoke(app, ["build-data", "--from", str(path), "--out", str(out), "--no-mine"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("neoembed build-data:")]
    assert len(errors) == 1 and says in errors[0], result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()  # nothing written, not even the parent made for the output


def test_contrastive_refuses_a_bad_file_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"anchor,positive\nab,cd\nef,gh,ij\n")
    result = runner.invoke(app, ["contrastive", "--data.path", str(bad), "--train.output_dir", "runs/c"])
    assert result.exit_code == 2 and "bad.csv:3: 3 fields where the header has 2" in result.output
    assert not (tmp_path / "runs").exists()


def test_columns_map_other_names_and_an_unknown_one_lists_the_columns(tmp_path):
    rows = [
        {"question": r["anchor"], "answer": r["positive"], "wrong": PAIRS[-1 - i]["positive"]}
        for i, r in enumerate(PAIRS[:40])
    ]
    path = write_jsonl(tmp_path / "qa.jsonl", rows)
    mapped = open_pairs(path, parse_column_map("query=question,positive=answer,negatives=wrong"))
    assert mapped.mapping == {"query": ("question",), "positive": ("answer",), "negatives": ("wrong",)}
    out = build_pairs(path, tmp_path / "o", columns="query=question,positive=answer,negatives=wrong").out
    assert all(len(negatives) == 1 for _, _, negatives, _ in records(out))
    result = runner.invoke(
        app,
        [
            "build-data",
            "--from",
            str(path),
            "--columns",
            "query=title,positive=answer",
            "--out",
            str(tmp_path / "x"),
        ],
    )
    assert result.exit_code == 2
    assert "--columns query=title: no such column; it has ['question', 'answer', 'wrong']" in result.output


def test_sentence_transformers_negative_columns_are_read_in_order(tmp_path):
    rows = [
        {
            "anchor": "alpha query",
            "positive": "alpha doc",
            "negative_2": "second neg",
            "negative_1": "first neg",
        }
    ]
    pairs = open_pairs(write_jsonl(tmp_path / "n.jsonl", rows))
    assert pairs.mapping["negatives"] == ("negative_1", "negative_2")
    (batch,) = pairs.batches()
    assert batch.columns["negatives"] == [["first neg", "second neg"]]


def test_the_held_out_split_is_one_anchor_in_ten_by_key_and_never_built(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    out = build_pairs(path, tmp_path / "o").out
    trained = {query for query, *_ in records(out)}
    held = {r["anchor"] for r in PAIRS if is_held_out(text_key(r["anchor"]))}
    assert held and not held & trained
    assert 0.03 < len(held) / len(PAIRS) < 0.2  # about 1 in HOLDOUT_EVERY
    everything = records(build_pairs(path, tmp_path / "all", holdout=False).out)
    assert len(everything) == len(PAIRS) and HOLDOUT_EVERY == 10


def test_contrastive_trains_on_a_csv_and_builds_it_once(tmp_path, monkeypatch):
    from neoembed.contrastive import ContrastiveSettings
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import load_recipe, parse_overrides
    from neoembed.workflow import ensure_data

    monkeypatch.chdir(tmp_path)
    csv_path = write_csv(tmp_path / "pairs.csv", PAIRS)
    result = runner.invoke(
        app,
        [
            "contrastive", "--data.path", str(csv_path), "--steps", "2", "--train.batch_size", "8",
            "--train.log_steps", "1", "--train.save_steps", "2", "--train.eval_steps", "2", "--eval.sets", "[]",
            "--train.output_dir", "runs/c", "--export.path", "embed",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "data " + str(csv_path) + " (your pairs, built first into runs/c/data/pairs-" in lines[0]
    # the recipe's guard, named with a flag that releases it
    assert "guard distillation from the base model (weight 0.5) keeps the model near its base" in lines[0]
    release = lines[0].split("against forgetting; ")[1].split(" to train on your pairs alone")[0].split()
    released = load_recipe(resolve_recipe("contrastive-cpu"), ContrastiveSettings, parse_overrides(release))
    assert released.loss.distill is None and released.loss.trained_kind == "infonce"
    assert any(line.startswith("held-out pairs: ndcg@10 ") for line in lines)  # its own test split, scored
    assert (tmp_path / "embed" / "modules.json").is_file()
    (built,) = (tmp_path / "runs" / "c" / "data").iterdir()

    # The same pairs as JSON lines are the same build: the records a jsonl trains on are the csv's.
    jsonl = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    settings = load_recipe(
        resolve_recipe("contrastive-cpu"),
        ContrastiveSettings,
        {"data.path": str(jsonl), "train.output_dir": "runs/j"},
    )
    resolved = ensure_data(settings, print)
    assert records(resolved.data.path) == records(built)
    stamp = (tmp_path / resolved.data.path / "stats.json").stat().st_mtime_ns
    again = ensure_data(settings, print)  # a re-run reuses the build of the same content
    assert again.data.path == resolved.data.path
    assert (tmp_path / again.data.path / "stats.json").stat().st_mtime_ns == stamp
    assert [s.label for s in again.eval.sets] == ["pairs", "wordnet", "foldoc"]
