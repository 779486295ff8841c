"""`neoembed bench encode`: NeoBERT forward throughput, padded vs unpadded path, fp32 vs bf16, and against
ModernBERT.

Both NeoBERT paths run the same weights on the same batch in one process; the unpadded path's advantage is
that its linear layers and attention see only real tokens. Throughput counts real tokens, the work a user wants
done. `--compare modernbert` times NeoBERT's `auto` path alone (which keeps the 250M comparison to minutes on a
CPU) beside transformers' ModernBERT on the same batches, built from `ModernBertConfig()` defaults
(ModernBERT-base's shape) with random weights: speed does not depend on them, so nothing is downloaded. With
`--compile` (the default on CUDA) every model is compiled before its warm-up and compared like for like: eager
beside eager, compiled beside compiled, one model each with both paths. Timings are best-of-N, the paths
interleaved in rotating order. Each row also gives NeoBERT's model GFLOP/s on its faster path and its share of
the peak: a square matmul in the same dtype measured here (or a known GPU's bf16 peak).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import torch

import neoembed.pretrain.neobert as neobert
from neoembed.bench.report import Report, Row, Table, WrittenReport, meets, rotated, write_report
from neoembed.bench.settings import EncodeBench, resolve_device
from neoembed.compilation import compile_backend, compile_encoder, compile_wanted
from neoembed.precision import resolve_precision, synchronize
from neoembed.pretrain import padded_width

CONFIGS: dict[str, Callable[[], Any]] = {"tiny": neobert.tiny_config, "full": neobert.NeoBERTConfig}
# The ModernBERT each NeoBERT size is compared with: ModernBERT-base's defaults for the 250M model, and a
# model of the tiny one's shape for smoke runs.
MODERNBERT_FIELDS: dict[str, dict[str, Any]] = {  # ModernBertConfig fields
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
    "full": {},
}
# Tokens per timed batch: enough work to time well, small enough that the 250M model runs in seconds on CPU;
# on a GPU enough tokens that the forward is not bound by kernel launches.
DEFAULT_TOKENS_PER_BATCH = {"tiny": 8192, "full": 2048}
GPU_TOKENS_PER_BATCH = 65536
DEFAULT_LENGTHS = [128, 512, 1024]
COMPARE_LENGTHS = [512, 1024, 2048, 4096]
TARGET_SPEEDUP = 1.4  # unpadded >= 1.4x padded real tokens/s on the mixed batch
TARGET_VS_MODERNBERT = 1.47  # the paper: NeoBERT 46.7% faster than ModernBERT at 4096 tokens
TARGET_SHARE_OF_PEAK = 0.5  # the 250M model's bf16 forward on CPU
Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (ids, mask) -> last hidden state


class Case(NamedTuple):
    name: str
    lengths: list[int]


def build_cases(
    fixed_lengths: list[int],
    tokens_per_batch: int,
    max_length: int,
    seed: int,
    mixed_range: tuple[int, int] = EncodeBench.model_fields["mixed"].default,
) -> list[Case]:
    cases = [
        Case(f"fixed {n}", [n] * max(1, tokens_per_batch // n)) for n in fixed_lengths if n <= max_length
    ]
    rng = random.Random(seed)
    low, high = mixed_range
    count = max(2, tokens_per_batch // ((low + high) // 2))
    cases.append(Case(f"mixed {low}..{high}", [rng.randint(low, high) for _ in range(count)]))
    return cases


def make_batch(lengths: list[int], vocab_size: int, device: str, seed: int):
    """Right-padded random ids and mask; the padded length is rounded up to a multiple of 8, as in training."""
    mask = (torch.arange(padded_width(max(lengths))) < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(1000, vocab_size, mask.shape, generator=torch.Generator().manual_seed(seed)) * mask
    return ids.to(device), mask.to(device)


def build_modernbert(config_name: str, device: str):
    """ModernBERT from transformers' config defaults (or the tiny shape), random weights, on `device`: with
    flash-attn's kernel (which unpads) where it imports on CUDA, else SDPA (padded, masked)."""
    from transformers import ModernBertConfig, ModernBertModel

    use_flash = device.startswith("cuda") and "flash_attn" in neobert.importable_kernels()
    for implementation in ("flash_attention_2", "sdpa") if use_flash else ("sdpa",):
        try:
            fields = MODERNBERT_FIELDS[config_name]
            # attn_implementation: taken at runtime by PreTrainedConfig, absent from the dataclass signature
            config = ModernBertConfig(attn_implementation=implementation, **fields)  # type: ignore[call-arg]
            return ModernBertModel(config).eval().to(device)
        except (ImportError, ValueError):
            continue
    raise RuntimeError("ModernBERT could not be built with SDPA")


