"""`--dtype auto`: bf16 only where it has hardware, and only when it embeds the probe texts like fp32 does;
a lowered model runs its encoder in the lower dtype and pools and normalises in fp32."""

import logging

import pytest
import torch

from neoembed import precision, probe
from neoembed.embedder import load_embedder
from neoembed.errors import InputError


@pytest.fixture
def embedder(neobert_dir):
    return load_embedder(str(neobert_dir), device="cpu")


def _dtype(model):
    return next(model.parameters()).dtype


def test_auto_picks_bf16_only_on_cpus_with_bf16_units(monkeypatch, embedder, cpu_bf16):
    monkeypatch.setattr(probe, "MIN_COSINE", -1.0)  # this test is about the choice, not the check
    model, name = probe.to_inference_dtype(embedder, "auto")
    expected = torch.bfloat16 if cpu_bf16 else torch.float32
    assert _dtype(model) == expected and name == str(expected).removeprefix("torch.")


def test_a_failing_probe_falls_back_to_fp32_under_auto(monkeypatch, embedder, caplog):
    monkeypatch.setenv(precision.CPU_BF16_ENV, "1")
    monkeypatch.setattr(probe, "MIN_COSINE", 1.01)  # no lower precision can pass
    with caplog.at_level(logging.WARNING, logger="neoembed.probe"):
        model, name = probe.to_inference_dtype(embedder, "auto")
    assert model is embedder and _dtype(model) == torch.float32 and name == "float32"
    assert "keeps float32" in caplog.text


def test_a_failing_probe_refuses_an_explicit_bf16(monkeypatch, embedder):
    monkeypatch.setattr(probe, "MIN_COSINE", 1.01)
    with pytest.raises(InputError, match="bfloat16 changes this model's embeddings") as caught:
        probe.to_inference_dtype(embedder, "bfloat16")
    assert caught.value.param == "--dtype"
    assert _dtype(embedder) == torch.float32  # the caller's model is left as it was


def test_a_passing_probe_casts_as_asked(embedder):
    model, name = probe.to_inference_dtype(embedder, "bfloat16")  # a random tiny model: cosines ~1
    assert _dtype(model) == torch.bfloat16 and name == "bfloat16"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_lowered_model_pools_and_normalises_in_fp32(minilm_path, dtype):
    """MiniLM ends in a Normalize module: its lowered copy returns fp32 vectors of norm 1 to fp32 rounding
    (normalising in bf16 and casting up left norms of 0.998-1.003: dot product was not cosine)."""
    texts = ["a dog", "Paris is the capital and most populous city of France.", "def add(a, b): return a + b"]
    reference = load_embedder(str(minilm_path), device="cpu")
    lowered, name = probe.to_inference_dtype(reference, dtype)
    assert name == dtype and lowered[0].auto_model.dtype == getattr(torch, dtype)
    assert _dtype(reference) == torch.float32  # the caller's model is left as it was
    vectors = lowered.encode(texts, convert_to_tensor=True)
    assert vectors.dtype == torch.float32
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(len(texts)), atol=1e-6, rtol=0)
    assert probe.worst_cosine(reference.encode(texts), vectors.numpy()) > 0.99


def test_encode_reports_its_dtype(neobert_dir):
    from typer.testing import CliRunner

    from neoembed.cli import app

    result = CliRunner().invoke(
        app, ["encode", "--model", str(neobert_dir), "--dtype", "float32", "one", "two"]
    )
    assert result.exit_code == 0, result.output
    assert "(float32)" in result.output
