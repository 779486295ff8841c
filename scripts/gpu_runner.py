"""The GPU run (scripts/gpu_bench.py run): the stages of `gpu_stages` one after another, each in its own
process under a time limit, each skipped when it has already passed (a short GPU window can be used twice),
every result in one folder: `<stage>/stage.json` beside the stage's own files, `environment.json` (GPU, torch,
CUDA, kernels), and `gpu.json`/`gpu.md` over all stages. A dry run runs the same stages at tiny sizes on the
CPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from gpu_stages import Sizes, Stage, corpus_path, plan, selected_stages, sizes_for

from neoembed.bench import Report, Row, Table, WrittenReport, write_report
from neoembed.extras import install_hint
from neoembed.run_files import read_jsonl, write_text

STAGE_FILE = "stage.json"
Figures = dict[str, float | int | None]  # a stage's figures by name (test counts, training rates)
MIN_STAGE_SECONDS = 30  # a stage with less time left than this is not started


@dataclass(frozen=True)
class RunSettings:
    """What a run does; scripts/gpu_bench.py's options say what each field means and its default."""

    out: Path
    dry_run: bool
    stages: tuple[str, ...]  # () for all
    stage_timeout_s: float
    budget_s: float
    wordnet_build: Path | None


@dataclass
class StageResult:
    name: str
    title: str
    status: Literal["passed", "failed", "timeout", "skipped"]
    seconds: float
    command: list[str]
    reason: str | None = None  # why it was skipped, failed or timed out
    figures: Figures = field(default_factory=dict)  # what the stage measured beyond its own report files

    @classmethod
    def read(cls, path: Path) -> StageResult:
        return cls(**json.loads(path.read_text()))


def environment(dry_run: bool, sizes: Sizes) -> dict[str, object]:
    """The GPU, torch and CUDA versions and the attention kernels the figures were measured with."""
    import torch

    from neoembed.pretrain.neobert import available_backends

    cuda = torch.cuda.is_available()
    return {
        "dry_run": dry_run,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "python": sys.version.split()[0],
        "kernels": available_backends(),
        "sizes": asdict(sizes),
    }


# Common English words: the synthetic corpus needs real lengths, not real meaning.
WORDS = ["the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
         "from", "his", "an", "were", "are", "which", "this", "be", "or", "has", "had", "not", "but",
         "first", "one", "their", "its", "new", "after", "who", "they", "have", "her", "she", "two",
         "been", "other", "when", "there", "all", "during", "into", "school", "time", "may", "years",
         "more", "most", "only", "over", "city", "some", "world", "would", "where", "later", "up", "such",
         "used", "many", "can", "state", "about", "national", "out", "known", "university", "united",
         "then", "made"]  # fmt: skip


def write_corpus(path: Path, documents: int, max_words: int, seed: int = 0) -> None:
    """Documents of common English words with log-normal lengths (most short, a few long), as web text is:
    tokens/s and MFU need real lengths, not real meaning."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean=np.log(max_words / 8), sigma=1.0, size=documents), 4, max_words)
    lines = (" ".join(rng.choice(WORDS, size=int(n))) for n in lengths)
    write_text(path, "\n".join(lines) + "\n")


def why_skipped(stage: Stage) -> str | None:
    missing = [module for module in stage.needs if find_spec(module) is None]
    if missing:
        return "; ".join(f"needs {module}: {install_hint(module)}" for module in missing)
    absent = [str(path) for path in stage.needs_files if not path.exists()]
    return f"needs {', '.join(absent)}" if absent else None


def run_command(stage: Stage, command: list[str], timeout: float) -> tuple[str, str | None]:
    """(status, reason) of the stage's `command`, its output in out/log.txt; on timeout its whole process
    group is killed (servers and DataLoader workers included)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **stage.env}
    with (stage.out / "log.txt").open("w") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return "timeout", f"stopped after {timeout:.0f} s"
    if code != 0:
        tail = (stage.out / "log.txt").read_text(errors="replace").strip().splitlines()[-3:]
        return "failed", f"exit code {code}: " + " / ".join(tail)
    return "passed", None


