"""`neoembed bench index`: build, tune and time each candidate FAISS index against exact search.

Two vector sets: synthetic structured vectors (a Zipf-weighted Gaussian mixture in a low-dimensional latent
space, mapped linearly to `dim` dimensions plus noise, then normalised: neighbours are meaningful the way
they are for text embeddings, unlike uniform noise where every point is about equally far) and, optionally,
the WordNet glosses embedded by MiniLM (read from a `neoembed index build --corpus wordnet` directory),
queried with the example sentences of held-out synsets.

For each candidate: build time (train + add), index size, the search parameter tuned to the target
recall@10 on held-out queries, and batch and single-query QPS as ratios to exact Flat search in the same run.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from neoembed.faiss_setup import faiss, set_threads

import numpy as np
from tqdm.auto import tqdm

from neoembed.bench.report import Report, Row, Table, WrittenReport, met_text, timed, write_report
from neoembed.bench.settings import IndexBench
from neoembed.index import (
    choose_factory,
    exact_neighbors,
    ivf_lists,
    measure,
    pq_subquantizers,
    train_and_add,
    tune,
)


def structured_vectors(n: int, dim: int, *, queries: int = 0, clusters: int = 1000, latent: int = 32,
                       spread: float = 0.6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(`n` base vectors, `queries` held-out query vectors) from one clustered distribution, unit norm."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, latent)).astype("float32")
    weights = 1 / np.arange(1, clusters + 1) ** 0.5  # Zipf-like cluster sizes: a few big topics, a long tail
    weights /= weights.sum()
    projection = rng.standard_normal((latent, dim)).astype("float32") / np.sqrt(latent)

    def draw(m: int) -> np.ndarray:
        z = centres[rng.choice(clusters, m, p=weights)] + spread * rng.standard_normal(
            (m, latent), dtype="float32"
        )
        x = z @ projection + 0.05 * rng.standard_normal((m, dim), dtype="float32")
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")

    return draw(n), draw(queries)


def candidates(n: int, dim: int) -> list[str]:
    """Exact search first (the baseline), then the index families `auto` chooses among."""
    ivf = f"IVF{ivf_lists(n)}"
    return ["Flat", "HNSW32", f"{ivf},Flat", f"{ivf},SQ8", f"{ivf},PQ{pq_subquantizers(dim, dim)}"]


def _bench_set(
    name: str, base: np.ndarray, queries: np.ndarray, target: float, curves: dict[str, list[dict]]
) -> list[Row]:
    """A row per candidate; each candidate's tuning curve (every setting tried, its recall and QPS) into
    `curves`."""
    n, dim = base.shape
    auto, _ = choose_factory(n, dim)
    factories = candidates(n, dim)
    if auto not in factories:
        factories.append(auto)
    truth, _ = exact_neighbors(queries, base, "cosine")  # all sets are unit-norm
    exact = faiss.IndexFlatIP(dim)
    exact.add(base)
    rows = []
    for factory in tqdm(factories, desc=f"{name}: candidates"):
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        build_s = timed(partial(train_and_add, index, base))  # the sample rule of `neoembed index build`
        params, _, curve = tune(index, queries, truth, target)
        # Re-time the chosen setting, then exact search right after it: other processes' load changes
        # over minutes, so each ratio compares two measurements taken seconds apart.
        recall, qps_batch, qps_single = measure(index, queries, truth)
        _, exact_batch, exact_single = measure(exact, queries, truth)
        param = ", ".join(f"{k}={v}" for k, v in params.items()) or "exact"
        rows.append(Row({"set": name, "factory": factory, "auto": "yes" if factory == auto else ""}, {
            "build_s": build_s, "size_mb": faiss.serialize_index(index).nbytes / 2**20, "param": param,
            "recall_at_10": recall, "qps_batch": qps_batch, "x_exact_batch": qps_batch / exact_batch,
            "qps_single": qps_single, "x_exact_single": qps_single / exact_single,
        }))  # fmt: skip
        curves[f"{name}: {factory}"] = curve
    return rows


def wordnet_set(
    index_dir: Path, model: str, queries: int, threads: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """The WordNet glosses' vectors from an index directory (built with `model` first if missing), the
    vectors of held-out synsets' example sentences, and how often exact search puts the example's own
    gloss in the top 10."""
    from neoembed.data import load_synsets, split_of
    from neoembed.index import MANIFEST_FILE, VECTORS_FILE, build_index, load_index
    from neoembed.vector_file import read_vectors

    if not (index_dir / MANIFEST_FILE).exists():
        build_index(["wordnet"], index_dir, model=model, threads=threads)
    index = load_index(index_dir, threads=threads)
    candidates = [s for s in load_synsets() if s.examples and split_of(s.id) == "heldout"]
    present = set(index.store.existing_ids(s.id for s in candidates))  # the index may hold a subset
    heldout = [s for s in candidates if s.id in present][:queries]
    xq = index.encode([s.examples[0] for s in heldout])
    hits = index.search_vectors(xq, k=10)
    gloss_hit = sum(s.id in {h.id for h in row} for s, row in zip(heldout, hits)) / len(heldout)
    base = read_vectors(index_dir / VECTORS_FILE, index.manifest.dimension, index.manifest.ntotal)
    return np.ascontiguousarray(base), xq, gloss_hit


def _verdict(rows: list[Row], target: float, threads: int) -> tuple[bool, str]:
    auto = next(r for r in rows if r["auto"])
    if auto["factory"] == "Flat":
        return (
            True,
            f"{auto['set']}: auto choice Flat: exact search, the corpus is small enough (no speed target)",
        )
    met = auto.number("recall_at_10") >= target and auto.number("x_exact_batch") >= 3
    return met, (
        f"{auto['set']}: auto choice {auto['factory']} ({auto['param']}) recall@10 {auto['recall_at_10']:.3f} at "
        f"{auto['x_exact_batch']:.1f}x exact batch QPS and {auto['x_exact_single']:.1f}x exact single-query QPS, "
        f"{threads} threads (target: recall@10 >= {target} at >= 3x exact QPS: {met_text(met)})"
    )


def run(settings: IndexBench) -> WrittenReport:
    """Bench the synthetic set (skipped when n is 0) and the WordNet set (skipped without --wordnet)."""
    n, dim, queries, target = settings.n, settings.dim, settings.queries, settings.target_recall
    threads = set_threads(settings.threads)
    import torch

    torch.set_num_threads(threads)
    rows, lines, verdict = [], [], None
    curves: dict[str, list[dict]] = {}
    if n:
        base, xq = structured_vectors(n, dim, queries=queries)
        rows = _bench_set(f"synthetic {n // 1000}k x {dim}", base, xq, target, curves)
        verdict, line = _verdict(rows, target, threads)
        lines.append(line)
    if settings.wordnet:
        wn_base, wn_q, gloss_hit = wordnet_set(settings.wordnet_index, settings.model, queries, threads)
        name = f"WordNet {len(wn_base) / 1000:.1f}k x {wn_base.shape[1]} ({settings.model})"
        wn_rows = _bench_set(name, wn_base, wn_q, target, curves)
        rows += wn_rows
        lines.append(_verdict(wn_rows, target, threads)[1])
        lines.append(
            f"WordNet: exact search puts a held-out example's own gloss in the top 10 for {gloss_hit:.1%} of "
            f"{len(wn_q)} examples"
        )
    payload: dict[str, object] = {
        "rows": rows,
        "curves": curves,
        "target_met": verdict,
        "threads": threads,
        "queries": queries,
    }
    report = Report(
        name="index", title="neoembed bench index", tables=[Table(rows)], verdicts=lines, payload=payload
    )
    return write_report(report, settings.out)
