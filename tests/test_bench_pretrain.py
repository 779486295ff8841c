"""`neoembed bench pretrain` times three layouts of the same corpus and checks packed equals padded."""

import json

import pytest
from typer.testing import CliRunner

from neoembed.bench.pretrain import skewed_corpus
from neoembed.cli import app


def test_the_corpus_is_length_skewed():
    lengths = skewed_corpus(2000, max_length=512, seed=0)["length"]
    short = sum(n < 128 for n in lengths) / len(lengths)
    assert short > 0.7 and max(lengths) == 512


def test_bench_pretrain_reports_three_layouts_and_equal_losses(tmp_path):
    # fp32, pinned: the three layouts' losses agree to 1e-5 and the peak is fp32's on any CPU.
    args = [
        "bench",
        "pretrain",
        "--max-length",
        "64",
        "--token-budget",
        "256",
        "--steps",
        "1",
        "--dtype",
        "fp32",
    ]
    result = CliRunner().invoke(app, [*args, "--threads", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "pretrain.json").read_text())
    assert [row["layout"] for row in report["rows"]] == ["padded", "padded, unpadded path", "packed"]
    assert all(row["tokens/s"] > 0 and row["TFLOP/s"] > 0 for row in report["rows"])
    # the peak is measured again beside each layout, and MFU is taken against the better of the two; a ratio
    # above 100% (a peak measured while another job ran) is reported as an error, never as a figure
    for row in report["rows"]:
        assert row["peak TFLOP/s before"] > 0 and row["peak TFLOP/s after"] > 0
        ratio = row["TFLOP/s"] / max(row["peak TFLOP/s before"], row["peak TFLOP/s after"])
        if ratio <= 1:
            assert row["MFU"] == pytest.approx(ratio, rel=1e-9) and "note" not in row
        else:
            assert row["MFU"] is None and "measurement error" in row["note"]
    assert [row["attention"] for row in report["rows"]] == ["sdpa, padded"] + [
        "unpadded, sdpa_per_sequence"
    ] * 2
    assert all(0 < row["packing efficiency"] <= 1 for row in report["rows"])
    assert report["settings"]["peak_source"] == "measured float32 matmul", "no GPU table entry applies"
    assert report["loss_gap"] < 1e-5


def test_bench_pretrain_takes_the_peak_from_the_flag_and_trains_auto_in_bf16_only_with_bf16_units(
    tmp_path, cpu_bf16
):
    args = [
        "bench",
        "pretrain",
        "--max-length",
        "32",
        "--token-budget",
        "64",
        "--steps",
        "1",
        "--warmup-steps",
        "0",
    ]
    # A peak of 1 FLOP/s: any step that ends at all beats it, so the MFU is impossible on every machine.
    args += ["--peak-tflops", "1e-12", "--threads", "1", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "pretrain.json").read_text())
    assert report["settings"]["peak_source"] == "--peak-tflops" and report["settings"]["peak_tflops"] == 1e-12
    assert report["settings"]["dtype"] == ("bf16 autocast" if cpu_bf16 else "fp32")
    for row in report["rows"]:
        assert row["peak TFLOP/s before"] == row["peak TFLOP/s after"] == 1e-12
        assert row["MFU"] is None and "measurement error" in row["note"]
    assert "packed MFU = measurement error" in " ".join(report["verdicts"])


def test_a_token_budget_that_cannot_fit_stops_before_the_model_is_built(tmp_path):
    args = ["bench", "pretrain", "--config", "full", "--token-budget", "100000000", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "--token-budget" in result.output and "GiB available" in result.output
    assert not (tmp_path / "pretrain.json").exists()
