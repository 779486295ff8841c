"""docs/benchmarks/gpu.md, written from a GPU run's folder (scripts/gpu_bench.py docs): the runbook, each
target of issue 30 beside the figure measured for it (met, missed, or not measured), every stage's status and
the environment.

Only the JSON is read, so the page can be rebuilt from the committed results (docs/benchmarks/gpu/) at any
time; `notes.md` in that folder (the defects a run found, in words) is copied under the tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpu_runner import STAGE_FILE
from gpu_stages import CUDA

from neoembed.bench import Mfu, Row, markdown_table
from neoembed.run_files import write_text


@dataclass(frozen=True)
class Verdict:
    target: str
    goal: str
    measured: str
    met: bool | None  # None: not measured (or not measurable from what the run recorded)

    def row(self) -> Row:
        word = {True: "met", False: "missed", None: "not measured"}[self.met]
        return Row({"target": self.target, "goal": self.goal}, {"measured": self.measured, "verdict": word})


class Results:
    """A GPU run's folder, read-only."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.environment = self._json("environment.json") or {}
        self.sizes = self.environment.get("sizes") or asdict(CUDA)  # before a run: the sizes it will take

    def _json(self, relative: str) -> dict[str, Any] | None:
        path = self.root / relative
        return json.loads(path.read_text()) if path.is_file() else None

    def stage(self, name: str) -> dict[str, Any] | None:
        return self._json(f"{name}/{STAGE_FILE}")

    def report(self, stage: str, name: str) -> dict[str, Any] | None:
        return self._json(f"{stage}/{name}.json")

    def stages(self) -> list[dict[str, Any]]:
        """Every stage of the last run, in the order it ran them."""
        return (self._json("gpu.json") or {}).get("stages", [])


def _row(report: dict[str, Any] | None, case: str, mode: str = "eager") -> dict[str, Any] | None:
    """The first row of `case`, in `mode` where rows have one (results before the compiled arms: eager)."""
    rows = (report or {}).get("rows", [])
    return next(
        (
            row
            for row in rows
            if str(row.get("case", "")).startswith(case) and row.get("mode", "eager") == mode
        ),
        None,
    )


def training_mfu(results: Results) -> Verdict:
    goal = "MFU >= 25% (aim 45%)"
    length = results.sizes["pretrain_length"]
    target = f"MLM training, packed {length}-token rows, {results.sizes.get('precision', 'bf16')}"
    figures = (results.stage("pretrain") or {}).get("figures") or {}
    if figures.get("mfu") is None:
        return Verdict(target, goal, "no MFU recorded", None)
    mfu = Mfu(figures["mfu"], 1.0)
    measured = f"{mfu.text()}, {figures['tokens_per_s']:,.0f} real tokens/s"
    return Verdict(target, goal, measured, mfu.ratio >= 0.25 if mfu.possible else None)


def mixed_speedup(results: Results) -> Verdict:
    goal = "unpadded >= 2x padded real tokens/s, outputs equal within bf16 tolerance"
    row = _row(results.report("encode-mixed", "encode"), "mixed")
    target = f"mixed-length batch ({results.sizes.get('mixed', '64,4096').replace(',', '..')} tokens)"
    if row is None or "speedup" not in row:
        return Verdict(target, goal, "not recorded", None)
    measured = f"{row['speedup']:.2f}x, largest difference {row['max |diff|']:.1e}"
    return Verdict(target, goal, measured, row["speedup"] >= 2.0)


def modernbert_mfu(mode: str) -> Callable[[Results], Verdict]:
    """NeoBERT's forward MFU against ModernBERT-base's, both eager or both compiled (`mode`)."""

    def verdict(results: Results) -> Verdict:
        length = results.sizes["long_length"]
        goal = "NeoBERT's MFU >= ModernBERT-base's"
        target = f"forward at {length} tokens vs ModernBERT-base, both {mode}"
        row = _row(results.report("encode-modernbert", "encode"), f"fixed {length}", mode)
        if row is None:
            return Verdict(target, goal, "not recorded", None)
        ours = f"NeoBERT {row['neobert tok/s']:,.0f} tokens/s (MFU {Mfu(row['of peak'], 1.0).text()})"
        if "modernbert of peak" not in row:  # results of a bench encode that did not count ModernBERT's FLOPs
            theirs = f"ModernBERT {row['modernbert tok/s']:,.0f} tokens/s (its MFU not recorded)"
            return Verdict(target, goal, f"{ours}, {theirs}", None)
        theirs_mfu = Mfu(row["modernbert of peak"], 1.0).text()
        theirs = f"ModernBERT {row['modernbert tok/s']:,.0f} tokens/s (MFU {theirs_mfu})"
        return Verdict(target, goal, f"{ours}, {theirs}", row["of peak"] >= row["modernbert of peak"])

    return verdict