def modernbert_forward_flops(config, lengths: list[int]) -> float:
    """ModernBERT's encoder forward FLOPs for sequences of `lengths`, counted as `flops.forward_flops` counts
    NeoBERT's, so the two MFUs compare: 2 x the matmul parameters a token goes through (q, k, v and output
    projections; GeGLU's input layer to 2 x intermediate and its output layer) and attention's 4 x hidden x
    L x keys per layer, where a global layer's keys are the whole sequence and a local layer's its window.
    Hand-written: transformers counts no FLOPs for a forward of given lengths."""
    hidden, ffn = config.hidden_size, config.intermediate_size
    kinds = config.layer_types  # "full_attention" or "sliding_attention", one per layer
    per_layer = 4 * hidden * hidden + 3 * hidden * ffn
    keys = {
        "full_attention": sum(n * n for n in lengths),
        "sliding_attention": sum(n * min(n, config.local_attention) for n in lengths),
    }
    return 2 * len(kinds) * per_layer * sum(lengths) + 4 * hidden * sum(keys[kind] for kind in kinds)


def _neobert_forward(model: neobert.NeoBERTModel, backend: str, compiled: bool | None = None) -> Forward:
    """NeoBERT on attention `backend`; `compiled` True or False runs its blocks compiled or eagerly (the flag
    `compile_layers` sets, here set per path so that one model has both), None as they are."""
    blocks = None if compiled is None else compile_backend() if compiled else ""

    def forward(ids, mask):
        model.config.attn_backend = backend
        if blocks is not None:
            for block in model.transformer_encoder:
                block.compiled = blocks or None
        return model(ids, attention_mask=mask).last_hidden_state

    return forward


def _modernbert_forward(model, compiled: bool) -> Forward:
    """ModernBERT compiled (`compile_encoder` replaced the instance's `forward`) or eagerly (its class's
    `forward`), so that one model has both paths."""
    forward = model.forward if compiled else partial(type(model).forward, model)
    return lambda ids, mask: forward(input_ids=ids, attention_mask=mask).last_hidden_state


def forward_paths(model, twin, compiled: bool) -> dict[str, Forward]:
    """The timed paths: NeoBERT padded and unpadded, or beside ModernBERT eager beside eager and, where
    compiled, compiled beside compiled."""
    if twin is None:
        return {"padded": _neobert_forward(model, "sdpa"), "unpadded": _neobert_forward(model, "unpadded")}
    paths = {
        "neobert": _neobert_forward(model, "auto", False),
        "modernbert": _modernbert_forward(twin, False),
    }
    if compiled:
        paths["neobert compiled"] = _neobert_forward(model, "auto", True)
        paths["modernbert compiled"] = _modernbert_forward(twin, True)
    return paths


def time_paths(paths: dict[str, Forward], ids, mask, repeats: int, device: str) -> dict[str, float]:
    """Best-of-`repeats` seconds per forward for each path, interleaved in rotating order."""
    best = dict.fromkeys(paths, float("inf"))
    for rep in range(repeats):
        for name in rotated(list(paths), rep):
            synchronize(device)
            start = time.perf_counter()
            paths[name](ids, mask)
            synchronize(device)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def max_path_difference(model, ids, mask) -> float:
    real = mask.bool()
    padded, unpadded = (
        _neobert_forward(model, path)(ids, mask)[real].float() for path in ("sdpa", "unpadded")
    )
    return (padded - unpadded).abs().max().item()


def auto_path(ids, mask, dtype: torch.dtype) -> str:
    return neobert.choose_backend(
        "auto",
        device_type=ids.device.type,
        dtype=dtype,
        autocast_dtype=None,
        importable=neobert.importable_kernels(),
        has_padding=not bool(mask.bool().all()),
        output_attentions=False,
    )


