"""`neoembed bench pretrain`: MLM training throughput and MFU, packed vs padded batches, on CPU or CUDA.

A length-skewed synthetic corpus (many short documents, a few long ones, as web text is) is cut into batches
of the same token budget in both layouts: padded rows of one document each, or packed rows of several. Each
layout runs full training steps (forward, backward, AdamW) on the same model, in fp32 or under bf16 autocast
over fp32 weights (as the Trainer trains); throughput counts real tokens. Padded batches are timed twice:
computed with their padding (the paper's setting), and through neoembed's unpadded path (linear layers on real
tokens only). Every batch is built and moved to the device before the clock starts, warm-up steps are left out,
and the device is synchronised around the timed steps. The packed batch is also unpacked into a padded batch
of the same sequences to show both give the same loss.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np
import torch

import neoembed.pretrain.neobert as neobert
from neoembed.bench.memory import available_memory, fit_token_budget, step_memory
from neoembed.bench.mfu import Mfu
from neoembed.bench.report import Report, Row, Table, WrittenReport, meets, write_report
from neoembed.bench.settings import PretrainBench, resolve_device
from neoembed.precision import resolve_precision, synchronize
from neoembed.pretrain import MLMBatches, batch_counts, packed_to_padded

CONFIGS: dict[str, dict[str, Any]] = {  # neobert.NeoBERTConfig fields
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "full": {},
}
TARGET_SPEEDUP = 1.5  # packed over padded real tokens/s
TARGET_MFU = 0.45  # packed, 1024 tokens, bf16, the 250M model on one H100
# Token slots per step when --token-budget is not given: enough to time on a CPU; on a GPU enough to keep the
# 250M model off launch overhead and inside 80 GB with padded batches.
DEFAULT_TOKEN_BUDGET = {"cpu": 8192, "cuda": 32768}


def skewed_corpus(num_docs: int, max_length: int, seed: int) -> datasets.Dataset:
    """Token ids of documents whose lengths are log-normal: most are short, a few fill max_length."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean=4.0, sigma=0.9, size=num_docs), 8, max_length).astype(int)
    docs = [[101, *rng.integers(1000, 30000, size=n - 2).tolist(), 102] for n in lengths]
    return datasets.Dataset.from_dict({"input_ids": docs, "length": lengths.tolist()})


def time_steps(model, batches: list[dict], warmup: int, autocast: torch.dtype | None, device: str) -> float:
    """Seconds for the training steps after the first `warmup` (which allocate, tune kernels and compile),
    each under autocast to `autocast` (weights stay fp32, as the Trainer's bf16 does) unless None."""
    # Throughput only: a tiny learning rate keeps the shared model stable across layouts.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=torch.device(device).type == "cuda")
    for step, batch in enumerate(batches):
        if step == warmup:
            synchronize(device)
            start = time.perf_counter()
        with torch.autocast(torch.device(device).type, dtype=autocast, enabled=autocast is not None):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return time.perf_counter() - start


@dataclass(frozen=True)
class Trial:
    """What every layout of one `bench pretrain` shares: the device, the precision, the model's config and the
    peak its MFU is measured against."""

    bench: PretrainBench
    device: str
    autocast: torch.dtype | None  # bf16 autocast over fp32 weights, or None: fp32
    config: neobert.NeoBERTConfig
    peak: float  # FLOP/s
    peak_source: str

    @property
    def remeasured(self) -> bool:
        """A measured peak (not a table entry or --peak-tflops) is measured again around each layout."""
        return self.peak_source.startswith("measured")

    def current_peak(self) -> float:
        if self.remeasured:
            return neobert.measured_matmul_flops(self.device, self.autocast or torch.float32)
        return self.peak

    def measure(self, model, batches: MLMBatches, backend: str, label: dict[str, str]) -> tuple[Row, Mfu]:
        bench, device = self.bench, self.device
        peak_before = self.current_peak()
        model.config.attn_backend = backend
        count = bench.warmup_steps + bench.steps
        steps = [{k: v.to(device) for k, v in batches[i].items()} for i in range(count)]
        counted = [batch_counts(b, bench.max_length) for b in steps[bench.warmup_steps :]]
        real, slots, squares, decoded = torch.stack(counted).sum(0).tolist()
        seconds = time_steps(model, steps, bench.warmup_steps, self.autocast, device)
        del steps
        peak_after = self.current_peak()
        flops = neobert.training_flops(self.config, real, squares, decoded)
        # Against the better of the peaks measured just before and after: a peak measured while another job
        # ran is low, and would inflate MFU (139.5% was once printed so).
        mfu = Mfu(flops / seconds, max(peak_before, peak_after))
        return Row(label, {
            "real tokens/step": real // bench.steps, "slots/step": slots // bench.steps,
            "packing efficiency": real / slots,
            "tokens/s": real / seconds, "TFLOP/s": flops / seconds / 1e12,
            "peak TFLOP/s before": peak_before / 1e12, "peak TFLOP/s after": peak_after / 1e12,
            "MFU": mfu.figure,
        }, note=None if mfu.possible else f"MFU: {mfu.text()}"), mfu  # fmt: skip


