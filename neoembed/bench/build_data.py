"""`neoembed bench build-data`: the build's cost per stage on real-shaped synthetic data, and a 9M projection.

Part 1 stages two synthetic sources through the real stage-1 code in a child process (its peak RSS is the
child's alone): N short rows (query 5-13 words, positive and negative 20-60, with planted duplicates, empties
and short rows) and M GitHubIssues-shaped symmetric rows (texts averaging about 4,200 characters, a long
tail), which the default 1024-token budget truncates; then writes the parts without mining (stage 2's I/O).
Part 2 times the mining stages apart: the teacher's encoding of real-length texts, and the exact FAISS
search of a part (random unit vectors, memory-mapped, streamed as the miner streams them) with its peak
RSS. Part 3 (optional) mines WordNet rows end to end per teacher dtype. The report projects a 9M-pair build
from these rates, on this CPU and on an H100 under a stated throughput assumption. Part 4 (optional,
`--pairs-rows`) builds synthetic pairs files of each size as `build-data --from FILE --no-mine` does, each in
a child process, and compares their peak RSS: reading a user's file must not grow with its rows.
Goals: 1M rows through stage 1 in under 120 s with peak RSS under 4 GiB.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neoembed.bench.report import Report, Row, Table, WrittenReport, in_child, write_report
from neoembed.bench.settings import BuildDataBench
from neoembed.run_files import read_jsonl

TARGET_SECONDS = 120.0
TARGET_RSS_GIB = 4.0
LETTERS = "abcdefghijklmnopqrstuvwxyz"
LONG_MEAN_WORDS = 640  # ~4,200 characters at the vocabulary's ~6.5 characters a word, spaces included
MANIFEST = """name: {name}
description: {description}
dataset: local/{name}
licence: none
licence_source: synthetic rows made by the benchmark
paper: release
options: {{mine: never}}
"""  # never mined here: mining is timed apart
STAGE_SUMMARY = (
    "Stage 1 {stage1_s} s wall, {stage1_cpu_s} s CPU; parts written (no mining) in {write_s} s wall, "
    "{write_cpu_s} s CPU ({write_rows_per_cpu_s:,} rows per CPU-second); peak RSS {peak_rss_gib} GiB. "
    "Target for 1M short rows: under {target_s:.0f} s and {target_gib:.0f} GiB: CPU time {time_vs_target}x "
    "(scaled to 1M rows), RSS {rss_vs_target}x of it."
)


def random_words(rng: np.random.Generator, count: int, low: int, high: int, letters=LETTERS) -> list[str]:
    return ["".join(rng.choice(list(letters), size=rng.integers(low, high))) for _ in range(count)]


def sentences(rng: np.random.Generator, vocab: list[str], lengths: np.ndarray) -> list[str]:
    """One text of words drawn from `vocab` per entry of `lengths` (its number of words)."""
    words = rng.integers(0, len(vocab), size=int(lengths.sum()))
    return [" ".join(vocab[w] for w in part) for part in np.split(words, np.cumsum(lengths)[:-1])]


def synthetic_rows(path: Path, rows: int, seed: int = 0, chunk: int = 100_000) -> None:
    """Write `rows` (query, positive, negative) rows: ~5% re-cased duplicates, ~1% empty, ~1% too short."""
    rng = np.random.default_rng(seed)
    vocab = random_words(rng, 20_000, 3, 10)
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("query", pa.string()), ("positive", pa.string()), ("negative", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            query, positive, negative = (sentences(rng, vocab, rng.integers(low, high, size=n))
                                         for low, high in ((5, 13), (20, 60), (20, 60)))  # fmt: skip
            kind = rng.random(n)
            for i in np.flatnonzero(kind < 0.05)[1:]:  # duplicate of an earlier row of this chunk, re-cased
                j = int(rng.integers(0, i))
                query[i], positive[i] = query[j].upper(), positive[j] + "!"
            for i in np.flatnonzero((kind >= 0.05) & (kind < 0.06)):
                query[i] = ""
            for i in np.flatnonzero((kind >= 0.06) & (kind < 0.07)):
                positive[i] = "ab"
            writer.write_table(pa.Table.from_arrays([query, positive, negative], schema=schema))


def long_rows(path: Path, rows: int, seed: int = 1) -> None:
    """`rows` (anchor, positive) pairs of GitHub-issue length: lognormal word counts averaging ~640 words, 85%
    English words (whole words of the teacher's vocabulary), 15% random letter strings standing in for code,
    paths and identifiers, which split into several tokens as they do in real issues."""
    from neoembed.embedder import packaged_minilm_path

    rng = np.random.default_rng(seed)
    vocabulary = (packaged_minilm_path() / "vocab.txt").read_text().split()
    english = [w for w in vocabulary if w.isalpha() and w.isascii() and len(w) >= 2]
    vocab = english + random_words(rng, len(english) * 15 // 85, 4, 14)
    sigma = 0.9
    mu = np.log(LONG_MEAN_WORDS) - sigma**2 / 2

    def texts(n: int) -> list[str]:
        return sentences(rng, vocab, np.maximum(rng.lognormal(mu, sigma, size=n).astype(int), 5))

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"anchor": texts(rows), "positive": texts(rows)}), path)


def synthetic_pairs(path: Path, rows: int, seed: int = 0, chunk: int = 100_000) -> None:
    """A JSON-lines pairs file of `rows` rows as a user writes it (`anchor`, `positive`; the short rows'
    lengths), written a chunk at a time."""
    rng = np.random.default_rng(seed)
    vocab = random_words(rng, 20_000, 3, 10)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            anchors, positives = (
                sentences(rng, vocab, rng.integers(low, high, size=n)) for low, high in ((5, 13), (20, 60))
            )
            handle.writelines(
                json.dumps({"anchor": a, "positive": p}) + "\n"
                for a, p in zip(anchors, positives, strict=True)
            )


def _pairs_child(path: str, out: str) -> dict[str, Any]:
    """Child process: `build-data --from path --out out --no-mine`, clocked."""
    from neoembed.data import BuildConfig, build

    result, seconds, cpu = clocked(lambda: build(BuildConfig(out=Path(out), pairs=(Path(path),), mine=False)))
    assert result is not None
    return {"seconds": seconds, "cpu_s": cpu, "rows_read": result.rows_read, "rows_out": result.rows_out}


def bench_pairs_files(settings: BuildDataBench, work: Path) -> list[Row]:
    """One row per size of `--pairs-rows`: a synthetic pairs file built whole in a child process."""
    rows = []
    for count in settings.pairs_rows:
        path = work / f"pairs-{count}.jsonl"
        synthetic_pairs(path, count)
        result = in_child(_pairs_child, str(path), str(work / f"out-{count}"), work=work)
        rows.append(Row({"rows": count}, {
            "file_mib": round(path.stat().st_size / 2**20), "rows_out": result["rows_out"],
            "build_s": round(result["seconds"], 1), "cpu_s": round(result["cpu_s"], 1),
            "rows_per_cpu_s": round(count / result["cpu_s"]), "peak_rss_mib": round(result["peak_rss_gib"] * 1024),
        }))  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)  # the next size starts from an empty disk
    return rows


def clocked(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """`call()`'s result, wall seconds and CPU seconds (every thread of the process: on a shared machine less
    disturbed by other jobs than wall time)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _stage_child(work: str) -> dict[str, Any]:
    """Child process: load (and cache) the sources, run stage 1, then write the parts; its timings."""
    os.environ["HF_DATASETS_CACHE"] = str(Path(work) / "hf-cache")
    from neoembed.data import Build, BuildConfig, load_manifests, open_source

    work_dir = Path(work)
    manifests = load_manifests(work_dir / "manifests")
    _, load_s, _ = clocked(lambda: [open_source(m, work_dir / "local") for m, _ in manifests.values()])
    folders = {"manifests": work_dir / "manifests", "out": work_dir / "out", "local_data": work_dir / "local"}
    build = Build(BuildConfig(**folders, mine=False))
    staged, stage_s, stage_cpu_s = clocked(build.prepare)
    prepared = [e for e in read_jsonl(work_dir / "out" / "build.jsonl") if e["event"] == "prepare"]
    _, write_s, write_cpu_s = clocked(lambda: list(map(build.build_unit, build.units(staged))))
    return {
        "load_s": load_s,
        "stage1_s": stage_s,
        "stage1_cpu_s": stage_cpu_s,
        "write_s": write_s,
        "write_cpu_s": write_cpu_s,
        "stats": staged,
        "source_s": {e["source"]: e["seconds"] for e in prepared},
        "source_cpu_s": {e["source"]: e["cpu_seconds"] for e in prepared},
    }


