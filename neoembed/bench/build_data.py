"""`neoembed bench build-data`: the build's cost per stage on real-shaped synthetic data, and a 9M projection.

Part 1 stages two synthetic sources through the real stage-1 code in a child process (its peak RSS is the
child's alone): N short rows (query 5-13 words, positive and negative 20-60, with planted duplicates, empties
and short rows) and M GitHubIssues-shaped symmetric rows (texts averaging about 4,200 characters, a long
tail), which the default 1024-token budget truncates; then writes the parts without mining (stage 2's I/O).
Part 2 times the mining stages apart: the teacher's encoding of real-length texts, and the exact FAISS
search of a part (random unit vectors, memory-mapped, streamed as the miner streams them) with its peak
RSS. Part 3 (optional) mines WordNet rows end to end per teacher dtype. The report projects a 9M-pair build
from these rates, on this CPU and on an H100 under a stated throughput assumption.
Goals: 1M rows through stage 1 in under 120 s with peak RSS under 4 GiB.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neoembed.bench.report import Report, Table, WrittenReport, write_report
from neoembed.bench.settings import BuildDataBench

TARGET_SECONDS = 120.0
TARGET_RSS_GIB = 4.0
SYNTHETIC_MANIFEST = """name: synthetic
description: synthetic rows for the benchmark
dataset: local/synthetic
licence: none
licence_source: synthetic rows made by the benchmark
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


LONG_MANIFEST = """name: longissues
description: GitHubIssues-shaped synthetic pairs (long texts)
dataset: local/longissues
licence: none
licence_source: synthetic rows made by the benchmark
paper: release
mapping: {query: anchor, positive: positive}
options: {mine: never}
symmetric: true
"""
LONG_MEAN_WORDS = 640  # ~4,200 characters at the vocabulary's ~6.5 characters a word, spaces included


def long_rows(path: Path, rows: int, seed: int = 1) -> None:
    """`rows` (anchor, positive) pairs of GitHub-issue length: lognormal word counts averaging ~640 words, 85%
    English words (whole words of the teacher's vocabulary), 15% random letter strings standing in for code,
    paths and identifiers, which split into several tokens as they do in real issues."""
    from neoembed.embedder import packaged_minilm_path

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    english = [
        w for w in (packaged_minilm_path() / "vocab.txt").read_text().split() if w.isalpha() and w.isascii()
    ]
    english = [w for w in english if len(w) >= 2]
    code = ["".join(rng.choice(letters, size=rng.integers(4, 14))) for _ in range(len(english) * 15 // 85)]
    vocab = english + code
    sigma = 0.9
    mu = np.log(LONG_MEAN_WORDS) - sigma**2 / 2

    def texts(n):
        lengths = np.maximum(rng.lognormal(mu, sigma, size=n).astype(int), 5)
        words = rng.integers(0, len(vocab), size=int(lengths.sum()))
        return [" ".join(vocab[w] for w in part) for part in np.split(words, np.cumsum(lengths)[:-1])]

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"anchor": texts(rows), "positive": texts(rows)}), path)


def _stage_child(work: str, result_path: str) -> None:
    """Child process: load (and cache) the sources, run stage 1, then write the parts; timings as JSON."""
    os.environ["HF_DATASETS_CACHE"] = str(Path(work) / "hf-cache")
    from neoembed.data import Build, BuildConfig, load_manifests, open_source

    work_dir = Path(work)
    manifests = load_manifests(work_dir / "manifests")
    started = time.perf_counter()
    for manifest, _ in manifests.values():
        open_source(manifest, work_dir / "local")
    loaded, cpu_before = time.perf_counter(), time.process_time()
    build = Build(
        BuildConfig(
            manifests=work_dir / "manifests", out=work_dir / "out", local_data=work_dir / "local", mine=False
        )
    )
    staged = build.prepare()
    staged_at, cpu = time.perf_counter(), time.process_time() - cpu_before
    events = [json.loads(line) for line in (work_dir / "out" / "build.jsonl").read_text().splitlines()]
    seconds = {e["source"]: e["seconds"] for e in events if e["event"] == "prepare"}
    cpu_seconds = {e["source"]: e["cpu_seconds"] for e in events if e["event"] == "prepare"}
    write_cpu = time.process_time()
    for unit in build.units(staged):
        build.build_unit(unit)
    result = {
        "source_cpu_s": cpu_seconds,
        "write_cpu_s": time.process_time() - write_cpu,
        "load_s": loaded - started,
        "stage_s": staged_at - loaded,
        "stage_cpu_s": cpu,
        "source_s": seconds,
        "write_s": time.perf_counter() - staged_at,
        "stats": staged,
        "peak_rss_gib": _peak_rss_gib(),
    }
    Path(result_path).write_text(json.dumps(result, default=int))


