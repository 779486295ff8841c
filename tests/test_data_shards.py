"""build-data split across processes: the share each process builds (a flag, torchrun's ranks, a SLURM array,
a Kubernetes Indexed Job), and a split build equal row for row to one process's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from neoembed.data import BuildConfig, build
from neoembed.data.shards import Share, resolve_share, share_from_environment
from neoembed.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("environ", "share"),
    [
        ({}, None),
        ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, Share(1, 4, "torchrun")),
        ({"RANK": "0", "WORLD_SIZE": "1"}, None),  # one rank: nothing to split
        (
            {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_COUNT": "3"},
            Share(2, 3, "slurm"),
        ),
        ({"JOB_COMPLETION_INDEX": "2", "NEOEMBED_SHARDS": "8"}, Share(2, 8, "kubernetes")),
    ],
)
def test_the_launcher_or_scheduler_says_which_share_a_process_builds(environ, share):
    assert share_from_environment(environ) == share


def test_a_kubernetes_index_without_the_count_and_a_bad_share_are_clear_errors():
    with pytest.raises(InputError, match="set NEOEMBED_SHARDS to the Job's completions"):
        share_from_environment({"JOB_COMPLETION_INDEX": "0"})
    with pytest.raises(InputError, match="shard 3/3: expected 0 <= index < count"):
        resolve_share(None, {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "3"})
    assert resolve_share((1, 2), {"RANK": "0", "WORLD_SIZE": "4"}) == Share(1, 2, "flag")  # the flag wins


def rows(out: Path) -> list[dict]:
    return [r for p in sorted((out / "wordnet").glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]


def wordnet(out: Path, **fields) -> BuildConfig:
    return BuildConfig(out=out, sources=("wordnet",), max_rows=300, rows_per_shard=100, mine=False, **fields)


def test_array_jobs_each_build_their_share_and_the_last_writes_the_stats(tmp_path, monkeypatch):
    whole = build(wordnet(tmp_path / "whole"))
    for task in ("0", "1"):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", task)
        monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
        result = build(wordnet(tmp_path / "split"))
    assert result is not None and result.rows_out == whole.rows_out  # the last share merged
    assert rows(tmp_path / "split") == rows(tmp_path / "whole")
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    assert build(wordnet(tmp_path / "other", shard=(0, 2))) is None  # half the parts: no stats yet
    with pytest.raises(InputError, match=r"split into 2 shards and this run is shard 0/3"):
        build(wordnet(tmp_path / "other", shard=(0, 3)))


@pytest.mark.slow
def test_two_gloo_ranks_build_and_mine_the_same_rows_as_one_process(tmp_path):
    """torchrun with 2 ranks: the first stages the sources, each rank encodes and mines its parts (each part
    against its whole pool, as one process does), the first merges; the parts are byte for byte the same."""
    args = ["build-data", "--max-rows", "400", "--rows-per-shard", "100", "--batch-size", "32"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    single = [sys.executable, "-m", "neoembed", *args, "--out", str(tmp_path / "single")]
    subprocess.run(single, env=env, check=True, capture_output=True, timeout=900)
    ranks = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run([*ranks, "-m", "neoembed", *args, "--out", str(tmp_path / "ranks")], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    parts = sorted(p.relative_to(tmp_path / "single") for p in (tmp_path / "single").rglob("part-*.parquet"))
    assert len(parts) == 4
    for part in parts:
        assert (tmp_path / "ranks" / part).read_bytes() == (tmp_path / "single" / part).read_bytes(), part
    assert (tmp_path / "ranks" / "stats.json").exists()
