"""`neoembed bench encode` measures both paths on the same batch and checks they agree."""

import json

import pytest
import torch
from typer.testing import CliRunner

from neoembed.bench.encode import build_cases, make_batch
from neoembed.cli import app


def test_cases_cover_fixed_and_mixed_lengths():
    cases = build_cases([128, 1024], tokens_per_batch=2048, max_length=512, seed=0)
    names = [case.name for case in cases]
    assert names == ["fixed 128", "mixed 16..512"], "lengths above max_length are skipped"
    assert cases[0].lengths == [128] * 16
    assert all(16 <= n <= 512 for n in cases[1].lengths)


def test_batches_are_padded_to_a_multiple_of_8():
    ids, mask = make_batch([5, 13], vocab_size=30522, device="cpu", seed=0)
    assert ids.shape == (2, 16) and mask.sum().item() == 18
    assert (ids[mask == 0] == 0).all()


def test_bench_encode_writes_json_and_markdown_with_equal_outputs(tmp_path):
    args = ["bench", "encode", "--configs", "tiny,tiny", "--dtypes", "fp32", "--lengths", "64"]
    args += ["--repeats", "1", "--tokens-per-batch", "512", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "encode.json").read_text())
    # every config on the given lengths (the warm-up once overwrote them for the configs after the first)
    assert [row["case"] for row in report["rows"]] == ["fixed 64", "mixed 16..512"] * 2
    for row in report["rows"]:
        assert row["padded tok/s"] > 0 and row["unpadded tok/s"] > 0
        assert row["max |diff|"] <= 1e-5, "padded and unpadded paths give the same hidden states"
        assert row["neobert GFLOP/s"] > 0 and 0 < row["of peak"] < 2  # against a matmul measured here
    assert "measured float32 matmul" in report["peaks"]["fp32"]
    assert "unpadded/padded" in (tmp_path / "encode.md").read_text()


def test_bench_encode_compares_with_modernbert_on_the_same_batches(tmp_path):
    args = ["bench", "encode", "--configs", "tiny", "--dtypes", "fp32", "--lengths", "64", "--mixed", "16,64"]
    args += ["--compare", "modernbert", "--repeats", "1", "--tokens-per-batch", "256", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "encode.json").read_text())
    assert report["attention"] == {
        "neobert fp32": "padded: sdpa; unpadded: sdpa_per_sequence",
        "modernbert fp32": "sdpa",
    }
    fixed, mixed = report["rows"]  # eager beside eager; compiled arms only where asked or on CUDA
    assert fixed["mode"] == mixed["mode"] == "eager"
    assert report["settings"]["compiled_pair"].startswith(
        "not timed on cpu: compilation is on by default on CUDA"
    )
    assert "padded tok/s" not in fixed, "only the auto path is timed against ModernBERT"
    assert fixed["neobert path"] == "sdpa" and mixed["neobert path"] == "unpadded", "NeoBERT's auto choice"
    for row in report["rows"]:
        assert row["modernbert tok/s"] > 0 and row["neobert tok/s"] > 0 and row["neobert/modernbert"] > 0
        assert row["modernbert of peak"] > 0 and row["modernbert GFLOP/s"] > 0  # both MFUs, one peak
    assert "ModernBERT" in (tmp_path / "encode.md").read_text()


@pytest.mark.slow
def test_compiled_models_are_timed_beside_each_other_and_eager_ones_too(tmp_path):
    """--compile on the CPU (inductor's C++ compiler)."""
    args = ["bench", "encode", "--configs", "tiny", "--dtypes", "fp32", "--lengths", "64", "--mixed", "16,64"]
    args += ["--compare", "modernbert", "--compile", "--repeats", "1", "--tokens-per-batch", "256"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "encode.json").read_text())["rows"]
    assert [(row["case"], row["mode"]) for row in rows] == [
        ("fixed 64", "eager"), ("fixed 64", "compiled"), ("mixed 16..64", "eager"), ("mixed 16..64", "compiled")
    ]  # fmt: skip
    for row in rows:
        assert row["neobert tok/s"] > 0 and row["modernbert tok/s"] > 0 and row["modernbert of peak"] > 0
    assert "fixed 64 fp32 compiled: NeoBERT" not in result.output  # verdicts name 4096 and mixed rows
    assert "tiny mixed 16..64 fp32 compiled: NeoBERT (unpadded) / ModernBERT" in result.output


def test_modernbert_flops_count_global_layers_over_the_sequence_and_local_ones_over_their_window():
    from transformers import ModernBertConfig

    from neoembed.bench.encode import modernbert_forward_flops

    config = ModernBertConfig(hidden_size=8, intermediate_size=12, num_hidden_layers=3, local_attention=4)
    kinds = config.layer_types
    assert kinds.count("full_attention") == 1 and kinds.count("sliding_attention") == 2
    linear = 2 * 3 * (4 * 8 * 8 + 3 * 8 * 12) * (10 + 2)
    attention = 4 * 8 * ((10 * 10 + 2 * 2) + 2 * (10 * 4 + 2 * 2))  # one global layer, two windows of 4
    assert modernbert_forward_flops(config, [10, 2]) == linear + attention


def test_bench_encode_rejects_an_unknown_comparison_and_a_missing_gpu(tmp_path):
    result = CliRunner().invoke(app, ["bench", "encode", "--compare", "bert", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "modernbert" in result.output
    if not torch.cuda.is_available():
        result = CliRunner().invoke(app, ["bench", "encode", "--device", "cuda", "--out", str(tmp_path)])
        assert result.exit_code == 2 and "CUDA" in result.output
