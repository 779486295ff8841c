"""NeoBERT: a pre-norm encoder with RoPE, SwiGLU and RMSNorm, as transformers `PreTrainedModel`s.

Module and parameter names match the released checkpoint (chandar-lab/NeoBERT on the Hugging Face Hub), so its
model.safetensors loads with no missing or unexpected keys. The forward accepts two layouts:

- padded: `input_ids` (batch, length) with an optional `attention_mask`;
- packed/unpadded: `input_ids` (tokens,) or (1, tokens) with `cu_seqlens` marking sequence boundaries.

A padded batch is run unpadded (linear layers on real tokens only) when the config's `attn_backend` says so,
or by default whenever it contains padding and unpadding pays (`attention.choose_backend`); the outputs are the
same as the padded path's at real tokens. Padding positions of `last_hidden_state` are zero on the unpadded path.

`compile_layers()` compiles each block's work around attention (norms, projections, RoPE, SwiGLU, residuals)
with torch.compile, one graph shared by all layers; attention itself stays a fused kernel call outside it, so
padded, unpadded and packed batches compile alike.

config.py, rope.py, attention.py and this file import only torch, transformers and each other (relatively), so
an exported model directory can carry them as remote code for environments without neoembed.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel, initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput, SequenceClassifierOutput

from .attention import (
    PaddedBatch,
    RepaddedBatch,
    VarlenBatch,
    autocast_dtype,
    choose_backend,
    importable_kernels,
    tracing,
    varlen_kernel_for,
)
from .config import IMPLEMENTATION_OF_BACKEND, NeoBERTConfig, backend_for_implementation
from .rope import RotaryEmbedding, apply_rotary


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in fp32 whatever the input dtype, cast back at the end."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).type_as(x)


class SwiGLU(nn.Module):
    """w3(silu(gate) * value), with gate and value the two halves of one fused `w12` projection."""

    def __init__(self, hidden_size: int, ffn_hidden_size: int):
        super().__init__()
        self.w12 = nn.Linear(hidden_size, 2 * ffn_hidden_size, bias=False)
        self.w3 = nn.Linear(ffn_hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = self.w12(x).chunk(2, dim=-1)
        return self.w3(F.silu(gate) * value)


class EncoderBlock(GradientCheckpointingLayer):
    """Pre-norm block: x + wo(attention(norm(x))), then x + ffn(norm(x)). Works on either batch layout."""

    def __init__(self, config: NeoBERTConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.attention_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.wo = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.ffn_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.ffn = SwiGLU(config.hidden_size, config.ffn_hidden_size)
        self.compiled: str | None = None  # the torch.compile backend the two regions around attention run on

    def attention_inputs(self, x, cos, sin):
        """q, k, v of the normed input, q and k rotated. The fused projection is laid out per head:
        [q_h | k_h | v_h] for each head h in turn."""
        # x: (batch, length, hidden) padded, or (tokens, hidden) unpadded/packed; "..." below is either.
        # qkv: (..., heads, 3 * head_dim); q, k, v: (..., heads, head_dim) each
        qkv = self.qkv(self.attention_norm(x)).unflatten(-1, (self.num_heads, 3 * self.head_dim))
        q, k, v = qkv.chunk(3, dim=-1)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def attention_output_and_ffn(self, x, attended):
        x = x + self.wo(attended.flatten(-2))  # attended (..., heads, head_dim) -> (..., hidden)
        return x + self.ffn(self.ffn_norm(x))

    def forward(self, x, cos, sin, batch: PaddedBatch | VarlenBatch):
        before, after = EncoderBlock.attention_inputs, EncoderBlock.attention_output_and_ffn
        if self.compiled:
            before, after = _compiled(before, self.compiled), _compiled(after, self.compiled)
        q, k, v = before(self, x, cos, sin)
        attended, weights = batch.attend(q, k, v)
        return after(self, x, attended), weights


@functools.cache
def _compiled(region, backend: str):
    """One compiled graph per region, shared by every layer (parameters are graph inputs, not constants);
    dynamic shapes, since token counts change from batch to batch."""
    return torch.compile(region, dynamic=True, backend=backend)


class NeoBERTPreTrainedModel(PreTrainedModel):
    config_class = NeoBERTConfig
    config: NeoBERTConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["EncoderBlock"]
    _supports_sdpa = True

    def _check_and_adjust_attn_implementation(
        self, attn_implementation: str | None, is_init_check: bool = False, allow_all_kernels: bool = False
    ) -> str:
        # transformers calls this at init and from `set_attn_implementation`. NeoBERT's attention is its own
        # (attention.py), so the request only selects `attn_backend`; transformers' flash-attn checks do not apply.
        self.config.attn_backend = backend_for_implementation(attn_implementation, self.config.attn_backend)
        return IMPLEMENTATION_OF_BACKEND[self.config.attn_backend]

    def compile_layers(self, backend: str = "inductor") -> None:
        """Compile every encoder block's regions around attention (see the module docstring) with torch.compile's
        `backend`; the compilation itself waits for the first forward."""
        for module in self.modules():
            if isinstance(module, EncoderBlock):
                module.compiled = backend

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        # The release's from-scratch init: uniform(-r, r) for linear and embedding weights, norms at one.
        if isinstance(module, nn.Linear):
            init.uniform_(module.weight, -self.config.decoder_init_range, self.config.decoder_init_range)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.uniform_(module.weight, -self.config.embedding_init_range, self.config.embedding_init_range)
        elif isinstance(module, RMSNorm):
            init.ones_(module.weight)


class NeoBERTModel(NeoBERTPreTrainedModel):
    def __init__(self, config: NeoBERTConfig):
        super().__init__(config)
        self.encoder = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.rotary = RotaryEmbedding(config)
        self.transformer_encoder = nn.ModuleList(
            EncoderBlock(config) for _ in range(config.num_hidden_layers)
        )
        self.layer_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder

    def set_input_embeddings(self, value):
        self.encoder = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: int | None = None,
        token_type_ids: torch.Tensor | None = None,  # accepted for BERT-style callers; NeoBERT has none
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutput | tuple:
        """A padded batch: `input_ids` (batch, length) and `attention_mask` (1 for real tokens; None: all real).
        Packed sequences: `input_ids` (tokens,) or (1, tokens) with `cu_seqlens` (int32 offsets, sequences + 1)
        and optionally `max_seqlen` (else computed). `position_ids` default to each sequence's own positions
        counting real tokens only, so padding and packing never shift them."""
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        x = self.encoder(input_ids) if inputs_embeds is None else inputs_embeds

        if cu_seqlens is not None:
            hidden, all_hidden, all_attn = self._forward_packed(
                x, cu_seqlens, max_seqlen, position_ids, output_attentions, output_hidden_states
            )
        else:
            hidden, all_hidden, all_attn = self._forward_batch(
                x, attention_mask, position_ids, output_attentions, output_hidden_states
            )
        if not return_dict:
            return tuple(v for v in (hidden, all_hidden, all_attn) if v is not None)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=all_hidden, attentions=all_attn)

    def _forward_packed(
        self, x, cu_seqlens, max_seqlen, position_ids, output_attentions, output_hidden_states
    ):
        """Sequences concatenated along one token dimension, `(tokens, hidden)` or `(1, tokens, hidden)`."""
        if output_attentions:
            raise ValueError("output_attentions needs a padded batch; it is not available with cu_seqlens")
        squeeze = x.dim() == 3
        if squeeze and x.shape[0] != 1:
            raise ValueError(f"packed input must have batch size 1, got shape {tuple(x.shape[:-1])}")
        x = x.reshape(-1, x.shape[-1])  # (tokens, hidden)
        cu_seqlens = cu_seqlens.to(device=x.device, dtype=torch.int32)  # (sequences + 1,): 0, end of 1st, ...
        if position_ids is None:
            position_ids = positions_from_cu_seqlens(cu_seqlens)  # (tokens,)
        if max_seqlen is None:
            max_seqlen = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
        batch = VarlenBatch(cu_seqlens, max_seqlen, kernel=_varlen_kernel(x))
        hidden, all_hidden, _ = self._run_layers(x, position_ids.reshape(-1), batch, output_hidden_states)
        if squeeze:
            hidden = hidden.unsqueeze(0)
            all_hidden = None if all_hidden is None else tuple(h.unsqueeze(0) for h in all_hidden)
        return hidden, all_hidden, None

    def _forward_batch(self, x, attention_mask, position_ids, output_attentions, output_hidden_states):
        """A padded (batch, length, hidden) input, run padded or unpadded per `attn_backend`."""
        batch_size, length = x.shape[:2]
        mask = None if attention_mask is None else attention_mask.to(device=x.device, dtype=torch.bool)
        if position_ids is None:
            # Positions count real tokens only, so a sequence gets the same positions however it is padded.
            if mask is None:
                position_ids = torch.arange(length, device=x.device).expand(batch_size, length)
            else:
                position_ids = (mask.long().cumsum(dim=1) - 1).clamp(min=0)  # long: ONNX has no bool cumsum

        # Nothing padded: drop the mask, so SDPA may pick its flash kernel. Inside a compiled graph the check
        # would be a data-dependent branch (a graph break), and a traced graph would fix the example's answer,
        # so there the mask is kept.
        traced = tracing()
        if mask is not None and not torch.compiler.is_compiling() and not traced and bool(mask.all()):
            mask = None
        device_type = x.device.type
        backend = choose_backend(
            self.config.attn_backend,
            device_type=device_type,
            dtype=x.dtype,
            autocast_dtype=autocast_dtype(device_type),
            importable=importable_kernels(),
            has_padding=mask is not None,
            output_attentions=output_attentions,
            traced=traced,
        )
        if backend != "unpadded":
            batch = PaddedBatch(key_mask=mask, eager=backend == "eager")
            return self._run_layers(x, position_ids, batch, output_hidden_states, output_attentions)

        if mask is None:
            mask = torch.ones(batch_size, length, dtype=torch.bool, device=x.device)  # (batch, length)
        token_index = mask.flatten().nonzero().squeeze(1)  # (tokens,): real tokens' rows of (batch * length)
        if traced:
            batch = RepaddedBatch(mask, token_index)
        else:
            seqlens = mask.sum(dim=1, dtype=torch.int32)  # (batch,)
            cu_seqlens = F.pad(seqlens.cumsum(0, dtype=torch.int32), (1, 0))  # (batch + 1,)
            batch = VarlenBatch(cu_seqlens, int(seqlens.max()), kernel=_varlen_kernel(x))
        hidden, all_hidden, _ = self._run_layers(  # (tokens, hidden): the linear layers see real tokens only
            x.flatten(0, 1)[token_index], position_ids.flatten()[token_index], batch, output_hidden_states
        )

        def repad(states: torch.Tensor) -> torch.Tensor:
            """(tokens, hidden) -> (batch, length, hidden), zeros at padding."""
            padded = states.new_zeros(batch_size * length, states.shape[-1])
            return padded.index_copy(0, token_index, states).view(batch_size, length, -1)

        all_hidden = None if all_hidden is None else tuple(repad(h) for h in all_hidden)
        return repad(hidden), all_hidden, None

    def _run_layers(self, x, position_ids, batch, output_hidden_states, output_attentions=False):
        """The layer stack on either layout. Hidden states follow the HF convention: the embedding output
        first, then each layer's output, the last one after the final norm (== last_hidden_state)."""
        cos, sin = self.rotary(position_ids)  # (..., head_dim // 2) each, "..." the layout of position_ids
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # broadcast over heads
        all_hidden = [x] if output_hidden_states else None
        all_attn = [] if output_attentions else None
        for i, layer in enumerate(self.transformer_encoder):
            x, weights = layer(x, cos, sin, batch)
            if output_attentions:
                all_attn.append(weights)
            if output_hidden_states and i < len(self.transformer_encoder) - 1:
                all_hidden.append(x)
        x = self.layer_norm(x)
        if output_hidden_states:
            all_hidden.append(x)
        return x, _as_tuple(all_hidden), _as_tuple(all_attn)


