"""`neoembed bench encode`: NeoBERT forward throughput, padded vs unpadded path, fp32 vs bf16.

Both paths run the same weights on the same batch inside one process; the unpadded path's advantage is that
its linear layers and attention see only real tokens. Throughput counts real (non-padding) tokens, so the two
paths are compared on the work a user wants done. Timings are best-of-N with the two paths interleaved, so
machine noise affects both alike.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from neoembed.bench.report import markdown_table, write_report
from neoembed.pretrain import NeoBERTConfig, NeoBERTModel, tiny_config
from neoembed.pretrain.batches import padded_width

CONFIGS = {"tiny": tiny_config, "full": NeoBERTConfig}
# Tokens per timed batch: enough work to time well, small enough that the 250M model runs in seconds on CPU.
DEFAULT_TOKENS_PER_BATCH = {"tiny": 8192, "full": 2048}
MIXED_RANGE = (16, 512)
TARGET_SPEEDUP = 1.4  # the target: unpadded >= 1.4x padded real tokens/s on the mixed batch


@dataclass
class Case:
    name: str
    lengths: list[int]


def build_cases(fixed_lengths: list[int], tokens_per_batch: int, max_length: int, seed: int) -> list[Case]:
    cases = [
        Case(f"fixed {n}", [n] * max(1, tokens_per_batch // n)) for n in fixed_lengths if n <= max_length
    ]
    rng = random.Random(seed)
    low, high = MIXED_RANGE
    count = max(2, tokens_per_batch // ((low + high) // 2))
    cases.append(Case(f"mixed {low}..{high}", [rng.randint(low, high) for _ in range(count)]))
    return cases


def make_batch(lengths: list[int], vocab_size: int, device: str, seed: int):
    """Right-padded random ids and mask; the padded length is rounded up to a multiple of 8, as in training."""
    gen = torch.Generator().manual_seed(seed)
    width = padded_width(max(lengths))
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1000, vocab_size, (n,), generator=gen)
        mask[row, :n] = 1
    return ids.to(device), mask.to(device)


def _forward(model: NeoBERTModel, backend: str, ids, mask) -> torch.Tensor:
    model.config.attn_backend = backend
    return model(ids, attention_mask=mask).last_hidden_state


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_paths(model, ids, mask, repeats: int, device: str) -> dict[str, float]:
    """Best-of-`repeats` seconds per forward for each path, the two interleaved in alternating order."""
    best = {"sdpa": float("inf"), "unpadded": float("inf")}
    for rep in range(repeats):
        order = ("sdpa", "unpadded") if rep % 2 == 0 else ("unpadded", "sdpa")
        for backend in order:
            _synchronize(device)
            start = time.perf_counter()
            _forward(model, backend, ids, mask)
            _synchronize(device)
            best[backend] = min(best[backend], time.perf_counter() - start)
    return best


def max_path_difference(model, ids, mask) -> float:
    """Largest |padded - unpadded| over real tokens' hidden states."""
    real = mask.bool()
    padded = _forward(model, "sdpa", ids, mask)[real].float()
    unpadded = _forward(model, "unpadded", ids, mask)[real].float()
    return (padded - unpadded).abs().max().item()


def run(
    configs: list[str],
    dtypes: list[str],
    fixed_lengths: list[int],
    repeats: int,
    threads: int,
    device: str,
    tokens_per_batch: int | None,
    out_dir: Path,
    progress=print,
) -> dict:
    torch.set_num_threads(threads)
    rows = []
    for config_name in configs:
        model = NeoBERTModel(CONFIGS[config_name]()).eval().to(device)
        budget = tokens_per_batch or DEFAULT_TOKENS_PER_BATCH[config_name]
        cases = build_cases(fixed_lengths, budget, model.config.max_length, seed=0)
        for dtype_name in dtypes:
            model.to(torch.bfloat16 if dtype_name == "bf16" else torch.float32)
            with torch.inference_mode():
                _forward(
                    model, "unpadded", *make_batch([16, 8], model.config.vocab_size, device, 0)
                )  # warm-up
                for case in cases:
                    ids, mask = make_batch(case.lengths, model.config.vocab_size, device, seed=1)
                    seconds = time_paths(model, ids, mask, repeats, device)
                    real_tokens = int(mask.sum())
                    row = {
                        "config": config_name,
                        "case": case.name,
                        "dtype": dtype_name,
                        "batch": len(case.lengths),
                        "real tokens": real_tokens,
                        "padded tokens": ids.numel(),
                        "padded tok/s": real_tokens / seconds["sdpa"],
                        "unpadded tok/s": real_tokens / seconds["unpadded"],
                        "speedup": seconds["sdpa"] / seconds["unpadded"],
                        "max |diff|": max_path_difference(model, ids, mask),
                    }
                    rows.append(row)
                    progress(
                        f"{config_name} {case.name} {dtype_name}: padded {row['padded tok/s']:,.0f} tok/s, "
                        f"unpadded {row['unpadded tok/s']:,.0f} tok/s ({row['speedup']:.2f}x)"
                    )
        del model
    return _report(rows, out_dir, repeats=repeats, threads=threads, device=device)


def _report(rows: list[dict], out_dir: Path, **settings) -> dict:
    target_rows = [r for r in rows if r["case"].startswith("mixed") and r["dtype"] == "fp32"]
    verdicts = [
        f"{r['config']}: mixed-length fp32 unpadded/padded = {r['speedup']:.2f}x "
        f"({'meets' if r['speedup'] >= TARGET_SPEEDUP else 'MISSES'} the {TARGET_SPEEDUP}x target; "
        f"max |diff| {r['max |diff|']:.1e})"
        for r in target_rows
    ]
    columns = list(rows[0]) if rows else []
    markdown = "\n\n".join(
        [
            "# neoembed bench encode",
            f"Settings: {settings}. Throughput counts real tokens; best of {settings['repeats']} runs.",
            markdown_table(rows, columns),
            "\n".join(f"- {v}" for v in verdicts),
        ]
    )
    payload = {"settings": settings, "rows": rows, "verdicts": verdicts}
    json_path, md_path = write_report(out_dir, "encode", payload, markdown)
    return {**payload, "json": str(json_path), "markdown": str(md_path), "table": markdown}
