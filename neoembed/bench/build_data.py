"""`neoembed bench build-data`: normalisation + dedup throughput and peak memory, and mining throughput.

Part 1 stages 1M synthetic rows (with planted duplicates, empties and short rows) through the real stage-1
code in a child process, so its peak RSS is the child's alone. Part 2 mines hard negatives for WordNet rows
with the packaged MiniLM teacher for each teacher dtype, splitting the time into encoding, FAISS search and
the rule/selection. Goals: 1M rows in under 120 s with peak RSS under 4 GiB.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neoembed.bench.report import markdown_table, write_report
from neoembed.bench.settings import BuildDataBench

TARGET_SECONDS = 120.0
TARGET_RSS_GIB = 4.0
SYNTHETIC_MANIFEST = """name: synthetic
description: synthetic rows for the benchmark
dataset: local/synthetic
licence: none
paper: release
mapping: {query: query, positive: positive, negatives: [negative]}
options: {mine: never}
"""


def synthetic_rows(path: Path, rows: int, seed: int = 0, chunk: int = 100_000) -> None:
    """Write `rows` (query, positive, negative) rows: ~5% re-cased duplicates, ~1% empty, ~1% too short."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(20_000)]
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("query", pa.string()), ("positive", pa.string()), ("negative", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)

            def texts(low, high, n=n):
                lengths = rng.integers(low, high, size=n)
                words = rng.integers(0, len(vocab), size=int(lengths.sum()))
                cuts = np.cumsum(lengths)[:-1]
                return [" ".join(vocab[w] for w in part) for part in np.split(words, cuts)]

            query, positive, negative = texts(5, 13), texts(20, 60), texts(20, 60)
            kind = rng.random(n)
            for i in np.flatnonzero(kind < 0.05)[1:]:  # duplicate of an earlier row of this chunk, re-cased
                j = int(rng.integers(0, i))
                query[i], positive[i] = query[j].upper(), positive[j] + "!"
            for i in np.flatnonzero((kind >= 0.05) & (kind < 0.06)):
                query[i] = ""
            for i in np.flatnonzero((kind >= 0.06) & (kind < 0.07)):
                positive[i] = "ab"
            writer.write_table(
                pa.table({"query": query, "positive": positive, "negative": negative}, schema=schema)
            )


def _stage_child(work: str, result_path: str) -> None:
    """Child process: load (and cache) the source, then run stage 1; writes timings as JSON."""
    os.environ["HF_DATASETS_CACHE"] = str(Path(work) / "hf-cache")
    from neoembed.data.build import Build, BuildConfig
    from neoembed.data.manifest import load_manifest
    from neoembed.data.sources import open_source

    work_dir = Path(work)
    manifest, _ = load_manifest(work_dir / "manifests" / "synthetic.yaml")
    started = time.perf_counter()
    open_source(manifest, work_dir / "local")
    loaded, cpu_before = time.perf_counter(), time.process_time()
    build = Build(
        BuildConfig(manifests=work_dir / "manifests", out=work_dir / "out", local_data=work_dir / "local")
    )
    staged = build.prepare()["synthetic"]
    done, cpu = time.perf_counter(), time.process_time() - cpu_before
    result = {"load_s": loaded - started, "stage_s": done - loaded, "stage_cpu_s": cpu, "stats": staged}
    Path(result_path).write_text(json.dumps(result, default=int))


def bench_normalise(rows: int, work: Path) -> dict:
    (work / "manifests").mkdir(parents=True, exist_ok=True)
    (work / "manifests" / "synthetic.yaml").write_text(SYNTHETIC_MANIFEST)
    started = time.perf_counter()
    synthetic_rows(work / "local" / "synthetic" / "train.parquet", rows)
    generate_s = time.perf_counter() - started
    result_path = work / "result.json"
    child = multiprocessing.get_context("spawn").Process(
        target=_stage_child, args=(str(work), str(result_path))
    )
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"the staging child process failed with exit code {child.exitcode}")
    peak_rss_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
    result = json.loads(result_path.read_text())
    stats = result["stats"]
    return {
        "rows": rows,
        "generate_s": round(generate_s, 1),
        "load_s": round(result["load_s"], 1),
        "normalise_dedup_s": round(result["stage_s"], 1),
        "cpu_s": round(result["stage_cpu_s"], 1),
        "rows_per_s": round(rows / result["stage_s"]),
        "kept": stats["kept"],
        "duplicates": stats["dropped"]["duplicate"],
        "empty": stats["dropped"]["empty"],
        "too_short": stats["dropped"]["too_short"],
        "peak_rss_gib": round(peak_rss_gib, 2),
        "time_vs_target": round(result["stage_s"] / TARGET_SECONDS, 3),
        "rss_vs_target": round(peak_rss_gib / TARGET_RSS_GIB, 3),
    }