def bench_normalise(settings: BuildDataBench, work: Path) -> tuple[list[Row], dict[str, float]]:
    """A row per source through stage 1, and stage 1 and part writing in all, against the targets for 1M
    short rows (CPU seconds against the wall-clock target: what an unshared core would take)."""
    (work / "manifests").mkdir(parents=True, exist_ok=True)
    (work / "manifests" / "synthetic.yaml").write_text(
        MANIFEST.format(name="synthetic", description="synthetic rows for the benchmark")
        + "mapping: {query: query, positive: positive, negatives: [negative]}\n"
    )
    synthetic_rows(work / "local" / "synthetic" / "train.parquet", settings.rows)
    if settings.long_rows:
        (work / "manifests" / "longissues.yaml").write_text(
            MANIFEST.format(name="longissues", description="GitHubIssues-shaped synthetic pairs (long texts)")
            + "mapping: {query: anchor, positive: positive}\nsymmetric: true\n"
        )
        long_rows(work / "local" / "longissues" / "train.parquet", settings.long_rows)
    result = in_child(_stage_child, str(work), work=work)
    sources = []
    for name, stats in result["stats"].items():
        cpu = result["source_cpu_s"][name]
        sources.append(Row({"source": name}, {
            "rows": stats["rows_read"], "stage1_s": round(result["source_s"][name], 1), "cpu_s": round(cpu, 1),
            "rows_per_cpu_s": round(stats["rows_read"] / cpu), "kept": stats["kept"],
            "duplicates": stats["dropped"]["duplicate"], "too_long": stats["dropped"]["too_long"],
            "truncated": sum(stats["truncated"].values()),
            "positive_chars_p50": stats["positive_chars"].get("p50"),
        }))  # fmt: skip
    rows_out = sum(s["kept"] for s in result["stats"].values())
    totals = {
        key: round(result[key], 1) for key in ("load_s", "stage1_s", "stage1_cpu_s", "write_s", "write_cpu_s")
    }
    return sources, totals | {
        "write_rows_per_cpu_s": round(rows_out / result["write_cpu_s"]),
        "peak_rss_gib": round(result["peak_rss_gib"], 2),
        "time_vs_target": round(
            result["source_cpu_s"]["synthetic"] / TARGET_SECONDS * 1_000_000 / settings.rows, 3
        ),
        "rss_vs_target": round(result["peak_rss_gib"] / TARGET_RSS_GIB, 3),
    }


