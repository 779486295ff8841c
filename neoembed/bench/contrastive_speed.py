"""`neoembed bench contrastive --speed`: training pairs/s and peak memory of `neoembed contrastive` against
sentence-transformers' CachedMultipleNegativesRankingLoss, GradCache on both sides.

One contrastive settings object drives both trainers, so they share by construction the base model, the pairs
(the build's largest source, (query, positive) only: the library's loss would take negatives as more columns),
the global batch and GradCache mini-batch, precision, device, threads, max length, temperature, learning rate
and seed. neoembed trains as `neoembed contrastive` builds its trainer (compiled on CUDA), without what the
library's loss has no counterpart of (distillation, Matryoshka, prompts, LoRA, held-out scoring); the library
as a user would write it (`st_baseline.fit`). Each trainer runs in a fresh process of its own, so neither sees
the other's memory: `warmup_steps` untimed steps (compilation, first allocations), then `steps` timed ones.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from neoembed.bench import st_baseline
from neoembed.bench.contrastive import default_build, neoembed_settings, refuse_overrides
from neoembed.bench.memory import PeakMemory
from neoembed.bench.report import Report, Row, Table, WrittenReport, in_child, meets, write_report
from neoembed.bench.settings import ContrastiveBench, auto_training_precision
from neoembed.contrastive import ContrastiveSettings
from neoembed.precision import synchronize
from neoembed.recipes import field_path

TARGET_RATIO = 1.8  # neoembed's pairs/s over the library's cached loss (issue 60, on the GPU)
DEFAULT_STEPS = 5
TRAINERS = {"neoembed": "neoembed contrastive", "st": "ST CachedMNRL"}


class StepClock(TrainerCallback):
    """What a trainer did, read from the trainer itself: its global batch, the rows of its training data,
    its precision and device; the wall seconds of the steps after the first `warmup`, and the peak memory of
    training."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.figures: dict[str, Any] = {}

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        self.device = str(args.device)
        self.memory = PeakMemory(self.device)
        per_rank = args.per_device_train_batch_size * args.gradient_accumulation_steps
        self.figures = {
            "rows": len(train_dataloader.dataset),
            "global batch": per_rank * args.world_size,
            "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
            "device": args.device.type,
        }

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            synchronize(self.device)
            self.started, self.cpu_started = time.perf_counter(), time.process_time()
        elif state.global_step == state.max_steps:
            synchronize(self.device)
            self.figures |= {
                "timed steps": state.global_step - self.warmup,
                "seconds": time.perf_counter() - self.started,
                # every thread of the process: on a shared machine less disturbed by other jobs than wall time
                "cpu seconds": time.process_time() - self.cpu_started,
                "peak bytes": self.memory.peak_bytes(),
                "memory": self.memory.meaning,
            }


def neoembed_arm(settings_json: str, warmup: int) -> dict[str, Any]:
    """Child process: the trainer `neoembed contrastive` builds for the settings, trained and timed."""
    from neoembed.contrastive import build_trainer

    trainer = build_trainer(ContrastiveSettings.model_validate_json(settings_json))
    clock = StepClock(warmup)
    trainer.add_callback(clock)
    trainer.train()
    return {**clock.figures, "mini-batch": trainer.contrastive_loss.mini_batch_size}


def st_arm(settings_json: str, warmup: int, out: str) -> dict[str, Any]:
    """Child process: sentence-transformers' trainer and CachedMultipleNegativesRankingLoss on the settings'
    base, pairs, batch, mini-batch, precision, threads, length, temperature, learning rate and seed."""
    import torch
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    settings = ContrastiveSettings.model_validate_json(settings_json)
    train, loss = settings.train, settings.loss
    # `speed_settings` sets both: the bench's threads, and the mini-batch the two trainers share.
    threads, mini_batch_size = train.threads, loss.mini_batch_size
    assert threads is not None and mini_batch_size is not None
    torch.set_num_threads(threads)
    made, scale = [], 1 / loss.temperature  # made: the loss the trainer built, which reports its mini-batch

    def make_loss(model) -> CachedMultipleNegativesRankingLoss:
        made.append(CachedMultipleNegativesRankingLoss(model, scale=scale, mini_batch_size=mini_batch_size))
        return made[-1]

    clock = StepClock(warmup)
    st_baseline.fit(
        settings.model.base,
        st_baseline.pairs(Path(settings.data.path), settings.data.sources),
        make_loss,
        Path(out),
        None,
        st_baseline.Budget(train.max_steps, None, train.seed, train.precision),
        settings.model.max_length,
        [clock],
        learning_rate=settings.optim.lr,
        per_device_train_batch_size=train.batch_size,
        logging_steps=train.log_steps,
        save_strategy="no",
    )
    return {**clock.figures, "mini-batch": made[-1].mini_batch_size}


def speed_fields(bench: ContrastiveBench, source: str, total_steps: int) -> dict[str, Any]:
    """The recipe fields the speed mode sets: the library's pairs, batch and loss; nothing scored or saved."""
    chosen: tuple[tuple[Callable[[ContrastiveSettings], object], object], ...] = (
        (lambda r: r.data.sources, [source]),
        (lambda r: r.data.max_negatives, 0),  # the library's loss would take negatives as more columns
        (lambda r: r.data.max_rows, None),
        (lambda r: r.data.prompts, {}),
        (lambda r: r.model.lora, None),
        (lambda r: r.loss.mini_batch_size, bench.mini_batch_size),
        (lambda r: r.loss.distill, None),
        (lambda r: r.loss.matryoshka_dims, None),
        (lambda r: r.loss.base_pull, 0.0),
        (lambda r: r.loss.symmetric, False),
        (lambda r: r.train.batch_size, bench.batch_size),
        (lambda r: r.train.grad_accum, 1),
        (lambda r: r.train.log_steps, total_steps),
        # past the last step: no checkpoint between timed steps (the Trainer still saves once at its end)
        (lambda r: r.train.save_steps, 2 * total_steps),
        (lambda r: r.eval.sets, []),
        (lambda r: r.export.base_weight, 0.0),
    )
    return {field_path(ContrastiveSettings, select): value for select, value in chosen}


