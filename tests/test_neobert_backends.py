"""Which attention backend and kernel NeoBERT runs, decided by pure functions so the CUDA choices are tested
on a CPU; transformers' `attn_implementation`; compiled layers equal eager ones."""

import inspect

import pytest
import torch

import neoembed  # noqa: F401  (registers the Auto classes)
from neoembed.pretrain.neobert import NeoBERTForMaskedLM, NeoBERTModel, attention, tiny_config
from neoembed.pretrain.neobert.attention import choose_backend, varlen_kernel_for

BOTH = frozenset({"flash_attn", "torch_varlen"})
NONE = frozenset()


def decide(device_type="cuda", dtype=torch.float32, autocast=None, importable=BOTH, **kwargs):
    options = dict(has_padding=True, output_attentions=False) | kwargs
    return choose_backend(
        options.pop("requested", "auto"),
        device_type=device_type,
        dtype=dtype,
        autocast_dtype=autocast,
        importable=importable,
        **options,
    )


def test_bf16_autocast_on_cuda_with_fp32_embeddings_unpads():
    assert decide(dtype=torch.float32, autocast=torch.bfloat16) == "unpadded"
    assert decide(dtype=torch.float32, autocast=torch.bfloat16, importable=frozenset({"torch_varlen"})) == (
        "unpadded"
    )
    assert varlen_kernel_for("cuda", torch.bfloat16, BOTH) == "flash_attn"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (dict(dtype=torch.float32), "sdpa"),  # CUDA fp32: no varlen kernel, padding is cheaper than grouping
        (dict(dtype=torch.bfloat16), "unpadded"),  # bf16 weights (DeepSpeed bf16)
        (dict(dtype=torch.float16), "unpadded"),
        (dict(dtype=torch.bfloat16, importable=NONE), "sdpa"),  # no fused kernel imports
        (dict(dtype=torch.bfloat16, has_padding=False), "sdpa"),  # nothing to unpad
        (dict(device_type="cpu", dtype=torch.float32, importable=NONE), "unpadded"),  # exact grouped SDPA
        (dict(device_type="cpu", has_padding=False), "sdpa"),
        (dict(dtype=torch.bfloat16, output_attentions=True), "eager"),  # weights need the explicit softmax
        (dict(requested="sdpa", dtype=torch.bfloat16), "sdpa"),  # an explicit backend is kept
        (dict(requested="unpadded", dtype=torch.float32), "unpadded"),
        (dict(requested="unpadded", output_attentions=True), "eager"),
        # A traced graph (ONNX export) cannot hold the varlen plan: real-token linears around padded SDPA.
        (dict(device_type="cpu", traced=True), "unpadded"),
        (dict(device_type="cpu", traced=True, has_padding=False), "sdpa"),
    ],
)
def test_backend_decision(options, expected):
    assert decide(**options) == expected


def test_varlen_kernel_prefers_flash_attn_then_torch_and_needs_half_precision_on_cuda():
    assert varlen_kernel_for("cuda", torch.float16, frozenset({"torch_varlen"})) == "torch_varlen"
    assert varlen_kernel_for("cuda", torch.float32, BOTH) == "sdpa_per_sequence"
    assert varlen_kernel_for("cpu", torch.bfloat16, BOTH) == "sdpa_per_sequence"
    assert varlen_kernel_for("cuda", torch.bfloat16, NONE) == "sdpa_per_sequence"


def test_a_flash_attn_wheel_that_fails_to_import_falls_back_to_torch_varlen(monkeypatch):
    """An installed flash-attn built for another torch/CUDA is found by find_spec but fails to import."""
    import importlib.machinery
    import importlib.util

    broken = ImportError("flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")
    monkeypatch.setattr(
        attention, "_varlen_kernel_imports", lambda: {"flash_attn": broken, "torch_varlen": lambda *a: None}
    )
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            importlib.machinery.ModuleSpec(name, None) if name == "flash_attn" else real_find_spec(name, *a)
        ),
    )
    importable = attention.importable_kernels()
    assert importable == frozenset({"torch_varlen"})
    assert varlen_kernel_for("cuda", torch.bfloat16, importable) == "torch_varlen"
    status = attention.available_backends()["unpadded: flash-attn varlen"]
    assert "fails to import" in status and "undefined symbol" in status and "torch varlen_attn" in status