def _search_child(pool_rows: int, query_rows: int, dim: int, work: str) -> dict[str, float]:
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

    def search() -> None:
        search = exact_searcher(arrays["pool"])
        for lo in range(0, query_rows, SEARCH_CHUNK):
            search(np.ascontiguousarray(arrays["queries"][lo : lo + SEARCH_CHUNK]), 101)

    _, seconds, cpu = clocked(search)
    return {"search_s": seconds, "cpu_s": cpu}


def bench_search(settings: BuildDataBench, work: Path, dim: int = 384) -> Row:
    pool_rows, query_rows = settings.search_pool, settings.search_queries
    work.mkdir(parents=True, exist_ok=True)
    result = in_child(_search_child, pool_rows, query_rows, dim, str(work), work=work)
    cpu = result["cpu_s"]
    return Row({"pool": pool_rows, "queries": query_rows}, {
        "search_s": round(result["search_s"], 1), "cpu_s": round(cpu, 1),
        "queries_per_cpu_s": round(query_rows / cpu),
        "gflop_per_cpu_s": round(2 * dim * pool_rows * query_rows / cpu / 1e9, 1),
        "peak_rss_gib": round(result["peak_rss_gib"], 2), "pool_gib": round(pool_rows * dim * 4 / 2**30, 2),
    })  # fmt: skip


