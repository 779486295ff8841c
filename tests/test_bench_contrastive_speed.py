"""`neoembed bench contrastive --speed`: neoembed's trainer and sentence-transformers' cached loss trained on the
same pairs with the same global batch, mini-batch, precision and device, each in a process of its own, timed
after a warm-up, with the ratio and the verdict."""

import json

import pytest
from test_contrastive import records, write_build
from typer.testing import CliRunner

from neoembed.cli import app


def speed_args(build, model, out, *extra: str) -> list[str]:
    return ["bench", "contrastive", "--speed", "--data", str(build), "--model", str(model), "--batch-size", "8",
            "--mini-batch-size", "3", "--warmup-steps", "1", "--steps", "2", "--precisions", "fp32",
            "--threads", "1", "--out", str(out), *extra]  # fmt: skip


def test_both_trainers_see_the_same_pairs_batch_and_mini_batch(tmp_path, neobert_embedder):
    # Two sources: the speed mode trains both trainers on the larger one alone.
    build = write_build(tmp_path / "build", {"big": records("big", 60), "small": records("small", 20)})
    out = tmp_path / "bench"
    result = CliRunner().invoke(app, speed_args(build, neobert_embedder, out))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "contrastive-speed.json").read_text())
    ours, theirs = report["arms"]["fp32"]["neoembed"], report["arms"]["fp32"]["st"]
    # what each trainer reported of itself, not what it was asked for
    for arm in (ours, theirs):
        assert arm["rows"] == 60 and arm["global batch"] == 8 and arm["mini-batch"] == 3
        assert arm["precision"] == "fp32" and arm["device"] == "cpu" and arm["timed steps"] == 2
        assert arm["seconds"] > 0 and arm["peak bytes"] > 0
    assert report["settings"]["data"]["sources"] == ["big"]
    ratio = report["ratios"]["fp32"]["pairs_per_s"]
    neoembed_row, st_row = report["rows"]
    assert neoembed_row["pairs/s"] / st_row["pairs/s"] == pytest.approx(ratio)
    assert "neoembed / ST pairs/s" in result.output and "the 1.8x target" in result.output


def test_fields_the_speed_mode_sets_cannot_be_overridden(tmp_path):
    build = write_build(tmp_path / "build", {"big": records("big", 20)})
    result = CliRunner().invoke(
        app, speed_args(build, "minilm", tmp_path / "bench", "--set", "train.batch_size=4")
    )
    assert result.exit_code == 2
    assert "train.batch_size" in result.output and "--batch-size" in result.output


def test_speed_is_timed_in_steps_not_minutes():
    from neoembed.bench.settings import ContrastiveBench

    with pytest.raises(ValueError, match="--speed times a number of --steps"):
        ContrastiveBench(speed=True, minutes=1.0)