def contrastive_speed(results: Results) -> Verdict:
    target = "neoembed contrastive vs ST CachedMultipleNegativesRankingLoss, 250M NeoBERT, GradCache"
    report = results.report("contrastive-speed", "contrastive-speed")
    if report is None:
        return Verdict(target, "pairs/s above the library's, peak memory no higher", "not recorded", None)
    goal = f"pairs/s >= {report['target_ratio']}x the library's, peak memory no higher"
    precision, ratio = next(iter(report["ratios"].items()))
    ours, theirs = (report["arms"][precision][arm] for arm in ("neoembed", "st"))
    measured = (
        f"{ratio['pairs_per_s']:.2f}x pairs/s, peak memory {ratio['peak_memory']:.2f}x "
        f"({ours['peak bytes'] / 2**30:.2f} vs {theirs['peak bytes'] / 2**30:.2f} GiB); global batch "
        f"{ours['global batch']}, mini-batch {ours['mini-batch']}, {precision}"
    )
    met = ratio["pairs_per_s"] >= report["target_ratio"] and ratio["peak_memory"] <= 1.0
    return Verdict(target, goal, measured, met)


def forward_rate(results: Results) -> Verdict:
    length = results.sizes["forward_length"]
    target, goal = f"forward inference, {length} tokens", ">= 0.9M tokens/s"
    row = _row(results.report("encode", "encode"), f"fixed {length}")
    if row is None:
        return Verdict(target, goal, "not recorded", None)
    best = max(row.get("padded tok/s", 0.0), row.get("unpadded tok/s", 0.0))
    return Verdict(target, goal, f"{best:,.0f} tokens/s", best >= 0.9e6)


def serve_ratio(results: Results) -> Verdict:
    target, goal = "neoembed serve vs direct encode", ">= 0.9x direct encode's throughput"
    rows = [
        r
        for r in (results.report("serve", "serve") or {}).get("rows", [])
        if str(r.get("path")).startswith("neoembed serve")  # the server rows; the others are direct encode
    ]
    if not rows:
        return Verdict(target, goal, "not recorded", None)
    best = max(rows, key=lambda r: r["ratio"])
    return Verdict(target, goal, f"{best['ratio']:.2f}x ({best['path']})", best["ratio"] >= 0.9)


def openai_ratio(results: Results) -> Verdict:
    """The serve stage's openai client round against encode at its best batch (its best backend), else, for
    runs before that round existed (2026-11-26), the retired `bench openai`'s serve-openai stage (encode at
    batch 32)."""
    target, goal = "neoembed serve answering the openai client", ">= 0.9x direct encode's throughput"
    serve = results.report("serve", "serve") or {}
    rounds = [
        (name, b)
        for r in serve.get("results", [])
        for name, b in r["backends"].items()
        if "openai_ratio" in b
    ]
    if rounds:
        name, best = max(rounds, key=lambda round_: round_[1]["openai_ratio"])
        measured = (f"{best['openai_ratio']:.2f}x encode at its best batch ({best['best_batch']}), "
                    f"p95 {best['openai_p95_ms']:,.0f} ms ({name})")  # fmt: skip
        return Verdict(target, goal, measured, best["openai_ratio"] >= 0.9)
    report = results.report("serve-openai", "openai")
    if report is None:
        return Verdict(target, goal, "not recorded", None)
    served = report["rows"][-1]
    measured = f"{report['ratio']:.2f}x, p95 {served['p95 ms']:,.0f} ms ({served['path']})"
    return Verdict(target, goal, measured, report["ratio"] >= 0.9)


def stage_passed(name: str, target: str, goal: str = "passes") -> Callable[[Results], Verdict]:
    def verdict(results: Results) -> Verdict:
        stage = results.stage(name)
        if stage is None or stage["status"] == "skipped":
            return Verdict(target, goal, (stage or {}).get("reason") or "not run", None)
        figures = stage.get("figures") or {}
        counts = ", ".join(f"{k} {v}" for k, v in figures.items() if k in ("passed", "failed", "skipped"))
        return Verdict(
            target, goal, f"{stage['status']}{': ' + counts if counts else ''}", stage["status"] == "passed"
        )

    return verdict