def test_info_says_when_flash_attn_is_missing():
    from typer.testing import CliRunner

    from neoembed.cli import app

    if "flash_attn" in attention.importable_kernels():
        pytest.skip("flash-attn imports here")
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0 and "neoembed[gpu]" in result.output


def test_explicit_sdpa_drops_an_all_true_mask(monkeypatch):
    """A mask with nothing padded would keep SDPA off its flash kernel; the padded path drops it."""
    seen = []
    original = attention.PaddedBatch.attend

    def spy(self, q, k, v):
        seen.append(self.key_mask)
        return original(self, q, k, v)

    monkeypatch.setattr(attention.PaddedBatch, "attend", spy)
    model = NeoBERTModel(tiny_config(attn_backend="sdpa")).eval()
    ids = torch.randint(1000, 30000, (2, 8))
    with torch.no_grad():
        model(ids, attention_mask=torch.ones(2, 8, dtype=torch.long))
        assert all(mask is None for mask in seen)
        seen.clear()
        model(ids, attention_mask=torch.tensor([[1] * 8, [1] * 5 + [0] * 3]))
        assert all(mask is not None for mask in seen)


def test_grouped_attention_plans_once_per_forward_for_all_layers(monkeypatch):
    calls = []
    original = attention.plan_sequence_groups
    monkeypatch.setattr(attention, "plan_sequence_groups", lambda cu: calls.append(cu) or original(cu))
    model = NeoBERTModel(tiny_config(num_hidden_layers=3)).eval()
    ids = torch.randint(1000, 30000, (1, 20))
    with torch.no_grad():
        model(ids, cu_seqlens=torch.tensor([0, 3, 7, 12, 20], dtype=torch.int32))
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("implementation", "backend", "reported"),
    [
        ("eager", "eager", "eager"),
        ("flash_attention_2", "unpadded", "flash_attention_2"),
        ("sdpa", "auto", "sdpa"),
    ],
)
def test_attn_implementation_selects_the_backend(tmp_path, implementation, backend, reported):
    from transformers import AutoModel

    NeoBERTModel(tiny_config()).save_pretrained(tmp_path)
    model = AutoModel.from_pretrained(tmp_path, attn_implementation=implementation)
    assert model.config.attn_backend == backend
    assert model.config._attn_implementation == reported


def test_not_requesting_an_implementation_keeps_the_configs_backend_and_set_switches_it():
    model = NeoBERTForMaskedLM(tiny_config(attn_backend="unpadded"))
    assert model.config.attn_backend == "unpadded", "the MLM head and its inner model share one config"
    model.set_attn_implementation("sdpa")
    assert model.config.attn_backend == "sdpa" and model.model.config.attn_backend == "sdpa"
    model.set_attn_implementation("eager")
    ids = torch.randint(1000, 30000, (1, 6))
    assert model(ids, output_attentions=True).attentions[0].shape == (1, 4, 6, 6)


def test_unsupported_attn_implementation_is_a_clear_error():
    with pytest.raises(ValueError, match="flex_attention"):
        NeoBERTModel(tiny_config(attn_implementation="flex_attention"))


def test_heads_name_their_inputs_and_the_trainer_passes_the_masked_token_count():
    for cls in (NeoBERTModel, NeoBERTForMaskedLM):
        parameters = inspect.signature(cls.forward).parameters
        assert {"attention_mask", "cu_seqlens", "max_seqlen", "position_ids"} <= set(parameters)
        assert not any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    assert NeoBERTForMaskedLM.accepts_loss_kwargs is True


def compiled_and_eager_outputs(cases):
    """Outputs of a 1-layer model for each (input_ids, kwargs, backend), eager then with compiled layers."""
    model = NeoBERTModel(tiny_config(num_hidden_layers=1)).eval()

    def outputs():
        results = []
        for ids, kwargs, backend in cases:
            model.config.attn_backend = backend
            results.append(model(ids, **kwargs).last_hidden_state)
        return results

    with torch.no_grad():
        eager = outputs()
        model.compile_layers()
        return eager, outputs()


