"""`neoembed bench build-data` at toy sizes: every stage measured, and the 9M projection built from them."""

import json

from typer.testing import CliRunner

from neoembed.cli import app


def test_bench_build_data_measures_each_stage_and_projects_the_full_build(tmp_path):
    args = ["bench", "build-data", "--rows", "2000", "--long-rows", "200", "--encode-texts", "50"]
    args += ["--search-pool", "2000", "--search-queries", "200", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "build-data.json").read_text())
    long = next(s for s in report["sources"] if s["source"] != "synthetic")
    assert long["truncated"] > 0 and long["too_long"] == 0, (
        "long texts are cut to the token budget, not dropped"
    )
    assert report["encode"]["tokens_per_cpu_s"] > 0 and report["search"]["gflop_per_cpu_s"] > 0
    assert [row["where"] for row in report["projection"]] == ["CPU (CPU-hours)", "one H100 (assumed rates)"]
    assert all(row["total_h"] > 0 for row in report["projection"])
    assert not (tmp_path / "work").exists(), "generated data is removed unless --keep"