def speed_settings(bench: ContrastiveBench, recipe: Path, data: Path, precision: str, overrides: dict):
    """The recipe with the user's overrides, the fields every compared trainer shares, and the speed mode's
    own (`speed_fields`) on the build's largest source (its stats.json, written last by the build)."""
    total = bench.warmup_steps + (bench.steps or DEFAULT_STEPS)
    sources = json.loads((data / "stats.json").read_text())["sources"]
    speed = speed_fields(bench, max(sources, key=lambda name: sources[name]["rows_out"]), total)
    refuse_overrides(
        overrides,
        speed,
        "set by the speed mode (--batch-size, --mini-batch-size: the same pairs, batch and loss as "
        "sentence-transformers' cached loss, nothing scored or saved)",
    )
    run_dir, budget = bench.out / f"speed-{precision}-neoembed", st_baseline.Budget(total, None, 0, precision)
    return neoembed_settings(recipe, bench.model, data, run_dir, budget, bench.threads, overrides | speed)


def speed_precisions(bench: ContrastiveBench) -> tuple[str, ...]:
    return bench.precisions or (auto_training_precision(),)


def run(bench: ContrastiveBench) -> WrittenReport:
    from neoembed.packaged import resolve_recipe
    from neoembed.recipes import parse_overrides

    recipe = resolve_recipe(bench.recipe)
    overrides = parse_overrides([f"--{item}" for item in bench.overrides])
    data = bench.data or default_build(bench.out / "data", bench.rows)
    arms = {}
    for precision in speed_precisions(bench):
        settings = speed_settings(bench, recipe, data, precision, overrides)
        ours, theirs = bench.out / f"speed-{precision}-neoembed", bench.out / f"speed-{precision}-st"
        for run_dir in (ours, theirs):  # timings are never reused
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.mkdir(parents=True)
        # each trainer in a fresh process of its own
        plan = settings.model_dump_json()
        arms[precision] = {
            "neoembed": in_child(neoembed_arm, plan, bench.warmup_steps, work=ours),
            "st": in_child(st_arm, plan, bench.warmup_steps, str(theirs), work=theirs),
        }
    return write_report(report(bench, recipe, data, settings, arms), bench.out)


def pairs_per_s(figures: dict[str, Any], seconds: str = "seconds") -> float:
    return figures["timed steps"] * figures["global batch"] / figures[seconds]


def report(bench: ContrastiveBench, recipe: Path, data: Path, settings, arms: dict[str, dict]) -> Report:
    rows, ratios = [], {}
    for precision, measured in arms.items():
        for trainer, f in measured.items():
            rows.append(Row({"precision": precision, "trainer": TRAINERS[trainer]}, {
                "pairs in source": f["rows"], "global batch": f["global batch"],
                "mini-batch": f["mini-batch"], "timed steps": f["timed steps"], "pairs/s": pairs_per_s(f),
                "pairs/CPU s": pairs_per_s(f, "cpu seconds"), "peak memory GiB": f["peak bytes"] / 2**30,
                "process peak RSS GiB": f["peak_rss_gib"],
            }))  # fmt: skip
        ours, theirs = measured["neoembed"], measured["st"]
        ratios[precision] = {
            "pairs_per_s": pairs_per_s(ours) / pairs_per_s(theirs),
            "pairs_per_cpu_s": pairs_per_s(ours, "cpu seconds") / pairs_per_s(theirs, "cpu seconds"),
            "peak_memory": ours["peak bytes"] / theirs["peak bytes"],
        }
    first = next(iter(arms.values()))["neoembed"]
    intro = [
        f"Base {bench.model}, recipe {recipe.stem}, pairs: source {settings.data.sources[0]} of {data} "
        f"({first['rows']:,} rows), max length {settings.model.max_length}, {bench.threads} CPU thread(s), "
        f"device {first['device']}; {bench.warmup_steps} untimed step(s), then {first['timed steps']} timed. "
        "Each trainer in a fresh process of its own; neoembed compiles its encoder where `train.compile` "
        "auto does (CUDA), the library's trainer as it ships.",
        f"Peak memory: {first['memory']}.",
    ]
    verdicts = [
        f"{precision}: neoembed / ST pairs/s = {r['pairs_per_s']:.2f}x "
        f"({meets(r['pairs_per_s'] >= TARGET_RATIO)} the {TARGET_RATIO}x target set for the GPU; "
        f"per CPU second {r['pairs_per_cpu_s']:.2f}x); peak memory {r['peak_memory']:.2f}x ST's "
        f"({meets(r['peak_memory'] <= 1.0)} 'no higher')"
        for precision, r in ratios.items()
    ]
    payload = {"settings": settings, "rows": rows, "ratios": ratios, "target_ratio": TARGET_RATIO}
    payload |= {"arms": arms, "warmup_steps": bench.warmup_steps, "threads": bench.threads}
    return Report(
        "contrastive-speed", "neoembed bench contrastive --speed", payload, [Table(rows)], intro, verdicts
    )
