"""`neoembed bench pretrain`: MLM training throughput, packed vs padded batches, with MFU.

A length-skewed synthetic corpus (many short documents, a few long ones, as web text is) is cut into batches
of the same token budget in both layouts: padded rows of one document each, or packed rows of several. Each
layout runs full training steps (forward, backward, AdamW) on the same model; throughput counts real tokens.
Padded batches are timed twice: computed with their padding (the paper's setting), and through neoembed's
unpadded path (linear layers on real tokens only). The packed batch is also unpacked into a padded batch of the same sequences to show both give the same loss.
"""

from __future__ import annotations

import time
from pathlib import Path

import datasets
import numpy as np
import torch

from neoembed.bench.report import markdown_table, write_report
from neoembed.pretrain import NeoBERTConfig, NeoBERTForMaskedLM
from neoembed.pretrain.batches import MLMBatches, count_real_tokens, packed_to_padded
from neoembed.pretrain.tokenizer import load_tokenizer
from neoembed.pretrain.trainer import training_flops_per_token

CONFIGS = {
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "full": {},
}
TARGET_SPEEDUP = 1.5


def skewed_corpus(num_docs: int, max_length: int, seed: int) -> datasets.Dataset:
    """Token ids of documents whose lengths are log-normal: most are short, a few fill max_length."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean=4.0, sigma=0.9, size=num_docs), 8, max_length).astype(int)
    docs = [[101, *rng.integers(1000, 30000, size=n - 2).tolist(), 102] for n in lengths]
    return datasets.Dataset.from_dict({"input_ids": docs, "length": lengths.tolist()})


def time_steps(model, optimizer, batches: MLMBatches, steps: int) -> tuple[float, int]:
    """Seconds and real tokens for `steps` training steps (after one untimed warm-up step)."""
    tokens, start = 0, None
    for item in range(steps + 1):
        if item == 1:
            start = time.perf_counter()
        batch = batches[item]
        if item:
            tokens += count_real_tokens(batch)
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start, tokens


def run(
    config_name: str,
    max_length: int,
    token_budget: int,
    steps: int,
    threads: int,
    peak_tflops: float | None,
    out_dir: Path,
    progress=print,
) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    tokenizer = load_tokenizer()
    corpus = skewed_corpus(num_docs=4000, max_length=max_length, seed=0)
    config = NeoBERTConfig(max_length=max(max_length, 512), **CONFIGS[config_name])
    model = NeoBERTForMaskedLM(config)
    model.config.sparse_prediction = True
    rows = max(1, token_budget // max_length)
    common = dict(
        max_length=max_length,
        batch_size=rows,
        num_items=steps + 1,
        seed=0,
        mask_rate=0.2,
        mask_mode="mask",
        tokenizer=tokenizer,
    )
    padded, packed = MLMBatches(corpus, packed=False, **common), MLMBatches(corpus, packed=True, **common)
    # (layout, batches, attention backend): the paper's padded batches computed with their padding, the same
    # batches through neoembed's unpadded path, and packed rows.
    layouts = [
        ("padded", padded, "sdpa"),
        ("padded, unpadded path", padded, "unpadded"),
        ("packed", packed, "unpadded"),
    ]

    results = {}
    for name, batches, backend in layouts:
        model.config.attn_backend = backend
        # Throughput only: a tiny learning rate keeps the shared model stable across layouts.
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        seconds, tokens = time_steps(model, optimizer, batches, steps)
        tokens_per_second = tokens / seconds
        flops = training_flops_per_token(config, batches.plans[0].attention_context(), decoder_fraction=0.2)
        mfu = tokens_per_second * flops / (peak_tflops * 1e12) if peak_tflops else None
        results[name] = {
            "layout": name,
            "real tokens/step": tokens // steps,
            "slots/step": rows * max_length,
            "tokens/s": tokens_per_second,
            "MFU": mfu if mfu is not None else "n/a",
        }
        progress(f"{name}: {tokens_per_second:,.0f} real tokens/s")

    packed_batch = packed[0]
    with torch.no_grad():
        model.config.attn_backend = "unpadded"
        packed_loss = model(**packed_batch).loss.item()
        model.config.attn_backend = "sdpa"  # the padded computation, padding and all
        padded_loss = model(**packed_to_padded(packed_batch)).loss.item()
    loss_gap = abs(packed_loss - padded_loss)
    speedup = results["packed"]["tokens/s"] / results["padded"]["tokens/s"]
    verdict = (
        f"packed/padded real tokens/s = {speedup:.2f}x "
        f"({'meets' if speedup >= TARGET_SPEEDUP else 'MISSES'} the {TARGET_SPEEDUP}x target); "
        f"|loss(packed) - loss(same sequences padded)| = {loss_gap:.1e}"
    )
    settings = dict(
        config=config_name,
        max_length=max_length,
        token_budget=token_budget,
        steps=steps,
        threads=threads,
        peak_tflops=peak_tflops,
    )
    rows_out = list(results.values())
    markdown = "\n\n".join(
        [
            "# neoembed bench pretrain",
            f"Settings: {settings}. Length-skewed corpus (log-normal lengths); full AdamW steps.",
            markdown_table(rows_out, list(rows_out[0])),
            f"- {verdict}",
        ]
    )
    payload = {
        "settings": settings,
        "rows": rows_out,
        "speedup": speedup,
        "loss_gap": loss_gap,
        "verdict": verdict,
    }
    json_path, md_path = write_report(out_dir, "pretrain", payload, markdown)
    return {**payload, "table": markdown, "json": str(json_path), "markdown": str(md_path)}
