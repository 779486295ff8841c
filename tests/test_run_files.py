"""Run files: atomic writes and the JSONL log, without the Trainer."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from neoembed.run_files import append_jsonl, write_json, write_parquet, write_text


def test_atomic_writes_replace_the_file_and_a_failed_write_keeps_the_old_one(tmp_path):
    path = tmp_path / "result.json"
    write_json(path, {"b": 1, "a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    with pytest.raises(TypeError):
        write_json(path, {"a": object()})  # not serialisable: fails before anything is renamed
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    write_text(path, "replaced")
    write_parquet(tmp_path / "t.parquet", pa.table({"x": [1, 2, 3]}))
    assert path.read_text() == "replaced" and pq.read_table(tmp_path / "t.parquet")["x"].to_pylist() == [
        1,
        2,
        3,
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json", "t.parquet"]  # no temporary files


def test_append_jsonl_adds_one_line_per_record(tmp_path):
    for step in (1, 2):
        append_jsonl(tmp_path / "log.jsonl", {"step": step, "text": "é"})
    lines = (tmp_path / "log.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 1, "text": "é"}, {"step": 2, "text": "é"}]


def test_writing_a_run_file_does_not_import_the_trainer(tmp_path):
    code = (
        "import sys, pathlib; from neoembed.run_files import write_json; "
        f"write_json(pathlib.Path({str(tmp_path / 'x.json')!r}), {{'a': 1}}); "
        "print('transformers.trainer' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "False\n"
