"""`neoembed bench scale`: each job on 1 rank and on N ranks (torchrun over gloo, one thread each), measured.

- build-data: the mining teacher's encoding, the stage that takes 99% of a full build, on a share of WordNet
  glosses per rank (as a split build gives each rank its parts); texts/s and the speed-up.
- pretrain: a small NeoBERT's MLM training with the same per-rank batch; real tokens/s per rank, and the time a
  step gains on N ranks (gradient all-reduce and, on a small machine, cores shared).
- contrastive: InfoNCE with embeddings gathered across ranks, the same per-rank batch; pairs/s per rank.

Every run is a real launch (`torchrun -m neoembed ...` or this module's encode worker), so the figures include
process start-up only where a user's would; rates leave out the first steps and model loading.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from neoembed.bench.report import Report, Row, Table, WrittenReport, meets, timed, write_report
from neoembed.bench.settings import ScaleBench
from neoembed.run_files import METRICS_FILE, read_jsonl

TARGET_ENCODE_SPEEDUP = 1.8  # 2 ranks x 1 thread vs 1 rank x 1 thread (issue target)


def _launch(ranks: int, cwd: Path, *args: str) -> None:
    """`python ARGS` in `cwd`, on `ranks` ranks (torchrun) of one thread each; a failure says how it ended."""
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    command = [sys.executable, *(torchrun if ranks > 1 else []), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr[-2000:]}")


def encode_worker(texts: int, out: str) -> None:
    """One rank's share of the glosses, encoded by the mining teacher after a barrier (all ranks start
    together); rank 0 writes the wall time of the slowest rank."""
    import torch
    import torch.distributed as dist

    from neoembed.data import MiningConfig, load_synsets
    from neoembed.embedder import load_embedder
    from neoembed.training import release_process_group

    torch.set_num_threads(1)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    config = MiningConfig()
    model = load_embedder(config.teacher, device="cpu")
    glosses = [s.gloss for s in load_synsets()[:texts]]
    model.encode(glosses[rank::world][: config.batch_size], batch_size=config.batch_size)  # warm-up
    if world > 1:
        dist.barrier()
    seconds = timed(lambda: model.encode(glosses[rank::world], batch_size=config.batch_size))
    if world > 1:
        gathered = [0.0] * world  # every rank's seconds, filled in by all_gather_object
        dist.all_gather_object(gathered, seconds)
        seconds = max(gathered)
        release_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps({"texts": len(glosses), "seconds": seconds}))


def bench_build_data(settings: ScaleBench, ranks: int, work: Path) -> Row:
    result = work / f"encode-{ranks}.json"
    _launch(ranks, work, "-m", "neoembed.bench.scale", "encode", str(settings.texts), str(result))
    measured = json.loads(result.read_text())
    return Row({"job": "build-data (teacher encoding)", "ranks": ranks},
               {"rate": measured["texts"] / measured["seconds"], "seconds": measured["seconds"]},
               unit="texts/s")  # fmt: skip


def _train(job: str, ranks: int, steps: int, recipe: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    """`neoembed JOB --recipe` on `ranks` ranks, `steps` fp32 steps of one thread each, logged at every step,
    nothing saved on the way, afresh in work/JOB-RANKS; its metrics.jsonl records."""
    run_dir, path = work / f"{job}-{ranks}", work / f"{job}-{ranks}.yaml"
    train = {"max_steps": steps, "log_steps": 1, "save_steps": 1000, "threads": 1, "precision": "fp32"}
    train |= recipe.get("train", {}) | {"output_dir": str(run_dir)}
    path.write_text(yaml.safe_dump({**recipe, "optim": {"warmup_steps": 2}, "train": train}))
    shutil.rmtree(run_dir, ignore_errors=True)
    _launch(ranks, work, "-m", "neoembed", job, "--recipe", str(path))
    return read_jsonl(run_dir / METRICS_FILE)


def bench_pretrain(settings: ScaleBench, ranks: int, work: Path) -> Row:
    from neoembed.bench.serve import quickstart_neobert

    corpus = work / "corpus.txt"
    if not corpus.exists():
        from neoembed.data import load_synsets

        corpus.write_text("\n".join(s.gloss for s in load_synsets()[:20000]) + "\n")
    recipe = {
        "corpus": {"files": [str(corpus)], "heldout_fraction": 0.01},
        "model": {"config": quickstart_neobert()},
        "data": {"max_length": 128, "batch_size": 16},
        "train": {"eval_steps": 1000},
    }
    records = _train("pretrain", ranks, settings.steps, recipe, work)
    rates = [m["tokens_per_s"] for m in records if "tokens_per_s" in m]
    rates = rates[len(rates) // 3 :]  # the steps after the first third: allocation and caches warmed up
    return Row({"job": "pretrain (MLM, 4x128 NeoBERT)", "ranks": ranks},
               {"rate": sum(rates) / len(rates) / ranks}, unit="real tokens/s per rank")  # fmt: skip


def bench_contrastive(settings: ScaleBench, ranks: int, work: Path) -> Row:
    from neoembed.data import BuildConfig, build
    from neoembed.training import logged_runtime

    data = work / "data"
    if not (data / "stats.json").exists():
        build(BuildConfig(out=data, sources=("wordnet",), max_rows=2000, mine=False))
    recipe = {
        "data": {"path": str(data), "max_negatives": 0},
        "model": {"base": "minilm", "max_length": 64},
        "train": {"batch_size": 16},
        "eval": {"sets": []},
    }
    runtime = logged_runtime(_train("contrastive", ranks, settings.steps, recipe, work))
    return Row({"job": "contrastive (MiniLM, gathered negatives)", "ranks": ranks},
               {"rate": settings.steps * 16 / runtime}, unit="pairs/s per rank")  # fmt: skip


# job -> its measurement on a number of ranks, one row
BENCHES = {"build-data": bench_build_data, "pretrain": bench_pretrain, "contrastive": bench_contrastive}


def run(settings: ScaleBench) -> WrittenReport:
    work = settings.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    rows, verdicts = [], []
    for job in settings.jobs:
        one, many = (BENCHES[job](settings, ranks, work.resolve()) for ranks in (1, settings.ranks))
        scaling = many.number("rate") / one.number("rate")
        rows += [one.adding({"vs 1 rank": 1.0}), many.adding({"vs 1 rank": scaling})]
        if job == "build-data":
            met = meets(scaling >= TARGET_ENCODE_SPEEDUP)
            verdicts.append(
                f"{one['job']}: {settings.ranks} ranks encode {scaling:.2f}x the texts/s of 1 "
                f"({met} the {TARGET_ENCODE_SPEEDUP}x target for 2 ranks of 1 thread)"
            )
        else:
            verdicts.append(
                f"{one['job']}: each of {settings.ranks} ranks runs at {scaling:.2f} of one rank's rate; "
                "the rest is the step's all-reduce (and, on a machine with as many cores as ranks, the cores "
                "shared)"
            )
    intro = (
        f"1 rank vs {settings.ranks} ranks (torchrun, gloo), one thread each, on {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.1f}."
    )
    table = Table(rows, ["job", "ranks", "rate", "unit", "vs 1 rank"])
    report = Report(
        "scale", "neoembed bench scale", {"settings": settings, "rows": rows}, [table], [intro], verdicts
    )
    return write_report(report, settings.out)


if __name__ == "__main__":  # the encode worker, launched by `bench_build_data` (plain or under torchrun)
    encode_worker(int(sys.argv[2]), sys.argv[3])