def junit_counts(path: Path) -> dict[str, int]:
    suite = ElementTree.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    return {**counts, "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]}


def training_rates(metrics: Path) -> Figures:
    """Median real tokens/s and MFU over the logged training steps of a run's metrics.jsonl."""
    rated = [row for row in read_jsonl(metrics) if "tokens_per_s" in row]
    if not rated:
        return {}
    return {
        "tokens_per_s": float(np.median([row["tokens_per_s"] for row in rated])),
        "mfu": float(np.median([row["mfu"] for row in rated if "mfu" in row])) if "mfu" in rated[0] else None,
        "packing_efficiency": rated[-1].get("packing_efficiency"),
        "logged_steps": len(rated),
    }


def stage_figures(stage: Stage) -> Figures:
    """What a stage measured that its own report files do not hold in one place."""
    if (stage.out / "junit.xml").is_file():
        return junit_counts(stage.out / "junit.xml")
    if (stage.out / "run" / "metrics.jsonl").is_file():
        return training_rates(stage.out / "run" / "metrics.jsonl")
    return {}


def run_stage(stage: Stage, timeout: float) -> StageResult:
    stage.out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", *stage.command]
    reason = why_skipped(stage)
    if reason is not None:
        return StageResult(stage.name, stage.title, "skipped", 0.0, command, reason)
    if stage.recipe is not None:
        write_text(stage.out / "recipe.yaml", yaml.safe_dump(stage.recipe, sort_keys=False))
    start = time.monotonic()
    status, reason = run_command(stage, command, timeout)
    seconds = time.monotonic() - start
    return StageResult(stage.name, stage.title, status, seconds, command, reason, stage_figures(stage))


def run(settings: RunSettings, progress: Callable[[str], object] = print) -> WrittenReport:
    root = settings.out
    sizes = sizes_for(settings.dry_run)
    root.mkdir(parents=True, exist_ok=True)
    write_text(root / "environment.json", json.dumps(environment(settings.dry_run, sizes), indent=2) + "\n")
    if not corpus_path(root).is_file():
        write_corpus(corpus_path(root), sizes.corpus_documents, sizes.corpus_max_words)
    deadline = time.monotonic() + settings.budget_s
    wanted = selected_stages(settings.stages)
    results = []
    for stage in plan(settings.dry_run, root, settings.wordnet_build):
        if wanted and stage.name not in wanted:
            continue
        done = stage.out / STAGE_FILE
        if done.is_file() and StageResult.read(done).status == "passed":
            progress(f"{stage.name}: passed before, kept")
            results.append(StageResult.read(done))
            continue
        timeout = min(settings.stage_timeout_s, deadline - time.monotonic())
        if timeout < MIN_STAGE_SECONDS:
            reason = f"{max(timeout, 0):.0f} s left of the run's time budget"
            result = StageResult(stage.name, stage.title, "skipped", 0.0, [], reason)
        else:
            progress(f"{stage.name}: {stage.title} (at most {timeout:.0f} s)")
            result = run_stage(stage, timeout)
        write_text(done, json.dumps(asdict(result), indent=2) + "\n")
        progress(
            f"{stage.name}: {result.status} in {result.seconds:.0f} s"
            + (f" ({result.reason})" if result.reason else "")
        )
        results.append(result)
    return write_report(summary_report(results, settings.dry_run), root)


def summary_report(results: list[StageResult], dry_run: bool) -> Report:
    rows = [Row({"stage": r.name, "what": r.title}, {"status": r.status, "seconds": round(r.seconds, 1)},
                note=r.reason or "") for r in results]  # fmt: skip
    mode = "dry run: tiny sizes on the CPU" if dry_run else "CUDA"
    return Report(
        name="gpu",
        title="GPU run (scripts/gpu_bench.py)",
        payload={"dry_run": dry_run, "stages": results},
        tables=[Table(rows, ["stage", "what", "status", "seconds", "note"])],
        intro=[
            f"Mode: {mode}. Each stage's files are under its own folder; environment.json names the kernels."
        ],
    )