def _varlen_kernel(x: torch.Tensor) -> str:
    """The varlen kernel for layers computing on x: in autocast's dtype when autocast is on."""
    device_type = x.device.type
    return varlen_kernel_for(device_type, autocast_dtype(device_type) or x.dtype, importable_kernels())


def _as_tuple(states: list | None) -> tuple | None:
    return None if states is None else tuple(states)


def positions_from_cu_seqlens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Position ids restarting at 0 at each sequence start: [0, 3, 5] -> [0, 1, 2, 0, 1]."""
    seqlens = cu_seqlens[1:] - cu_seqlens[:-1]
    starts = torch.repeat_interleave(cu_seqlens[:-1], seqlens)
    return torch.arange(int(cu_seqlens[-1]), device=cu_seqlens.device) - starts


class NeoBERTForMaskedLM(NeoBERTPreTrainedModel):
    """NeoBERT with its MLM decoder: Linear(hidden -> vocab) with bias on the final-normed states, untied."""

    def __init__(self, config: NeoBERTConfig):
        super().__init__(config)
        self.model = NeoBERTModel(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.decoder

    def set_output_embeddings(self, value: nn.Linear):
        self.decoder = value

    # The Trainer passes `num_items_in_batch` (the accumulated batch's masked-token count) to models that say so.
    accepts_loss_kwargs = True

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: int | None = None,
        token_type_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
    ):
        """Inputs as `NeoBERTModel.forward`. `labels` as in HF MLM: the original token at masked positions, -100 elsewhere; the loss is the
        mean cross-entropy over masked tokens. With `num_items_in_batch` (the Trainer passes the masked-token
        count of the whole accumulated batch) the mean is taken over that count, so gradient accumulation
        weighs every masked token equally."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cu_seqlens=cu_seqlens,
            max_seqlen=max_seqlen,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden = outputs.last_hidden_state
        if labels is not None and self.config.sparse_prediction:
            targets = labels.flatten() != -100
            hidden, labels = hidden.flatten(0, -2)[targets], labels.flatten()[targets]
        logits = self.decoder(hidden)
        loss = None
        if labels is not None:
            flat_logits, flat_labels = logits.float().flatten(0, -2), labels.flatten().to(logits.device)
            if num_items_in_batch is None:
                loss = F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)
            else:
                loss = F.cross_entropy(flat_logits, flat_labels, ignore_index=-100, reduction="sum")
                loss = loss / num_items_in_batch
        result = MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return result if return_dict else result.to_tuple()


class NeoBERTForSequenceClassification(NeoBERTPreTrainedModel):
    """The release's head on the [CLS] state: dropout, dense, tanh, dropout, classifier."""

    def __init__(self, config: NeoBERTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = NeoBERTModel(config)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)  # type: ignore[arg-type]  # from id2label: never None
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        super()._init_weights(module)
        if module is self.dense or module is self.classifier:
            r = self.config.classifier_init_range
            init.uniform_(module.weight, -r, r)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ):
        """Classify the [CLS] state: the first real token of each row (so left padding works too). Padded
        batches only: `cu_seqlens` is accepted to refuse packed input with a clear error."""
        if cu_seqlens is not None:
            raise ValueError("sequence classification takes padded batches, not packed ones (cu_seqlens)")
        return_dict = self.config.return_dict if return_dict is None else return_dict
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        states, mask = outputs.last_hidden_state, attention_mask
        rows = torch.arange(states.shape[0], device=states.device)
        first_token = (
            mask.to(states.device).long().argmax(dim=1) if mask is not None else torch.zeros_like(rows)
        )
        cls = states[rows, first_token]
        pooled = torch.tanh(self.dense(self.dropout(cls)))
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        result = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return result if return_dict else result.to_tuple()
