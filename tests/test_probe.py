"""`--dtype auto`: bf16 only where it has hardware, and only when it embeds the probe texts like fp32 does."""

import logging

import pytest
import torch

from neoembed import precision, probe
from neoembed.errors import InputError


@pytest.fixture
def embedder(neobert_dir):
    from neoembed.embedder import load_embedder

    return load_embedder(str(neobert_dir), device="cpu")


def _dtype(model):
    return next(model.parameters()).dtype


@pytest.mark.parametrize(("units", "expected"), [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_picks_bf16_only_on_cpus_with_bf16_units(monkeypatch, embedder, units, expected):
    monkeypatch.setattr(precision, "bf16_supported", lambda device: units)
    monkeypatch.setattr(probe, "MIN_COSINE", -1.0)  # this test is about the choice, not the check
    model, name = probe.to_inference_dtype(embedder, "auto")
    assert _dtype(model) == expected and name == str(expected).removeprefix("torch.")


def test_a_failing_probe_falls_back_to_fp32_under_auto(monkeypatch, embedder, caplog):
    monkeypatch.setattr(precision, "bf16_supported", lambda device: True)
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


def test_encode_reports_its_dtype(neobert_dir):
    from typer.testing import CliRunner

    from neoembed.cli import app

    result = CliRunner().invoke(
        app, ["encode", "--model", str(neobert_dir), "--dtype", "float32", "one", "two"]
    )
    assert result.exit_code == 0, result.output
    assert "(float32)" in result.output
