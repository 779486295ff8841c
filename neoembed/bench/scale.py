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
import subprocess
import sys
import time
from pathlib import Path

import yaml

from neoembed.bench.report import Report, Table, WrittenReport, write_report
from neoembed.bench.settings import ScaleBench

TARGET_ENCODE_SPEEDUP = 1.8  # 2 ranks x 1 thread vs 1 rank x 1 thread (issue target)
PRETRAIN_CONFIG = {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 512,
                   "max_length": 128}  # fmt: skip


def _launch(ranks: int, *args: str) -> list[str]:
    if ranks == 1:
        return [sys.executable, *args]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *args]


def _run(command: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr[-2000:]}")


# --- build-data: teacher encoding -------------------------------------------------------------------------


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
    share = glosses[rank::world]
    model.encode(share[: config.batch_size], batch_size=config.batch_size)  # warm-up
    if world > 1:
        dist.barrier()
    started = time.perf_counter()
    model.encode(share, batch_size=config.batch_size)
    seconds = time.perf_counter() - started
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, seconds)
        seconds = max(gathered)
        release_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps({"texts": len(glosses), "seconds": seconds}))


def bench_build_data(settings: ScaleBench, work: Path) -> list[dict]:
    rows = []
    for ranks in (1, settings.ranks):
        result = work / f"encode-{ranks}.json"
        _run(_launch(ranks, "-m", "neoembed.bench.scale", "encode", str(settings.texts), str(result)), work)
        measured = json.loads(result.read_text())
        rows.append({"job": "build-data (teacher encoding)", "ranks": ranks, "rate": measured["texts"] / measured["seconds"],
                     "unit": "texts/s", "seconds": measured["seconds"]})  # fmt: skip
    return rows


# --- pretrain and contrastive -----------------------------------------------------------------------------


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def bench_pretrain(settings: ScaleBench, work: Path) -> list[dict]:
    corpus = work / "corpus.txt"
    if not corpus.exists():
        from neoembed.data import load_synsets

        corpus.write_text("\n".join(s.gloss for s in load_synsets()[:20000]) + "\n")
    rows = []
    for ranks in (1, settings.ranks):
        run_dir = work / f"pretrain-{ranks}"
        recipe = {
            "corpus": {"files": [str(corpus)], "heldout_fraction": 0.01},
            "model": {"config": PRETRAIN_CONFIG},
            "data": {"max_length": 128, "batch_size": 16},
            "optim": {"warmup_steps": 2},
            "train": {"output_dir": str(run_dir), "max_steps": settings.steps, "log_steps": 1, "save_steps": 1000,
                      "eval_steps": 1000, "threads": 1, "precision": "fp32"},
        }  # fmt: skip
        path = work / f"pretrain-{ranks}.yaml"
        path.write_text(yaml.safe_dump(recipe))
        if run_dir.exists():
            import shutil

            shutil.rmtree(run_dir)
        _run(_launch(ranks, "-m", "neoembed", "pretrain", "--recipe", str(path)), work)
        rates = [m["tokens_per_s"] for m in _metrics(run_dir) if "tokens_per_s" in m]
        rates = rates[len(rates) // 3 :]  # the steps after the first third: allocation and caches warmed up
        total = sum(rates) / len(rates)
        rows.append({"job": "pretrain (MLM, 4x128 NeoBERT)", "ranks": ranks, "rate": total / ranks,
                     "unit": "real tokens/s per rank"})  # fmt: skip
    return rows


def bench_contrastive(settings: ScaleBench, work: Path) -> list[dict]:
    from neoembed.data import BuildConfig, build

    data = work / "data"
    if not (data / "stats.json").exists():
        build(BuildConfig(out=data, sources=("wordnet",), max_rows=2000, mine=False))
    rows = []
    for ranks in (1, settings.ranks):
        run_dir = work / f"contrastive-{ranks}"
        recipe = {
            "data": {"path": str(data), "max_negatives": 0},
            "model": {"base": "minilm", "max_length": 64},
            "optim": {"warmup_steps": 2},
            "train": {"output_dir": str(run_dir), "max_steps": settings.steps, "batch_size": 16, "log_steps": 1,
                      "save_steps": 1000, "threads": 1, "precision": "fp32"},
            "eval": {"sets": []},
        }  # fmt: skip
        path = work / f"contrastive-{ranks}.yaml"
        path.write_text(yaml.safe_dump(recipe))
        if run_dir.exists():
            import shutil

            shutil.rmtree(run_dir)
        _run(_launch(ranks, "-m", "neoembed", "contrastive", "--recipe", str(path)), work)
        runtime = next(m["train_runtime"] for m in reversed(_metrics(run_dir)) if "train_runtime" in m)
        pairs = settings.steps * 16 * ranks
        rows.append({"job": "contrastive (MiniLM, gathered negatives)", "ranks": ranks, "rate": pairs / runtime / ranks,
                     "unit": "pairs/s per rank"})  # fmt: skip
    return rows


BENCHES = {"build-data": bench_build_data, "pretrain": bench_pretrain, "contrastive": bench_contrastive}


def run(settings: ScaleBench) -> WrittenReport:
    work = settings.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    rows = [row for job in settings.jobs for row in BENCHES[job](settings, work.resolve())]
    verdicts = []
    for job in dict.fromkeys(row["job"] for row in rows):
        one, many = (
            next(r for r in rows if r["job"] == job and r["ranks"] == n) for n in (1, settings.ranks)
        )
        scaling = many["rate"] / one["rate"]
        for row in (one, many):
            row["vs 1 rank"] = row["rate"] / one["rate"]
        if job.startswith("build-data"):
            met = "meets" if scaling >= TARGET_ENCODE_SPEEDUP else "MISSES"
            verdicts.append(
                f"{job}: {settings.ranks} ranks encode {scaling:.2f}x the texts/s of 1 ({met} the "
                f"{TARGET_ENCODE_SPEEDUP}x target for 2 ranks of 1 thread)"
            )
        else:
            verdicts.append(
                f"{job}: each of {settings.ranks} ranks runs at {scaling:.2f} of one rank's rate; the rest is "
                "the step's all-reduce (and, on a machine with as many cores as ranks, the cores shared)"
            )
    report = Report(
        name="scale",
        title="neoembed bench scale",
        intro=[
            f"1 rank vs {settings.ranks} ranks (torchrun, gloo), one thread each, on {os.cpu_count()} CPUs; "
            f"load average {os.getloadavg()[0]:.1f}."
        ],
        tables=[Table(rows, ["job", "ranks", "rate", "unit", "vs 1 rank"])],
        verdicts=verdicts,
        payload={"settings": settings.model_dump(mode="json"), "rows": rows},
    )
    return write_report(report, settings.out)


if __name__ == "__main__":  # the encode worker, launched by `bench_build_data` (plain or under torchrun)
    encode_worker(int(sys.argv[2]), sys.argv[3])
