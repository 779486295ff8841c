"""The NeoBERT backbone: layout invariance, the release's conventions, checkpoint compatibility, training."""

import json

import pytest
import torch
from safetensors.torch import save_file

import neoembed  # noqa: F401  (registers the Auto classes)
from neoembed.pretrain.neobert import NeoBERTConfig, NeoBERTForMaskedLM, NeoBERTModel, tiny_config
from neoembed.pretrain.neobert.modeling import positions_from_cu_seqlens

TOL = 1e-5


def make_model(**overrides) -> NeoBERTModel:
    return NeoBERTModel(tiny_config(**overrides)).eval()


def with_backend(model: NeoBERTModel, backend: str) -> NeoBERTModel:
    twin = NeoBERTModel(tiny_config(attn_backend=backend)).eval()
    twin.load_state_dict(model.state_dict())
    return twin


def ragged_batch(lengths, length=None, seed=0):
    """Random token ids for sequences of the given lengths, right-padded, and their attention mask."""
    gen = torch.Generator().manual_seed(seed)
    length = length or max(lengths)
    ids = torch.zeros(len(lengths), length, dtype=torch.long)
    mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1000, 30000, (n,), generator=gen)
        mask[row, :n] = 1
    return ids, mask


@pytest.mark.parametrize("backend", ["sdpa", "unpadded", "eager", "auto"])
def test_padding_does_not_change_a_sequence(backend):
    model = make_model(attn_backend=backend)
    ids, mask = ragged_batch([7, 13, 3], length=16)
    with torch.no_grad():
        batched = model(ids, attention_mask=mask).last_hidden_state
        for row, n in enumerate(mask.sum(1).tolist()):
            alone = model(ids[row : row + 1, :n]).last_hidden_state[0]
            assert (batched[row, :n] - alone).abs().max() <= TOL


def test_unpadded_path_equals_padded_path():
    padded = make_model(attn_backend="sdpa")
    unpadded = with_backend(padded, "unpadded")
    ids, mask = ragged_batch([5, 16, 9, 1])
    with torch.no_grad():
        a = padded(ids, attention_mask=mask, output_hidden_states=True)
        b = unpadded(ids, attention_mask=mask, output_hidden_states=True)
    real = mask.bool()
    for ha, hb in zip(a.hidden_states, b.hidden_states):
        assert (ha[real] - hb[real]).abs().max() <= TOL
    assert (b.last_hidden_state[~real] == 0).all(), "unpadded path leaves padding positions at zero"


def test_grouped_short_sequences_equal_padded_attention():
    """Short sequences of similar length share one masked SDPA call; each still sees only itself."""
    from neoembed.pretrain.neobert.attention import GROUP_UP_TO, _length_groups

    lengths = [20, 19, 18, 17, 40, 3, 3, GROUP_UP_TO + 50, GROUP_UP_TO + 40]
    groups = _length_groups(lengths)
    assert any(len(g) > 1 for g in groups), "some sequences are grouped"
    assert groups[:2] == [[7], [8]], "sequences longer than GROUP_UP_TO run alone"
    padded = make_model(attn_backend="sdpa")
    unpadded = with_backend(padded, "unpadded")
    ids, mask = ragged_batch(lengths)
    with torch.no_grad():
        a = padded(ids, attention_mask=mask).last_hidden_state
        b = unpadded(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (a[real] - b[real]).abs().max() <= TOL


def test_packed_batch_equals_documents_run_separately():
    model = make_model()
    docs = [torch.randint(1000, 30000, (n,)) for n in (4, 11, 6)]
    cu_seqlens = torch.tensor([0, 4, 15, 21], dtype=torch.int32)
    with torch.no_grad():
        packed = model(torch.cat(docs)[None], cu_seqlens=cu_seqlens).last_hidden_state[0]
        for doc, start in zip(docs, cu_seqlens.tolist()):
            alone = model(doc[None]).last_hidden_state[0]
            assert (packed[start : start + len(doc)] - alone).abs().max() <= TOL


def test_positions_restart_at_each_document():
    cu = torch.tensor([0, 3, 5, 9], dtype=torch.int32)
    assert positions_from_cu_seqlens(cu).tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]