def bench_encode(settings: BuildDataBench) -> Row:
    """The teacher's texts/s and tokens/s on the synthetic sources' length mix (half query-length, a third
    passage-length, a sixth issue-length, which the teacher cuts at its 256 tokens)."""
    from neoembed.embedder import load_embedder

    texts, batch_size = settings.encode_texts, settings.batch_size
    rng = np.random.default_rng(2)
    words = random_words(rng, 5000, 3, 10, letters="abcdefghij")
    mix = ((5, 13, texts // 2), (20, 60, texts // 3), (300, 1500, texts // 6))
    sample = sentences(rng, words, np.concatenate([rng.integers(low, high, n) for low, high, n in mix]))
    model = load_embedder("minilm")
    model.encode(sample[:batch_size], batch_size=batch_size)  # warm-up
    tokens = sum(min(len(ids), model.max_seq_length) for ids in model.tokenizer(sample)["input_ids"])
    _, seconds, cpu = clocked(lambda: model.encode(sample, batch_size=batch_size))
    return Row({"texts": len(sample), "tokens": tokens}, {
        "encode_s": round(seconds, 1), "cpu_s": round(cpu, 1), "texts_per_cpu_s": round(len(sample) / cpu, 1),
        "tokens_per_cpu_s": round(tokens / cpu),
    })  # fmt: skip


def bench_mining(settings: BuildDataBench, work: Path) -> list[Row]:
    from neoembed.data import BuildConfig, MiningConfig, build
    from neoembed.packaged import manifests_dir

    manifests = work / "manifests-wordnet"
    manifests.mkdir(parents=True, exist_ok=True)
    shutil.copy(manifests_dir() / "wordnet.yaml", manifests)
    results, rows = [], settings.mining_rows
    for dtype in settings.dtypes:
        out = work / f"wordnet-{dtype}"
        mining = MiningConfig(batch_size=settings.batch_size, dtype=dtype)
        build(BuildConfig(manifests=manifests, out=out, max_rows=rows, rows_per_shard=rows, mining=mining))
        parts = [e for e in read_jsonl(out / "build.jsonl") if e["event"] == "part"]
        seconds = {k: sum(p["mining_seconds"][k] for p in parts) for k in ("encode", "search", "select")}
        total = sum(seconds.values())
        mined = json.loads((out / "stats.json").read_text())["sources"]["wordnet"]["mining"]
        pairs = sum(p["rows"] for p in parts)
        results.append(Row({"teacher_dtype": dtype}, {
            "pairs": pairs, "texts_encoded": mined["queries"] + mined["pool"],
            "mined_negatives": mined["mined"],
            "pairs_per_s": round(pairs / total, 1), "encode_s": round(seconds["encode"], 1),
            "search_s": round(seconds["search"], 2), "select_s": round(seconds["select"], 2),
            "encode_share": round(seconds["encode"] / total, 3),
            "search_share": round(seconds["search"] / total, 4),
        }))  # fmt: skip
    return results


def project(settings: BuildDataBench, sources: list[Row], stage: dict, encode: Row, search: Row) -> list[Row]:
    """Hours for the `project_pairs`-pair build, mining every pair (an upper bound: sources with given
    negatives are not mined): two texts encoded per pair, and each part's queries searched against its
    `search_pool` pool. CPU figures are CPU-hours (from CPU seconds, which a shared machine does not inflate);
    stage 1 (at the synthetic source's CPU seconds per row) and writing run on the CPU in both rows."""
    pairs, synthetic = settings.project_pairs, next(s for s in sources if s["source"] == "synthetic")
    tokens = 2 * pairs * encode.number("tokens") / encode.number("texts")
    flops = 2 * 384 * pairs * settings.search_pool  # every query against its part's whole pool
    stage1_h = pairs * synthetic.number("cpu_s") / synthetic.number("rows") / 3600
    write_h = pairs / stage["write_rows_per_cpu_s"] / 3600
    rows = []
    for where, tokens_per_s, gflop_per_s in (
        ("CPU (CPU-hours)", encode.number("tokens_per_cpu_s"), search.number("gflop_per_cpu_s")),
        ("one H100 (assumed rates)", settings.gpu_tokens_per_s, settings.gpu_gflop_per_s),
    ):
        encode_h, search_h = tokens / tokens_per_s / 3600, flops / (gflop_per_s * 1e9) / 3600
        rows.append(Row({"where": where}, {
            "stage1_h": round(stage1_h, 2), "write_h": round(write_h, 2), "encode_h": round(encode_h, 2),
            "search_h": round(search_h, 2), "total_h": round(stage1_h + write_h + encode_h + search_h, 1),
        }))  # fmt: skip
    return rows


def run(settings: BuildDataBench) -> WrittenReport:
    from neoembed.faiss_setup import faiss  # sets the BLAS core type before faiss loads

    import torch

    torch.set_num_threads(settings.threads)
    faiss.omp_set_num_threads(settings.threads)
    work = settings.out / "work"
    shutil.rmtree(work, ignore_errors=True)
    load_before = os.getloadavg()  # 1/5/15-minute load averages, before and after
    sources, stage = bench_normalise(settings, work / "normalise") if settings.rows else ([], None)
    encode = bench_encode(settings) if settings.encode_texts else None
    search = bench_search(settings, work / "search") if settings.search_pool else None
    mining = bench_mining(settings, work / "mining") if settings.mining_rows else []
    pairs = bench_pairs_files(settings, work / "pairs") if settings.pairs_rows else []
    loads = [load_before, os.getloadavg()]
    if not settings.keep:
        shutil.rmtree(work, ignore_errors=True)
    return write_report(_report(settings, sources, stage, encode, search, mining, pairs, loads), settings.out)


def _report(settings: BuildDataBench, sources, stage, encode, search, mining, pairs, loads) -> Report:
    tables, projection, verdicts = [], [], []
    if stage:
        heading = "Stage 1 (map, normalise, truncate, filter, leakage guard, dedup) and part writing"
        summary = STAGE_SUMMARY.format(**stage, target_s=TARGET_SECONDS, target_gib=TARGET_RSS_GIB)
        tables.append(Table(sources, heading=heading, after=[summary]))
    if encode:
        heading = "Teacher encoding (packaged all-MiniLM-L6-v2, float32) on the sources' length mix"
        tables.append(Table([encode], heading=heading))
    if search:
        heading = "FAISS search of one part (exact inner product, top 101, pool streamed from a memory map)"
        tables.append(Table([search], heading=heading))
    if stage and encode and search:
        projection = project(settings, sources, stage, encode, search)
        heading = f"Projection: {settings.project_pairs:,} pairs, all mined, parts of {search['pool']:,} rows"
        assumed = (
            "Stage 1 and writing stay on the CPU (stage 1 from its measured CPU seconds per short row). "
            f"The H100 row assumes {settings.gpu_tokens_per_s:,.0f} teacher tokens/s and "
            f"{settings.gpu_gflop_per_s:,.0f} GFLOP/s for the flat search: assumptions, not measurements."
        )
        tables.append(Table(projection, heading=heading, after=[assumed]))
    if mining:
        heading = f"Hard-negative mining on {settings.mining_rows:,} WordNet rows (teacher: packaged "
        heading += "all-MiniLM-L6-v2)"
        tables.append(
            Table(mining, [c for c in mining[0].cells() if c != "mined_negatives"], heading=heading)
        )
        if len(mining) > 1:
            ratio = mining[1].number("pairs_per_s") / mining[0].number("pairs_per_s")
            verdicts.append(
                f"{mining[1]['teacher_dtype']} / {mining[0]['teacher_dtype']} mining speed: {ratio:.2f}x"
            )
    if pairs:
        heading = (
            "Your pairs file, built whole (`build-data --from FILE --no-mine`), each size in a child process"
        )
        tables.append(Table(pairs, heading=heading))
        if len(pairs) > 1:
            ratio = pairs[-1].number("peak_rss_mib") / pairs[0].number("peak_rss_mib")
            verdicts.append(
                f"peak RSS at {pairs[-1]['rows']:,} rows / at {pairs[0]['rows']:,} rows: {ratio:.2f}x "
                f"({pairs[-1].number('rows') / pairs[0].number('rows'):.0f}x the rows)"
            )
    intro = (
        f"Threads {settings.threads}; 1-minute load average {loads[0][0]:.1f} before, {loads[1][0]:.1f} "
        f"after (on {os.cpu_count()} CPUs)."
    )
    payload = {"stage": stage, "sources": sources, "encode": encode, "search": search}
    payload |= {"projection": projection, "mining": mining, "pairs_files": pairs, "load_average": loads}
    return Report("build-data", "build-data benchmark", payload, tables, [intro], verdicts)