def bench_mining(rows: int, dtypes: list[str], batch_size: int, work: Path) -> list[dict]:
    from neoembed.data.build import BuildConfig, build
    from neoembed.data.mining import MiningConfig
    from neoembed.packaged import manifests_dir

    manifests = work / "manifests-wordnet"
    manifests.mkdir(parents=True, exist_ok=True)
    shutil.copy(manifests_dir() / "wordnet.yaml", manifests)
    results = []
    for dtype in dtypes:
        out = work / f"wordnet-{dtype}"
        build(
            BuildConfig(
                manifests=manifests,
                out=out,
                max_rows=rows,
                rows_per_shard=rows,
                mining=MiningConfig(batch_size=batch_size, dtype=dtype),
            )
        )
        events = [json.loads(line) for line in (out / "build.jsonl").read_text().splitlines()]
        parts = [e for e in events if e["event"] == "part"]
        seconds = {k: sum(p["mining_seconds"][k] for p in parts) for k in ("encode", "search", "select")}
        total = sum(seconds.values())
        mining = json.loads((out / "stats.json").read_text())["sources"]["wordnet"]["mining"]
        pairs = sum(p["rows"] for p in parts)
        results.append(
            {
                "teacher_dtype": dtype,
                "pairs": pairs,
                "texts_encoded": mining["queries"] + mining["pool"],
                "mined_negatives": mining["mined"],
                "pairs_per_s": round(pairs / total, 1),
                "encode_s": round(seconds["encode"], 1),
                "search_s": round(seconds["search"], 2),
                "select_s": round(seconds["select"], 2),
                "encode_share": round(seconds["encode"] / total, 3),
                "search_share": round(seconds["search"] / total, 4),
            }
        )
    return results


def run(settings: BuildDataBench) -> dict:
    import torch

    from neoembed.faiss_setup import faiss  # sets the BLAS core type before faiss loads

    rows, mining_rows, threads, out_dir = settings.rows, settings.mining_rows, settings.threads, settings.out
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    work = out_dir / "work"
    shutil.rmtree(work, ignore_errors=True)
    load_before = os.getloadavg()
    normalise = bench_normalise(rows, work / "normalise") if rows else None
    mining = (
        bench_mining(mining_rows, list(settings.dtypes), settings.batch_size, work / "mining")
        if mining_rows
        else []
    )
    load_after = os.getloadavg()
    if not settings.keep:
        shutil.rmtree(work, ignore_errors=True)

    lines = [
        "# build-data benchmark",
        "",
        f"Threads {threads}; 1-minute load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
        f"(on {os.cpu_count()} CPUs).",
    ]
    if normalise:
        lines += [
            "",
            f"## Normalisation + filters + dedup (stage 1) on {rows:,} synthetic rows",
            "",
            f"Target: under {TARGET_SECONDS:.0f} s and {TARGET_RSS_GIB:.0f} GiB peak RSS; "
            "`*_vs_target` < 1 meets it. Loading (datasets' Arrow cache) is timed apart; `cpu_s` is the "
            "stage's own CPU time, which a shared machine does not inflate.",
            "",
            markdown_table(
                [normalise],
                [
                    "rows",
                    "load_s",
                    "normalise_dedup_s",
                    "cpu_s",
                    "rows_per_s",
                    "kept",
                    "duplicates",
                    "peak_rss_gib",
                    "time_vs_target",
                    "rss_vs_target",
                ],
            ),
        ]
    if mining:
        lines += [
            "",
            f"## Hard-negative mining on {mining_rows:,} WordNet rows (teacher: packaged all-MiniLM-L6-v2)",
            "",
            markdown_table(
                mining,
                [
                    "teacher_dtype",
                    "pairs",
                    "texts_encoded",
                    "pairs_per_s",
                    "encode_s",
                    "search_s",
                    "select_s",
                    "encode_share",
                    "search_share",
                ],
            ),
        ]
        if len(mining) > 1:
            ratio = mining[1]["pairs_per_s"] / mining[0]["pairs_per_s"]
            lines += [
                "",
                f"{mining[1]['teacher_dtype']} / {mining[0]['teacher_dtype']} mining speed: {ratio:.2f}x",
            ]
    markdown = "\n".join(lines)
    payload = {"normalise": normalise, "mining": mining, "load_average": [load_before, load_after]}
    json_path, md_path = write_report(out_dir, "build-data", payload, markdown)
    return {"table": markdown, "json": json_path, "markdown": md_path}