TARGETS = (
    training_mfu,
    mixed_speedup,
    modernbert_mfu("eager"),
    modernbert_mfu("compiled"),
    forward_rate,
    serve_ratio,
    openai_ratio,
    contrastive_speed,
    stage_passed("gpu-tests", "gpu-marked tests"),
    stage_passed("deepspeed", "DeepSpeed ZeRO-2, one GPU, a few steps"),
    stage_passed("contrastive", "neoembed contrastive, 250M NeoBERT, WordNet build"),
)

RUNBOOK = """\
## The one command

On a CPU machine with the registry, once (the wheels the GPU image lacks, at the lock's versions, into the
git-ignored `.whl/`; it prints their total and fails over 64 MiB):

```bash
.venv/bin/python scripts/gpu_wheelhouse.py
```

On the GPU machine, from the repository root (with `.whl` carried):

```bash
scripts/gpu_run.sh "$OUT"   # venv over the system packages, wheels --no-deps, then `gpu_bench.py run`
```

Each stage runs in its own process for at most 9 minutes and is kept when it passed before, so a second
window goes on where the first stopped. `STAGES=fast-by-default` runs issue 41's set (compiled training and
forward, ModernBERT compiled beside compiled, serve, contrastive against sentence-transformers' cached loss;
about 7 minutes, estimated in `scripts/gpu_stages.py`). Everything lands in `runs/bench/gpu/` (and,
packed, in `$OUT`): per stage a folder with `stage.json` and the bench's own JSON and Markdown,
`environment.json` (GPU, torch, CUDA, kernels) and `gpu.json`/`gpu.md`. Commit the JSON under
`docs/benchmarks/gpu/` and rebuild this page with `python scripts/gpu_bench.py docs docs/benchmarks/gpu`.
`python scripts/gpu_bench.py run --dry-run` runs every stage at tiny sizes on the CPU and writes the same
files.

MFU counts the model FLOPs of real tokens (`neoembed/pretrain/neobert/flops.py`) against the GPU's dense bf16
peak from the table there by device name (H100 SXM 989 TFLOP/s, H100 NVL 835, H100 PCIe 756, H200 989); on a
device without a table entry the peak is a matmul measured before and after each layout, and an MFU above
100% is reported as a measurement error. The contrastive stage trains on the `wordnet-build` stage's pairs
(built there without mining: the teacher's weights are 88 MB) or on a carried build (`WORDNET_BUILD`), without
mteb, which the wheelhouse leaves out (its polars runtime alone is 54 MB).
"""


def render(results: Results) -> str:
    env = results.environment
    if not env:
        measured_on = "Not run on a GPU yet: every target below waits for the first run."
    elif env.get("dry_run"):
        measured_on = "Measured on a CPU dry run (tiny sizes: the figures say nothing about a GPU)."
    else:
        measured_on = f"Measured on {env.get('gpu')}, torch {env.get('torch')}, CUDA {env.get('cuda')}."
    verdicts = [target(results) for target in TARGETS]
    parts = [
        "# GPU figures",
        "Written by `scripts/gpu_bench.py docs` from the JSON of `scripts/gpu_bench.py run`; "
        "do not edit by hand.",
        RUNBOOK.rstrip(),
        "## Targets",
        measured_on,
        markdown_table([v.row() for v in verdicts], ["target", "goal", "measured", "verdict"]),
    ]
    stages = [Row({"stage": s["name"]}, {"status": s["status"], "seconds": round(s["seconds"], 1)},
                  note=s.get("reason") or "") for s in results.stages()]  # fmt: skip
    if stages:
        parts += ["## Stages", markdown_table(stages, ["stage", "status", "seconds", "note"])]
    kernels = [Row({"backend": k}, {"status": v}) for k, v in env.get("kernels", {}).items()]
    if kernels:
        parts += ["## Kernels", markdown_table(kernels, ["backend", "status"])]
    notes = results.root / "notes.md"
    if notes.is_file():
        parts += ["## Defects found", notes.read_text().strip()]
    return "\n\n".join(parts) + "\n"


def write_page(results_dir: Path, page: Path) -> None:
    write_text(page, render(Results(results_dir)))