def _child(target, *args) -> None:
    """Run `target(*args)` in a fresh process, which measures its own peak RSS (`_peak_rss_gib`)."""
    child = multiprocessing.get_context("spawn").Process(target=target, args=args)
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"the benchmark child process failed with exit code {child.exitcode}")


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def bench_normalise(rows: int, long: int, work: Path) -> tuple[list[dict], dict]:
    (work / "manifests").mkdir(parents=True, exist_ok=True)
    (work / "manifests" / "synthetic.yaml").write_text(SYNTHETIC_MANIFEST)
    if long:
        (work / "manifests" / "longissues.yaml").write_text(LONG_MANIFEST)
        long_rows(work / "local" / "longissues" / "train.parquet", long)
    synthetic_rows(work / "local" / "synthetic" / "train.parquet", rows)
    result_path = work / "result.json"
    _child(_stage_child, str(work), str(result_path))
    result = json.loads(result_path.read_text())
    peak_rss_gib = result["peak_rss_gib"]
    rows_out = sum(s["kept"] for s in result["stats"].values())
    figures = []
    for name, stats in result["stats"].items():
        seconds, cpu = result["source_s"][name], result["source_cpu_s"][name]
        figures.append(
            {
                "source": name,
                "rows": stats["rows_read"],
                "stage1_s": round(seconds, 1),
                "cpu_s": round(cpu, 1),
                "rows_per_cpu_s": round(stats["rows_read"] / cpu),
                "kept": stats["kept"],
                "duplicates": stats["dropped"]["duplicate"],
                "too_long": stats["dropped"]["too_long"],
                "truncated": sum(stats["truncated"].values()),
                "positive_chars_p50": stats["positive_chars"].get("p50"),
            }
        )
    return figures, {
        "load_s": round(result["load_s"], 1),
        "stage1_s": round(result["stage_s"], 1),
        "stage1_cpu_s": round(result["stage_cpu_s"], 1),
        "write_s": round(result["write_s"], 1),
        "write_cpu_s": round(result["write_cpu_s"], 1),
        "write_rows_per_cpu_s": round(rows_out / result["write_cpu_s"]),
        "peak_rss_gib": round(peak_rss_gib, 2),
        # CPU seconds against the wall-clock target: what an unshared core would take
        "time_vs_target": round(result["source_cpu_s"]["synthetic"] / TARGET_SECONDS * 1_000_000 / rows, 3),
        "rss_vs_target": round(peak_rss_gib / TARGET_RSS_GIB, 3),
    }


