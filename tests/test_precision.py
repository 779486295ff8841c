"""One precision resolver: what `auto` and explicit dtypes mean for training and inference, per device."""

import pytest
import torch

from neoembed import precision
from neoembed.errors import InputError
from neoembed.precision import cpu_has_bf16_units, resolve_precision


@pytest.mark.parametrize(
    ("capability", "avx512_bf16", "amx", "expected"),
    [
        ("AVX512", True, False, True),  # Cooper Lake, Zen 4
        ("AVX512", False, True, True),  # Sapphire Rapids AMX tiles
        ("AVX512", False, False, False),  # Skylake-X: bf16 emulated
        ("AVX2", True, True, False),  # torch runs no AVX512 kernels here
        ("DEFAULT", False, False, False),
    ],
)
def test_cpu_bf16_units_follow_torchs_reported_capability(capability, avx512_bf16, amx, expected):
    assert cpu_has_bf16_units(capability, avx512_bf16, amx) is expected


def test_auto_on_cpu_infers_and_trains_in_bf16_only_with_bf16_units(cpu_bf16):
    resolved = resolve_precision("auto", "cpu")
    assert resolved.device == "cpu" and resolved.bf16_supported is cpu_bf16
    assert resolved.weight_dtype == (torch.bfloat16 if cpu_bf16 else torch.float32)
    assert resolved.train_bf16 is cpu_bf16 and not resolved.train_fp16


def test_without_the_override_the_cpu_itself_answers(monkeypatch):
    monkeypatch.delenv(precision.CPU_BF16_ENV, raising=False)
    expected = cpu_has_bf16_units(
        torch.backends.cpu.get_cpu_capability(),
        torch.cpu._is_avx512_bf16_supported(),
        torch.cpu._is_amx_tile_supported(),
    )
    assert precision.cpu_bf16_units() is expected


def test_an_override_other_than_0_or_1_is_an_input_error(monkeypatch):
    monkeypatch.setenv(precision.CPU_BF16_ENV, "yes")
    with pytest.raises(InputError, match="NEOEMBED_CPU_BF16 must be 0 or 1, got 'yes'"):
        resolve_precision("auto", "cpu")


@pytest.mark.parametrize(
    ("bf16", "weights", "train_bf16"), [(True, torch.bfloat16, True), (False, torch.float16, False)]
)
def test_auto_on_cuda_uses_bf16_where_supported_else_fp16_for_inference(
    monkeypatch, bf16, weights, train_bf16
):
    monkeypatch.setattr(precision, "bf16_supported", lambda device: bf16)
    resolved = resolve_precision("auto", "cuda:1")
    assert resolved.device == "cuda" and resolved.weight_dtype == weights
    assert resolved.train_bf16 is train_bf16 and not resolved.train_fp16


def test_explicit_precisions_and_recipe_spellings():
    assert (
        resolve_precision("bf16", "cpu").train_bf16
        and resolve_precision("bfloat16", "cpu").weight_dtype == torch.bfloat16
    )
    assert resolve_precision("fp32", "cpu").weight_dtype == torch.float32
    fp16 = resolve_precision("float16", "cpu")
    assert fp16.weight_dtype == torch.float16 and fp16.train_fp16 and not fp16.train_bf16


def test_bf16_on_a_gpu_without_it_and_unknown_names_are_input_errors(monkeypatch):
    monkeypatch.setattr(precision, "bf16_supported", lambda device: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100")
    with pytest.raises(InputError, match="V100"):
        resolve_precision("bfloat16", "cuda")
    with pytest.raises(InputError, match="float64"):
        resolve_precision("float64", "cpu")
