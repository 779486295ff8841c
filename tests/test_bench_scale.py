"""`neoembed bench scale`: every job timed on 1 rank and on 2 (torchrun, gloo), with the ratio stated."""

import json

import pytest
from typer.testing import CliRunner

from neoembed.cli import app


@pytest.mark.slow
def test_bench_scale_times_each_job_on_one_rank_and_two(tmp_path):
    args = ["bench", "scale", "--texts", "128", "--steps", "6", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "scale.json").read_text())
    rows = {(row["job"].split()[0], row["ranks"]): row for row in report["rows"]}
    assert set(rows) == {
        (job, ranks) for job in ("build-data", "pretrain", "contrastive") for ranks in (1, 2)
    }
    assert all(row["rate"] > 0 and row["vs 1 rank"] > 0 for row in rows.values())
    assert len(report["verdicts"]) == 3 and "1.8x target" in report["verdicts"][0]


def test_bench_scale_options_come_from_its_settings():
    result = CliRunner().invoke(app, ["bench", "scale", "--ranks", "1"])
    assert result.exit_code == 2 and "--ranks" in result.output