def run(settings: EncodeBench, progress=print) -> WrittenReport:
    device = resolve_device(settings.device)
    dtypes = encode_dtypes(settings.dtypes, device, progress)
    torch.set_num_threads(settings.threads)
    lengths = list(settings.lengths) or (COMPARE_LENGTHS if settings.compare else DEFAULT_LENGTHS)
    compiled = compile_wanted(settings.compile, torch.device(device).type)
    rows, attention, peaks = [], {}, {}
    for config_name in settings.configs:
        model = neobert.NeoBERTModel(CONFIGS[config_name]()).eval().to(device)
        twin = build_modernbert(config_name, device) if settings.compare else None
        if compiled:  # like for like: ModernBERT too (the untimed warm-up batches below compile them)
            compile_encoder(model)
            if twin is not None:
                compile_encoder(twin)
        budget = settings.tokens_per_batch or (
            GPU_TOKENS_PER_BATCH if device.startswith("cuda") else DEFAULT_TOKENS_PER_BATCH[config_name]
        )
        cases = build_cases(lengths, budget, model.config.max_length, seed=0, mixed_range=settings.mixed)
        paths = forward_paths(model, twin, compiled)
        for dtype_name in dtypes:
            dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
            if dtype_name not in peaks:  # measured once per dtype, so every row divides by the one reported
                peaks[dtype_name] = neobert.device_peak(device, dtype, None)
            kernel = neobert.varlen_kernel_for(torch.device(device).type, dtype, neobert.importable_kernels())
            attention[f"neobert {dtype_name}"] = f"padded: sdpa; unpadded: {kernel}"
            if twin is not None:
                attention[f"modernbert {dtype_name}"] = twin.to(dtype).config._attn_implementation
            model.to(dtype)
            label = {"config": config_name, "dtype": dtype_name}
            with torch.inference_mode():
                rows += measure_cases(
                    settings, label, model, twin, cases, paths, peaks[dtype_name][0], device, progress
                )
        del model, twin
    return write_report(_report(settings, device, compiled, rows, attention, peaks), settings.out)


def encode_dtypes(dtypes: tuple[str, ...], device: str, progress) -> tuple[str, ...]:
    """`auto`: fp32, and bf16 where the device has bf16 units; bf16 asked for without them says so."""
    bf16_hardware = resolve_precision("auto", device).bf16_supported
    if dtypes == ("auto",):
        return ("fp32", "bf16") if bf16_hardware else ("fp32",)
    if "bf16" in dtypes and not bf16_hardware:
        progress(f"note: bf16 has no matrix units on this {device}; torch emulates it, far slower than fp32")
    return dtypes


def measure_cases(
    settings: EncodeBench, label, model, twin, cases, paths, peak: float, device: str, progress
):
    """A row per case (with ModernBERT, per case and mode), after untimed warm-up batches."""
    rows, vocab_size = [], model.config.vocab_size
    # Untimed: a padded batch and one with nothing padded, each path's graphs when compiled.
    for warm_lengths in ([16, 8], [16, 16]):
        warm = make_batch(warm_lengths, vocab_size, device, 0)
        for forward in paths.values():
            forward(*warm)
    for case in cases:
        ids, mask = make_batch(case.lengths, vocab_size, device, seed=1)
        seconds = time_paths(paths, ids, mask, settings.repeats, device)
        case_label = {"config": label["config"], "case": case.name, "dtype": label["dtype"]}
        measured = [(case_label, seconds)]
        if twin is not None:  # a row per timed mode, each comparing the two models in it
            measured = [
                ({**case_label, "mode": mode}, {m: seconds[m + suffix] for m in ("neobert", "modernbert")})
                for mode, suffix in (("eager", ""), ("compiled", " compiled"))
                if f"neobert{suffix}" in paths
            ]
        for row_label, timed in measured:
            rows.append(_measured(row_label, case, model, twin, ids, mask, timed, peak))
            rates = [f"{path} {rows[-1][f'{path} tok/s']:,.0f}" for path in timed]
            progress(f"{' '.join(map(str, row_label.values()))}: {', '.join(rates)} tok/s")
    return rows