PACKED = (
    torch.randint(1000, 30000, (1, 21)),
    {"cu_seqlens": torch.tensor([0, 4, 15, 21], dtype=torch.int32)},
)


def test_compiled_layers_equal_eager_on_packed_batches():
    eager, compiled = compiled_and_eager_outputs([(*PACKED, "auto")])
    assert (eager[0] - compiled[0]).abs().max() <= 1e-5


@pytest.mark.slow  # four graphs to compile: about 40 s on a loaded 2-core CPU
def test_compiled_layers_equal_eager_on_padded_unpadded_and_packed_batches():
    ids = torch.randint(1000, 30000, (3, 16))
    mask = torch.ones(3, 16, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    cases = [
        (ids, {"attention_mask": mask}, "sdpa"),
        (ids, {"attention_mask": mask}, "unpadded"),
        (*PACKED, "auto"),
    ]
    eager, compiled = compiled_and_eager_outputs(cases)
    for a, b in zip(eager, compiled):
        assert (a - b).abs().max() <= 1e-5


@pytest.mark.slow
def test_compiled_layers_train_like_eager():
    from neoembed.pretrain.neobert.modeling import NeoBERTForMaskedLM

    eager = NeoBERTForMaskedLM(tiny_config(num_hidden_layers=1))
    compiled = NeoBERTForMaskedLM(tiny_config(num_hidden_layers=1))
    compiled.load_state_dict(eager.state_dict())
    compiled.compile_layers()
    ids = torch.randint(1000, 30000, (1, 21))
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, -100)
    cu = torch.tensor([0, 4, 15, 21], dtype=torch.int32)
    for model in (eager, compiled):
        model(ids, cu_seqlens=cu, labels=labels).loss.backward()
    for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-5), name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_autocast_on_cuda_takes_the_unpadded_path_and_matches_padded():
    model = NeoBERTModel(tiny_config()).cuda().eval()
    ids = torch.randint(1000, 30000, (4, 256), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, 100:] = 0
    mask[3, 7:] = 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        assert (
            decide(
                dtype=model.encoder.weight.dtype,
                autocast=attention.autocast_dtype("cuda"),
                importable=attention.importable_kernels(),
            )
            == "unpadded"
        )
        auto = model(ids, attention_mask=mask).last_hidden_state
        model.config.attn_backend = "sdpa"
        padded = model(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (auto[~real] == 0).all(), "the unpadded path ran (it leaves padding positions at zero)"
    assert (auto[real].float() - padded[real].float()).abs().max() < 0.05


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_layers_on_cuda_equal_eager_in_bf16():
    model = NeoBERTModel(tiny_config()).cuda().to(torch.bfloat16).eval()
    ids = torch.randint(1000, 30000, (4, 128), device="cuda")
    mask = torch.ones_like(ids)
    mask[2, 50:] = 0
    with torch.no_grad():
        eager = model(ids, attention_mask=mask).last_hidden_state
        model.compile_layers()
        compiled = model(ids, attention_mask=mask).last_hidden_state
    assert (eager.float() - compiled.float()).abs().max() < 0.05


def test_the_traceable_unpadded_path_equals_padded_sdpa_on_real_tokens(monkeypatch):
    """Under tracing the unpadded path runs `RepaddedBatch` (real tokens through the linear layers, attention
    padded); forced here outside a trace, it must give the padded path's hidden states on real tokens."""
    torch.manual_seed(0)
    model = NeoBERTModel(tiny_config()).eval()
    ids = torch.randint(5, 1000, (4, 12))
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[0, 7:], mask[2, 3:], mask[3, :5] = 0, 0, 0  # right padding, and left padding in the last row
    model.config.attn_backend = "sdpa"
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask).last_hidden_state
    monkeypatch.setattr("neoembed.pretrain.neobert.modeling.tracing", lambda: True)
    model.config.attn_backend = "auto"
    with torch.no_grad():
        repadded = model(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(repadded[real], padded[real], atol=1e-5, rtol=1e-5)
    assert (repadded[~real] == 0).all(), "padding positions carry no values"