def run(bench: PretrainBench, progress=print) -> WrittenReport:
    device, max_length = resolve_device(bench.device), bench.max_length
    device_type = torch.device(device).type
    torch.set_num_threads(bench.threads)
    torch.manual_seed(0)
    autocast = torch.bfloat16 if resolve_precision(bench.dtype, device).train_bf16 else None
    config = neobert.NeoBERTConfig(max_length=max(max_length, 512), **CONFIGS[bench.config])
    memory = step_memory(config, max_length, value_bytes=2 if autocast else 4, scores=device_type == "cpu")
    requested = bench.token_budget or DEFAULT_TOKEN_BUDGET.get(device_type, DEFAULT_TOKEN_BUDGET["cpu"])
    explicit, available = bool(bench.token_budget), available_memory(device)
    budget = fit_token_budget(requested, explicit, max_length, memory, available)
    if budget.note:
        progress(budget.note)
    # transformers wraps `.to` in functools.wraps, which mypy types as unbound (self taken from `device`).
    model = neobert.NeoBERTForMaskedLM(config).to(device)  # type: ignore[arg-type]
    model.config.sparse_prediction = True
    if bench.compile:
        model.compile_layers()
    corpus = skewed_corpus(num_docs=4000, max_length=max_length, seed=0)
    common = dict(max_length=max_length, batch_size=max(1, budget.tokens // max_length), seed=0,
                  num_items=bench.warmup_steps + bench.steps, mask_rate=0.2, mask_mode="mask",
                  tokenizer=neobert.load_tokenizer())  # fmt: skip
    padded, packed = MLMBatches(corpus, packed=False, **common), MLMBatches(corpus, packed=True, **common)
    dtype = autocast or torch.float32
    peak, peak_source = neobert.device_peak(device, dtype, bench.peak_tflops or None)
    trial = Trial(bench, device, autocast, config, peak, peak_source)
    varlen = "unpadded, " + neobert.varlen_kernel_for(device_type, dtype, neobert.importable_kernels())
    # The paper's padded batches computed with their padding, the same batches through neoembed's unpadded
    # path, and packed rows.
    measured = {}
    for name, batches, backend in (("padded", padded, "sdpa"), ("padded, unpadded path", padded, "unpadded"),
                                   ("packed", packed, "unpadded")):  # fmt: skip
        label = {"layout": name, "attention": "sdpa, padded" if backend == "sdpa" else varlen}
        measured[name] = row, mfu = trial.measure(model, batches, backend, label)
        progress(f"{name}: {row['tokens/s']:,.0f} real tokens/s, MFU {mfu.text()}")
    loss_gap = packed_padded_loss_gap(model, packed[0], device, autocast)
    return write_report(report(trial, budget, measured, loss_gap), bench.out)


def report(trial: Trial, budget, measured: dict[str, tuple[Row, Mfu]], loss_gap: float) -> Report:
    bench, device = trial.bench, trial.device
    tokens = {name: row.number("tokens/s") for name, (row, _) in measured.items()}
    speedup = tokens["packed"] / tokens["padded"]
    unpadded_speedup = tokens["padded, unpadded path"] / tokens["padded"]
    remeasured = ", measured again before and after each layout" if trial.remeasured else ""
    cuda = torch.device(device).type == "cuda"
    target = f"; the target is {TARGET_MFU:.0%} on an H100 in bf16 at 1024 tokens" if cuda else ""
    verdicts = [
        f"packed/padded real tokens/s = {speedup:.2f}x "
        f"({meets(speedup >= TARGET_SPEEDUP)} the {TARGET_SPEEDUP}x target)",
        f"padded through the unpadded path / padded = {unpadded_speedup:.2f}x",
        f"packed MFU = {measured['packed'][1].text()} of {trial.peak / 1e12:,.3g} TFLOP/s "
        f"({trial.peak_source}{remeasured}){target}",
        f"|loss(packed) - loss(same sequences padded)| = {loss_gap:.1e}",
    ]
    settings = dict(config=bench.config, max_length=bench.max_length, token_budget=budget.tokens,
                    token_budget_note=budget.note, steps=bench.steps, warmup_steps=bench.warmup_steps,
                    threads=bench.threads, device=torch.cuda.get_device_name(device) if cuda else device,
                    dtype="bf16 autocast" if trial.autocast else "fp32", compile=bench.compile,
                    # significant digits: a tiny --peak-tflops stays visible
                    peak_tflops=float(f"{trial.peak / 1e12:.4g}"), peak_source=trial.peak_source)  # fmt: skip
    rows = [row for row, _ in measured.values()]
    intro = f"Settings: {settings}. Length-skewed corpus (log-normal lengths); full AdamW steps."
    payload = {"settings": settings, "rows": rows, "speedup": speedup, "loss_gap": loss_gap}
    return Report("pretrain", "neoembed bench pretrain", payload, [Table(rows)], [intro], verdicts)


def packed_padded_loss_gap(model, packed_batch: dict, device: str, autocast) -> float:
    """|loss| difference between a packed batch and the same sequences padded, computed with their padding."""
    losses = []
    under_autocast = torch.autocast(torch.device(device).type, dtype=autocast, enabled=autocast is not None)
    with torch.no_grad(), under_autocast:
        for backend, batch in (("unpadded", packed_batch), ("sdpa", packed_to_padded(packed_batch))):
            model.config.attn_backend = backend
            losses.append(model(**{k: v.to(device) for k, v in batch.items()}).loss.item())
    return abs(losses[0] - losses[1])