def test_optional_mask_token_types_and_left_padding():
    model = make_model()
    ids, mask = ragged_batch([6, 6])
    with torch.no_grad():
        no_mask = model(ids).last_hidden_state
        with_types = model(ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        assert torch.allclose(no_mask, with_types, atol=TOL)
        # Left padding: positions count real tokens, so the sequence is unchanged.
        left_ids = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids[:1]], dim=1)
        left_mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), mask[:1]], dim=1)
        left = model(left_ids, attention_mask=left_mask).last_hidden_state[0, 3:]
        assert (left - no_mask[0]).abs().max() <= TOL


def test_hidden_states_and_attentions_follow_hf_conventions():
    model = make_model()
    ids, mask = ragged_batch([8, 5])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    cfg = model.config
    assert len(out.hidden_states) == cfg.num_hidden_layers + 1
    assert torch.equal(out.hidden_states[0], model.encoder(ids))
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert len(out.attentions) == cfg.num_hidden_layers
    weights = out.attentions[0]
    assert weights.shape == (2, cfg.num_attention_heads, 8, 8)
    assert (weights[1, :, :, 5:] == 0).all(), "padded keys get exactly zero weight (masked with -inf)"
    assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-6)


def _reference_forward(model: NeoBERTModel, ids: torch.Tensor) -> torch.Tensor:
    """An independent single-sequence NeoBERT written from the paper's description, for one layer:
    complex-number RoPE on adjacent pairs, explicit per-head QKV slicing, SwiGLU halves, RMSNorm."""
    cfg = model.config
    heads, dim = cfg.num_attention_heads, cfg.head_dim
    (layer,) = model.transformer_encoder
    sd = {k: v.double() for k, v in model.state_dict().items()}
    x = sd["encoder.weight"][ids]  # (L, hidden)
    length = x.shape[0]

    def rms(t, w):
        return t / torch.sqrt((t * t).mean(-1, keepdim=True) + cfg.norm_eps) * w

    freqs = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rot = torch.polar(
        torch.ones(length, dim // 2, dtype=torch.float64), torch.outer(torch.arange(length), freqs)
    )

    def rope(t):  # t: (L, dim); pairs (t[2i], t[2i+1]) are one complex number
        return torch.view_as_real(torch.view_as_complex(t.reshape(length, dim // 2, 2)) * rot).reshape(
            length, dim
        )

    h = rms(x, sd["transformer_encoder.0.attention_norm.weight"])
    qkv = h @ sd["transformer_encoder.0.qkv.weight"].T  # (L, heads * 3 * dim)
    out_heads = []
    for head in range(heads):
        base = head * 3 * dim  # per-head layout [q | k | v]
        q = rope(qkv[:, base : base + dim])
        k = rope(qkv[:, base + dim : base + 2 * dim])
        v = qkv[:, base + 2 * dim : base + 3 * dim]
        out_heads.append(torch.softmax(q @ k.T / dim**0.5, dim=-1) @ v)
    x = x + torch.cat(out_heads, dim=-1) @ sd["transformer_encoder.0.wo.weight"].T
    h = rms(x, sd["transformer_encoder.0.ffn_norm.weight"])
    w12 = sd["transformer_encoder.0.ffn.w12.weight"]
    gate, value = (h @ w12[: w12.shape[0] // 2].T), (h @ w12[w12.shape[0] // 2 :].T)
    x = x + (torch.nn.functional.silu(gate) * value) @ sd["transformer_encoder.0.ffn.w3.weight"].T
    return rms(x, sd["layer_norm.weight"])


def test_matches_hand_written_reference_layer():
    model = make_model(num_hidden_layers=1)
    with torch.no_grad():
        for p in model.parameters():  # non-trivial norm weights so a wrong norm placement shows
            p.add_(torch.randn_like(p) * 0.05)
    ids = torch.randint(1000, 30000, (12,))
    with torch.no_grad():
        ours = model(ids[None]).last_hidden_state[0].double()
    assert (ours - _reference_forward(model, ids)).abs().max() <= 1e-4


def _write_released_checkpoint(path, cfg_fields):
    """A checkpoint directory in the release's exact form: its config.json fields and state-dict names."""
    cfg = NeoBERTConfig(**cfg_fields)
    hidden, ffn, vocab = cfg.hidden_size, cfg.ffn_hidden_size, cfg.vocab_size
    tensors = {"model.encoder.weight": torch.randn(vocab, hidden)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.transformer_encoder.{i}."
        tensors[p + "qkv.weight"] = torch.randn(3 * hidden, hidden) * 0.02
        tensors[p + "wo.weight"] = torch.randn(hidden, hidden) * 0.02
        tensors[p + "ffn.w12.weight"] = torch.randn(2 * ffn, hidden) * 0.02
        tensors[p + "ffn.w3.weight"] = torch.randn(hidden, ffn) * 0.02
        tensors[p + "attention_norm.weight"] = 1 + torch.randn(hidden) * 0.1
        tensors[p + "ffn_norm.weight"] = 1 + torch.randn(hidden) * 0.1
    tensors["model.layer_norm.weight"] = 1 + torch.randn(hidden) * 0.1
    tensors["decoder.weight"] = torch.randn(vocab, hidden) * 0.02
    tensors["decoder.bias"] = torch.randn(vocab) * 0.02
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    config_json = dict(
        cfg_fields,
        dim_head=hidden // cfg_fields["num_attention_heads"],
        vocab_size=vocab,
        pad_token_id=0,
        norm_eps=1e-5,
        embedding_init_range=0.02,
        decoder_init_range=0.02,
        classifier_init_range=0.02,
        architectures=["NeoBERTLMHead"],
        model_type="neobert",
        auto_map={"AutoConfig": "model.NeoBERTConfig", "AutoModelForMaskedLM": "model.NeoBERTLMHead"},
    )
    (path / "config.json").write_text(json.dumps(config_json))
    return tensors


def test_released_checkpoint_directory_loads_without_remote_code(tmp_path):
    from transformers import AutoModel, AutoModelForMaskedLM

    fields = dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=192, max_length=512
    )
    tensors = _write_released_checkpoint(tmp_path, fields)
    model, info = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert isinstance(model, NeoBERTForMaskedLM)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    state = model.state_dict()
    assert all(torch.equal(state[name], value) for name, value in tensors.items())
    assert model.config.norm_eps == 1e-5 and model.config.max_position_embeddings == 512

    base, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert isinstance(base, NeoBERTModel) and not info["missing_keys"]
    assert torch.equal(base.state_dict()["encoder.weight"], tensors["model.encoder.weight"])


def test_save_and_load_round_trip_is_exact(tmp_path):
    from transformers import AutoModelForMaskedLM

    model = NeoBERTForMaskedLM(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    ids, mask = ragged_batch([9, 4])
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).logits, loaded(ids, attention_mask=mask).logits)


def test_meta_device_init_and_dtype_casts_keep_rope_correct():
    model = make_model()
    ids = torch.randint(1000, 30000, (1, 20))
    with torch.no_grad():
        expected = model(ids).last_hidden_state
        with torch.device("meta"):
            meta_model = NeoBERTModel(model.config)
        meta_model = meta_model.to_empty(device="cpu").eval()
        meta_model.load_state_dict(model.state_dict())
        assert torch.equal(meta_model(ids).last_hidden_state, expected)
        bf16 = meta_model.to(torch.bfloat16)(ids).last_hidden_state.float()
    assert torch.isfinite(bf16).all()
    assert (bf16 - expected).abs().max() < 0.1


def test_norm_and_rope_compute_in_fp32_for_bf16_inputs():
    from neoembed.pretrain.neobert.modeling import RMSNorm
    from neoembed.pretrain.neobert.rope import apply_rotary

    x = torch.randn(4, 64).to(torch.bfloat16)
    norm = RMSNorm(64, eps=1e-5)
    norm.weight.data = (1 + torch.randn(64) * 0.1).to(torch.bfloat16)
    in_fp32 = torch.nn.functional.rms_norm(x.float(), (64,), norm.weight.float(), 1e-5).to(torch.bfloat16)
    assert torch.equal(norm(x), in_fp32)

    q = torch.randn(10, 4, 16).to(torch.bfloat16)
    cos, sin = make_model().rotary(torch.arange(10) * 300)  # large angles: precision matters
    rotated_fp32 = apply_rotary(q.float(), cos[:, None], sin[:, None]).to(torch.bfloat16)
    assert torch.equal(apply_rotary(q, cos[:, None], sin[:, None]), rotated_fp32)


def test_bf16_autocast_is_close_to_fp32():
    model = make_model()
    ids, mask = ragged_batch([30, 18])
    with torch.no_grad():
        fp32 = model(ids, attention_mask=mask).last_hidden_state
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = model(ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (mixed[real] - fp32[real]).abs().max() < 0.1


def test_yarn_scaling_extends_context_and_keeps_high_frequencies():
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    plain, scaled = make_model(max_length=64), make_model(max_length=256, rope_parameters=yarn)
    pos = torch.arange(256)
    cos_plain, _ = plain.rotary(pos)
    cos_scaled, _ = scaled.rotary(pos)
    inv_plain, _ = plain.rotary._inverse_frequencies(pos.device, 256)
    inv_scaled, factor = scaled.rotary._inverse_frequencies(pos.device, 256)
    assert torch.allclose(inv_scaled[0], inv_plain[0]), "highest frequency is extrapolated, not scaled"
    assert torch.allclose(inv_scaled[-1], inv_plain[-1] / 4.0), (
        "lowest frequency is interpolated by the factor"
    )
    assert factor > 1.0 and torch.allclose(cos_scaled[0], torch.full_like(cos_scaled[0], factor))
    with torch.no_grad():
        out = scaled(torch.randint(1000, 30000, (1, 200))).last_hidden_state
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    "field, value",
    [("attn_backend", "flash"), ("rope_parameters", {"rope_type": "longrope"}), ("dim_head", 10)],
)
def test_invalid_config_names_the_field(field, value):
    with pytest.raises(Exception, match=field):
        tiny_config(**{field: value})


def test_one_mlm_step_lowers_the_loss_and_reaches_every_parameter():
    model = NeoBERTForMaskedLM(tiny_config(attn_backend="unpadded"))
    ids, mask = ragged_batch([24, 17, 30], seed=1)
    labels = torch.full_like(ids, -100)
    masked = (torch.rand(ids.shape) < 0.3) & mask.bool()
    labels[masked] = ids[masked]
    inputs = ids.masked_fill(masked, 103)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = model(inputs, attention_mask=mask, labels=labels).loss
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, f"no gradient reaches {name}"
    optimizer.step()
    with torch.no_grad():
        assert model(inputs, attention_mask=mask, labels=labels).loss < loss


def test_accumulated_micro_batches_weigh_every_masked_token_equally():
    """With num_items_in_batch (the Trainer's masked-token count over the accumulated batch), two
    micro-batches with different masked counts give the gradient of the concatenated batch's mean loss."""
    model = NeoBERTForMaskedLM(tiny_config())
    ids, mask = ragged_batch([20, 20, 20], seed=3)
    labels = torch.full_like(ids, -100)
    labels[0, :2] = ids[0, :2]  # 2 masked tokens in micro-batch 1
    labels[1:, :9] = ids[1:, :9]  # 18 masked tokens in micro-batch 2
    model(ids, attention_mask=mask, labels=labels).loss.backward()
    whole = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for rows in (slice(0, 1), slice(1, 3)):
        loss = model(ids[rows], attention_mask=mask[rows], labels=labels[rows], num_items_in_batch=20).loss
        loss.backward()
    for full, accumulated in zip(whole, (p.grad for p in model.parameters())):
        assert torch.allclose(full, accumulated, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_gradients():
    ids, mask = ragged_batch([12, 7], seed=2)
    labels = ids.masked_fill(~mask.bool(), -100)
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = NeoBERTForMaskedLM(tiny_config()).train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        model(ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_sequence_classification_head_reads_the_first_real_token():
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_config(tiny_config(num_labels=3)).eval()
    ids, mask = ragged_batch([10, 6])
    left_ids = torch.cat([torch.zeros(1, 4, dtype=torch.long), ids[1:, :6]], dim=1)  # row 1, left-padded
    left_mask = torch.cat([torch.zeros(1, 4, dtype=torch.long), mask[1:, :6]], dim=1)
    with torch.no_grad():
        out = model(ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
        states = model.model(ids, attention_mask=mask).last_hidden_state
        expected = model.classifier(torch.tanh(model.dense(states[:, 0])))
        left = model(left_ids, attention_mask=left_mask).logits
    assert torch.allclose(out.logits, expected, atol=1e-6)
    assert torch.allclose(left[0], out.logits[1], atol=TOL), "left padding reads the same [CLS]"
    with pytest.raises(ValueError, match="cu_seqlens"):
        model(ids[:1], cu_seqlens=torch.tensor([0, 10], dtype=torch.int32))


def test_sequence_classification_losses_follow_the_problem_type():
    from transformers import AutoModelForSequenceClassification

    ids, mask = ragged_batch([10, 6])
    classifier = AutoModelForSequenceClassification.from_config(tiny_config(num_labels=3))
    logits = classifier(ids, attention_mask=mask).logits
    loss = classifier(ids, attention_mask=mask, labels=torch.tensor([0, 2])).loss
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits, torch.tensor([0, 2])))
    regression = AutoModelForSequenceClassification.from_config(tiny_config(num_labels=1))
    scores = regression(ids, attention_mask=mask).logits.squeeze(-1)
    target = torch.tensor([0.5, 1.0])
    loss = regression(ids, attention_mask=mask, labels=target).loss
    assert torch.allclose(loss, torch.nn.functional.mse_loss(scores, target))


@pytest.mark.slow
def test_padded_forward_compiles_without_graph_breaks():
    model = make_model(attn_backend="sdpa")
    ids, mask = ragged_batch([16, 9])
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        assert torch.allclose(compiled(ids, attention_mask=mask).last_hidden_state, expected, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_varlen_kernels_match_padded_sdpa_in_bf16_forward_and_backward():
    from neoembed.pretrain.neobert.attention import importable_kernels, varlen_kernel_for

    assert varlen_kernel_for("cuda", torch.bfloat16, importable_kernels()) != "sdpa_per_sequence"
    padded = NeoBERTForMaskedLM(tiny_config(attn_backend="sdpa")).cuda().to(torch.bfloat16)
    unpadded = NeoBERTForMaskedLM(tiny_config(attn_backend="unpadded")).cuda().to(torch.bfloat16)
    unpadded.load_state_dict(padded.state_dict())
    ids, mask = ragged_batch([200, 37, 512, 90], length=512)
    ids, mask = ids.cuda(), mask.cuda()
    labels = ids.masked_fill(~mask.bool(), -100)
    losses, grads = [], []
    for model in (padded, unpadded):
        loss = model(ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        losses.append(loss.item())
        grads.append(model.model.transformer_encoder[0].qkv.weight.grad.float())
    assert abs(losses[0] - losses[1]) < 0.02
    assert (grads[0] - grads[1]).abs().max() < 0.05 * grads[0].abs().max()

    real = mask.bool()
    cu = torch.nn.functional.pad(mask.sum(1).cumsum(0), (1, 0)).to(torch.int32)
    with torch.no_grad():
        packed = unpadded.model(ids[real][None], cu_seqlens=cu).last_hidden_state[0].float()
        reference = padded.model(ids, attention_mask=mask).last_hidden_state[real].float()
    assert (packed - reference).abs().max() < 0.05