def _search_child(pool_rows: int, query_rows: int, dim: int, work: str, result_path: str) -> None:
    """Child process: exact top-101 search of `query_rows` queries over a memory-mapped `pool_rows` pool of
    random unit vectors, in the miner's query chunks, through the miner's own searcher."""
    from neoembed.data import SEARCH_CHUNK, exact_searcher

    rng = np.random.default_rng(0)
    arrays = {}
    for name, n in (("pool", pool_rows), ("queries", query_rows)):
        array = np.lib.format.open_memmap(Path(work) / f"{name}.npy", "w+", np.float32, (n, dim))
        for start in range(0, n, SEARCH_CHUNK):
            block = rng.standard_normal((min(SEARCH_CHUNK, n - start), dim), dtype=np.float32)
            array[start : start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
        array.flush()
        arrays[name] = np.load(Path(work) / f"{name}.npy", mmap_mode="r")
    started, cpu = time.perf_counter(), time.process_time()
    search = exact_searcher(arrays["pool"])
    for lo in range(0, query_rows, SEARCH_CHUNK):
        search(np.ascontiguousarray(arrays["queries"][lo : lo + SEARCH_CHUNK]), 101)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    result = {"search_s": seconds, "cpu_s": cpu, "peak_rss_gib": _peak_rss_gib()}
    Path(result_path).write_text(json.dumps(result))


def bench_search(pool_rows: int, query_rows: int, work: Path, dim: int = 384) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    result_path = work / "search.json"
    _child(_search_child, pool_rows, query_rows, dim, str(work), str(result_path))
    result = json.loads(result_path.read_text())
    seconds, cpu, peak_rss_gib = result["search_s"], result["cpu_s"], result["peak_rss_gib"]
    return {
        "pool": pool_rows,
        "queries": query_rows,
        "search_s": round(seconds, 1),
        "cpu_s": round(cpu, 1),
        "queries_per_cpu_s": round(query_rows / cpu),
        "gflop_per_cpu_s": round(2 * dim * pool_rows * query_rows / cpu / 1e9, 1),
        "peak_rss_gib": round(peak_rss_gib, 2),
        "pool_gib": round(pool_rows * dim * 4 / 2**30, 2),
    }


def bench_encode(texts: int, batch_size: int) -> dict:
    """The teacher's texts/s and tokens/s on the synthetic sources' length mix (half query-length, a third
    passage-length, a sixth issue-length, which the teacher cuts at its 256 tokens)."""
    from neoembed.embedder import load_embedder

    rng = np.random.default_rng(2)
    words = ["".join(rng.choice(list("abcdefghij"), size=int(rng.integers(3, 10)))) for _ in range(5000)]
    lengths = np.concatenate(
        [
            rng.integers(5, 13, texts // 2),
            rng.integers(20, 60, texts // 3),
            rng.integers(300, 1500, texts // 6),
        ]
    )
    sample = [" ".join(rng.choice(words, size=int(n))) for n in lengths]
    model = load_embedder("minilm")
    model.encode(sample[:batch_size], batch_size=batch_size)  # warm-up
    tokens = sum(min(len(ids), model.max_seq_length) for ids in model.tokenizer(sample)["input_ids"])
    started, cpu = time.perf_counter(), time.process_time()
    model.encode(sample, batch_size=batch_size)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "texts": len(sample),
        "tokens": tokens,
        "encode_s": round(seconds, 1),
        "cpu_s": round(cpu, 1),
        "texts_per_cpu_s": round(len(sample) / cpu, 1),
        "tokens_per_cpu_s": round(tokens / cpu),
    }


def bench_mining(rows: int, dtypes: list[str], batch_size: int, work: Path) -> list[dict]:
    from neoembed.data import BuildConfig, MiningConfig, build
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


def project(
    pairs: int,
    rows_per_shard: int,
    stage1_cpu_s_per_row: float,
    write_rows_per_cpu_s: float,
    encode: dict,
    search: dict,
    gpu_tokens_per_s: float,
    gpu_gflop_per_s: float,
) -> list[dict]:
    """Hours for a `pairs`-pair build, mining every pair (an upper bound: sources with given negatives are not
    mined): two texts encoded per pair, and each part's queries searched against its `rows_per_shard` pool.
    CPU figures are CPU-hours (from CPU seconds, which a shared machine does not inflate); stage 1 and writing
    run on the CPU in both rows."""
    tokens = 2 * pairs * encode["tokens"] / encode["texts"]
    flops = 2 * 384 * pairs * rows_per_shard  # every query against its part's whole pool
    stage1 = pairs * stage1_cpu_s_per_row
    write = pairs / write_rows_per_cpu_s
    rows = []
    for where, tokens_per_s, gflop_per_s in (
        ("CPU (CPU-hours)", encode["tokens_per_cpu_s"], search["gflop_per_cpu_s"]),
        ("one H100 (assumed rates)", gpu_tokens_per_s, gpu_gflop_per_s),
    ):
        encode_h, search_h = tokens / tokens_per_s / 3600, flops / (gflop_per_s * 1e9) / 3600
        rows.append(
            {
                "where": where,
                "stage1_h": round(stage1 / 3600, 2),
                "write_h": round(write / 3600, 2),
                "encode_h": round(encode_h, 2),
                "search_h": round(search_h, 2),
                "total_h": round((stage1 + write) / 3600 + encode_h + search_h, 1),
            }
        )
    return rows


STAGE_COLUMNS = [
    "source",
    "rows",
    "stage1_s",
    "cpu_s",
    "rows_per_cpu_s",
    "kept",
    "duplicates",
    "too_long",
    "truncated",
    "positive_chars_p50",
]
SEARCH_COLUMNS = [
    "pool",
    "queries",
    "search_s",
    "cpu_s",
    "queries_per_cpu_s",
    "gflop_per_cpu_s",
    "peak_rss_gib",
    "pool_gib",
]
MINING_COLUMNS = [
    "teacher_dtype",
    "pairs",
    "texts_encoded",
    "pairs_per_s",
    "encode_s",
    "search_s",
    "select_s",
    "encode_share",
    "search_share",
]


def run(settings: BuildDataBench) -> WrittenReport:
    from neoembed.faiss_setup import faiss  # sets the BLAS core type before faiss loads

    import torch

    torch.set_num_threads(settings.threads)
    faiss.omp_set_num_threads(settings.threads)
    work = settings.out / "work"
    shutil.rmtree(work, ignore_errors=True)
    load_before = os.getloadavg()
    sources, stage = ([], None)
    if settings.rows:
        sources, stage = bench_normalise(settings.rows, settings.long_rows, work / "normalise")
    encode = bench_encode(settings.encode_texts, settings.batch_size) if settings.encode_texts else None
    search = None
    if settings.search_pool:
        search = bench_search(settings.search_pool, settings.search_queries, work / "search")
    mining = []
    if settings.mining_rows:
        mining = bench_mining(
            settings.mining_rows, list(settings.dtypes), settings.batch_size, work / "mining"
        )
    load_after = os.getloadavg()
    if not settings.keep:
        shutil.rmtree(work, ignore_errors=True)
    measured = Measured(sources, stage, encode, search, mining, (load_before, load_after))
    return write_report(_report(settings, measured), settings.out)


@dataclass
class Measured:
    """What one run measured, stage by stage (a stage not asked for is empty)."""

    sources: list[dict]  # stage 1, per source
    stage: dict | None  # stage 1 and part writing, in all
    encode: dict | None  # teacher encoding
    search: dict | None  # FAISS search of one part
    mining: list[dict]  # hard-negative mining, per teacher dtype
    load_average: tuple  # 1/5/15-minute load averages before and after


def _report(settings: BuildDataBench, measured: Measured) -> Report:
    sources, stage, encode, search, mining = (
        measured.sources,
        measured.stage,
        measured.encode,
        measured.search,
        measured.mining,
    )
    load_before, load_after = measured.load_average
    tables = []
    if stage:
        tables.append(
            Table(
                sources,
                STAGE_COLUMNS,
                heading="Stage 1 (map, normalise, truncate, filter, leakage guard, dedup) and part writing",
                after=[
                    f"Stage 1 {stage['stage1_s']} s wall, {stage['stage1_cpu_s']} s CPU; parts written (no mining) "
                    f"in {stage['write_s']} s wall, {stage['write_cpu_s']} s CPU ({stage['write_rows_per_cpu_s']:,} "
                    f"rows per CPU-second); peak RSS {stage['peak_rss_gib']} GiB. Target for 1M short rows: under "
                    f"{TARGET_SECONDS:.0f} s and {TARGET_RSS_GIB:.0f} GiB: CPU time {stage['time_vs_target']}x "
                    f"(scaled to 1M rows), RSS {stage['rss_vs_target']}x of it."
                ],
            )
        )
    if encode:
        tables.append(
            Table(
                [encode],
                ["texts", "tokens", "encode_s", "cpu_s", "texts_per_cpu_s", "tokens_per_cpu_s"],
                heading="Teacher encoding (packaged all-MiniLM-L6-v2, float32) on the sources' length mix",
            )
        )
    if search:
        tables.append(
            Table(
                [search],
                SEARCH_COLUMNS,
                heading="FAISS search of one part (exact inner product, top 101, pool streamed from a memory map)",
            )
        )
    projection = []
    if stage and encode and search:
        synthetic = next(s for s in sources if s["source"] == "synthetic")
        projection = project(
            settings.project_pairs,
            search["pool"],
            synthetic["cpu_s"] / synthetic["rows"],
            stage["write_rows_per_cpu_s"],
            encode,
            search,
            settings.gpu_tokens_per_s,
            settings.gpu_gflop_per_s,
        )
        tables.append(
            Table(
                projection,
                ["where", "stage1_h", "write_h", "encode_h", "search_h", "total_h"],
                heading=f"Projection: {settings.project_pairs:,} pairs, all mined, parts of {search['pool']:,} rows",
                after=[
                    "Stage 1 and writing stay on the CPU (stage 1 from its measured CPU seconds per short row). "
                    f"The H100 row assumes {settings.gpu_tokens_per_s:,.0f} teacher tokens/s and "
                    f"{settings.gpu_gflop_per_s:,.0f} GFLOP/s for the flat search: assumptions, not measurements."
                ],
            )
        )
    verdicts = []
    if mining:
        tables.append(
            Table(
                mining,
                MINING_COLUMNS,
                heading=f"Hard-negative mining on {settings.mining_rows:,} WordNet rows (teacher: packaged "
                "all-MiniLM-L6-v2)",
            )
        )
        if len(mining) > 1:
            ratio = mining[1]["pairs_per_s"] / mining[0]["pairs_per_s"]
            verdicts.append(
                f"{mining[1]['teacher_dtype']} / {mining[0]['teacher_dtype']} mining speed: {ratio:.2f}x"
            )
    return Report(
        name="build-data",
        title="build-data benchmark",
        intro=[
            f"Threads {settings.threads}; 1-minute load average {load_before[0]:.1f} before, {load_after[0]:.1f} "
            f"after (on {os.cpu_count()} CPUs)."
        ],
        tables=tables,
        verdicts=verdicts,
        payload={
            "stage": stage,
            "sources": sources,
            "encode": encode,
            "search": search,
            "projection": projection,
            "mining": mining,
            "load_average": [load_before, load_after],
        },
    )