def _measured(label: dict[str, str], case: Case, model, twin, ids, mask, seconds: dict, peak: float) -> Row:
    """A case's row: real tokens/s of each path, NeoBERT's model GFLOP/s on its faster path and its share of
    `peak`; with no ModernBERT, the padded path's speed-up and difference, else the ratio and ModernBERT's."""
    real = int(mask.sum())
    neobert_seconds = min(seconds[p] for p in seconds if p != "modernbert")
    squares = sum(n * n for n in case.lengths)
    flops = neobert.forward_flops(model.config, sum(case.lengths), squares) / neobert_seconds
    figures = {"batch": len(case.lengths), "real tokens": real, "padded tokens": ids.numel(),
               "neobert GFLOP/s": flops / 1e9, "of peak": flops / peak}  # fmt: skip
    if twin is None:
        figures |= {"padded tok/s": real / seconds["padded"], "unpadded tok/s": real / seconds["unpadded"],
                    "speedup": seconds["padded"] / seconds["unpadded"],
                    "max |diff|": max_path_difference(model, ids, mask)}  # fmt: skip
    else:
        twin_flops = modernbert_forward_flops(twin.config, case.lengths) / seconds["modernbert"]
        figures |= {"neobert path": auto_path(ids, mask, model.dtype),
                    "neobert tok/s": real / seconds["neobert"],
                    "modernbert tok/s": real / seconds["modernbert"],
                    "neobert/modernbert": seconds["modernbert"] / seconds["neobert"],
                    "modernbert GFLOP/s": twin_flops / 1e9,
                    "modernbert of peak": twin_flops / peak}  # fmt: skip
    return Row(label, figures)


def compiled_pair(settings: EncodeBench, device: str, compiled: bool) -> str | None:
    """With --compare: whether the compiled pair was timed beside the eager one, or why not."""
    if settings.compare is None:
        return None
    if compiled:
        return "timed beside the eager pair"
    if settings.compile is False:
        return "not timed (--no-compile)"
    return f"not timed on {device}: compilation is on by default on CUDA only (--compile times it here)"


def _share_of_peak(row: Row, device: str) -> str:
    share = (
        f"NeoBERT at {row['neobert GFLOP/s']:,.0f} GFLOP/s, {row['of peak']:.0%} of the {row['dtype']} peak"
    )
    if row["dtype"] == "bf16" and device == "cpu":
        met = meets(row.number("of peak") >= TARGET_SHARE_OF_PEAK)
        share += f" ({met} the {TARGET_SHARE_OF_PEAK:.0%} target for bf16 on CPU)"
    return share


def _report(settings: EncodeBench, device: str, compiled: bool, rows: list[Row], attention, peaks) -> Report:
    def case(row: Row) -> str:  # config, case, dtype and (comparing with ModernBERT) mode
        return " ".join(str(row[key]) for key in ("config", "case", "dtype", "mode") if key in row.label)

    verdicts = [
        f"{r['config']}: mixed-length fp32 unpadded/padded = {r['speedup']:.2f}x "
        f"({meets(r.number('speedup') >= TARGET_SPEEDUP)} the {TARGET_SPEEDUP}x target; "
        f"max |diff| {r['max |diff|']:.1e})"
        for r in rows
        if r.get("speedup") and r.text("case").startswith("mixed") and r["dtype"] == "fp32"
    ]
    verdicts += [f"{case(r)}: {_share_of_peak(r, device)}" for r in rows if r["config"] == "full"]
    verdicts += [
        f"{case(r)}: NeoBERT ({r['neobert path']}) / ModernBERT = "
        f"{r['neobert/modernbert']:.2f}x (the paper reports {TARGET_VS_MODERNBERT}x at 4096 tokens on GPU)"
        for r in rows
        if r.get("neobert/modernbert") and (r["case"] == "fixed 4096" or r.text("case").startswith("mixed"))
    ]
    device_name = torch.cuda.get_device_name(device) if device.startswith("cuda") else device
    described = dict(repeats=settings.repeats, threads=settings.threads, device=device_name,
                     compare=settings.compare, compiled=compiled,
                     compiled_pair=compiled_pair(settings, device, compiled))  # fmt: skip
    peaks = {dtype: f"{flops / 1e9:,.0f} GFLOP/s ({source})" for dtype, (flops, source) in peaks.items()}
    intro = [
        f"Settings: {described}. Throughput counts real tokens; best of {settings.repeats} runs.",
        "Attention: " + "; ".join(f"{name}: {impl}" for name, impl in attention.items()),
        "Peaks: " + "; ".join(f"{dtype}: {peak}" for dtype, peak in peaks.items()),
    ]
    payload = {"settings": described, "attention": attention, "peaks": peaks, "rows": rows}
    return Report("encode", "neoembed bench encode", payload, [Table(rows)], intro, verdicts)
