"""One precision resolver: what `auto` and explicit dtypes mean for training and inference, per device."""

import pytest
import torch

from neoembed import precision
from neoembed.errors import InputError
from neoembed.packaged import resolve_recipe
from neoembed.precision import cpu_has_bf16_units, resolve_precision
from neoembed.recipes import load_recipe


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


@pytest.fixture
def bf16_units_timed(monkeypatch, tmp_path):
    """A CPU with bf16 units whose timing the test sets: `set(speedup)`; each measurement is counted."""
    monkeypatch.delenv(precision.CPU_BF16_ENV, raising=False)
    monkeypatch.setenv("NEOEMBED_CACHE", str(tmp_path))
    monkeypatch.setattr(precision, "cpu_has_bf16_units", lambda *flags: True)
    precision._remembered_speedup.cache_clear()
    measured = []

    def set_speedup(speedup: float) -> list:
        monkeypatch.setattr(precision, "measure_bf16_speedup", lambda: measured.append(speedup) or speedup)
        return measured

    yield set_speedup
    precision._remembered_speedup.cache_clear()


@pytest.mark.parametrize(
    ("speedup", "dtype", "line"),
    [
        (0.62, torch.float32, "fp32: bf16 runs at 0.62x here"),
        (2.9, torch.bfloat16, "bf16: 2.9x fp32 on this CPU"),
    ],
)
def test_auto_takes_bf16_on_a_cpu_only_where_it_measured_faster(bf16_units_timed, speedup, dtype, line):
    measured = bf16_units_timed(speedup)
    resolved = resolve_precision("auto", "cpu")
    assert resolved.bf16_supported  # the units are there either way
    assert resolved.weight_dtype == dtype and resolved.train_bf16 is (dtype == torch.bfloat16)
    assert precision.cpu_bf16_choice().line == line
    # measured once per machine kind, remembered across processes in the cache folder
    precision._remembered_speedup.cache_clear()
    assert resolve_precision("auto", "cpu").weight_dtype == dtype
    assert measured == [speedup]


def test_the_first_line_says_which_precision_auto_took_and_why(bf16_units_timed):
    from neoembed.pretrain import PretrainSettings
    from neoembed.workflow import RecipeChoice, announce, pretrain_choices

    bf16_units_timed(0.62)
    settings = load_recipe(resolve_recipe("pretrain-cpu"), PretrainSettings)
    line = announce(pretrain_choices(settings, RecipeChoice("pretrain-cpu", given=False)))
    assert "precision fp32 (bf16 runs at 0.62x here; --train.precision bf16)" in line


def test_the_override_still_decides_and_says_so(monkeypatch):
    monkeypatch.setenv(precision.CPU_BF16_ENV, "1")
    assert precision.cpu_bf16_choice().line == "bf16: set by NEOEMBED_CPU_BF16=1"
    monkeypatch.setenv(precision.CPU_BF16_ENV, "0")
    assert precision.cpu_bf16_choice().line == "fp32: set by NEOEMBED_CPU_BF16=0"
