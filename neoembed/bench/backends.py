"""`neoembed bench encode --backends ...`: one embedder on each inference backend, on the same texts.

Backends: torch-fp32 (the reference), torch-bf16 (skipped, with the reason, where bf16 has no hardware: torch
then emulates it, far slower than fp32), onnx-fp32 and onnx-int8 (ONNX Runtime on an export written by
`neoembed.onnx_backend`, made once under the output directory). Each backend encodes the texts in fixed-size
batches; the passes are interleaved in rotating order so machine noise affects all alike. Per backend: texts/s,
p50/p95 seconds per batch over all timed passes, the worst cosine to torch-fp32 over the texts, and recall@10
of an exact (flat) FAISS search of the texts among themselves, against torch-fp32's neighbours.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import get_args

import numpy as np
import torch

from neoembed.bench.report import markdown_table, write_report
from neoembed.bench.settings import InferenceBackend

BACKENDS = get_args(InferenceBackend)
ONNX_FILES = {"onnx-fp32": "model.onnx", "onnx-int8": "model_qint8.onnx"}
K = 10


def wordnet_glosses(n: int) -> list[str]:
    """`n` WordNet documents ("lemmas: gloss") in the data's fixed sample order."""
    from neoembed.data.wordnet import load_synsets, sample_order
    from neoembed.index.corpus import wordnet_documents

    return [doc.text for doc in wordnet_documents(sample_order(load_synsets())[:n])]


def skip_reason(backend: str) -> str | None:
    from neoembed.precision import resolve_precision

    if backend == "torch-bf16" and not resolve_precision("auto", "cpu").bf16_supported:
        return "no bf16 matrix units on this CPU (AVX512-BF16/AMX): torch would emulate bf16, far slower than fp32"
    return None


def load_backends(model_name: str, backends: list[str], export_dir: Path, threads: int) -> dict:
    from neoembed.embedder import load_embedder
    from neoembed.onnx_backend import ONNX_DIR, export_onnx, load_onnx_embedder

    reference = load_embedder(model_name, device="cpu").eval()
    models = {"torch-fp32": reference}
    if "torch-bf16" in backends:
        models["torch-bf16"] = copy.deepcopy(reference).to(torch.bfloat16)
    if any(b.startswith("onnx") for b in backends):
        if not (export_dir / ONNX_DIR / ONNX_FILES["onnx-int8"]).is_file():
            export_onnx(model_name, export_dir, quantize="int8")
        for backend in backends:
            if backend in ONNX_FILES:
                models[backend] = load_onnx_embedder(
                    export_dir, file_name=ONNX_FILES[backend], threads=threads
                )
    return models


def _recall_at_k(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Mean overlap of each text's top-K neighbours among the texts (flat inner-product search)."""
    import faiss

    def neighbours(vectors):
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors, dtype="float32"))
        return index.search(np.ascontiguousarray(vectors, dtype="float32"), K)[1]

    want, got = neighbours(reference), neighbours(candidate)
    return float(np.mean([len(set(w) & set(g)) / K for w, g in zip(want, got)]))


def run(
    model_name: str,
    backends: list[str],
    texts: list[str],
    batch_size: int,
    repeats: int,
    threads: int,
    out_dir: Path,
    progress=print,
) -> dict:
    torch.set_num_threads(threads)
    skipped = {b: reason for b in backends if (reason := skip_reason(b))}
    timed = [b for b in backends if b not in skipped]
    models = load_backends(model_name, timed, out_dir / "export", threads)
    batches = [texts[i : i + batch_size] for i in range(0, len(texts), batch_size)]

    def encode(backend, batch):
        return models[backend].encode(batch, batch_size=len(batch), normalize_embeddings=True)

    vectors = {b: np.concatenate([encode(b, batch) for batch in batches]) for b in {*timed, "torch-fp32"}}
    latencies = {b: [] for b in timed}
    for rep in range(repeats):
        for backend in timed[rep % len(timed) :] + timed[: rep % len(timed)]:
            for batch in batches:
                start = time.perf_counter()
                encode(backend, batch)
                latencies[backend].append(time.perf_counter() - start)
            progress(f"pass {rep + 1}/{repeats} {backend}: {sum(latencies[backend][-len(batches) :]):.1f} s")
    reference = vectors["torch-fp32"].astype(np.float64)
    rows = []
    for backend in backends:
        if backend in skipped:
            rows.append({"backend": backend, "skipped": skipped[backend]})
            continue
        seconds = np.array(latencies[backend])
        got = vectors[backend].astype(np.float64)
        rows.append(
            {
                "backend": backend,
                "texts/s": len(texts) * repeats / seconds.sum(),
                "p50 s/batch": float(np.percentile(seconds, 50)),
                "p95 s/batch": float(np.percentile(seconds, 95)),
                "worst cosine": float((reference * got).sum(1).min()),
                f"recall@{K}": _recall_at_k(vectors["torch-fp32"], vectors[backend]),
            }
        )
    base = next((r["texts/s"] for r in rows if r["backend"] == "torch-fp32"), None)
    for row in rows:
        if base and "texts/s" in row:
            row["vs torch-fp32"] = row["texts/s"] / base
    settings = dict(
        model=model_name, texts=len(texts), batch_size=batch_size, repeats=repeats, threads=threads
    )
    columns = list(dict.fromkeys(c for r in rows for c in r if c != "skipped"))
    markdown = "\n\n".join(
        [
            "# neoembed bench encode --backends",
            f"Settings: {settings}. texts/s and latency over {repeats} interleaved passes; worst cosine and "
            f"recall@{K} (exact search of the texts among themselves) against torch-fp32.",
            markdown_table([r for r in rows if "skipped" not in r], columns),
            "\n".join(f"- {r['backend']} skipped: {r['skipped']}" for r in rows if "skipped" in r),
        ]
    )
    payload = {"settings": settings, "rows": rows}
    json_path, md_path = write_report(out_dir, "encode-backends", payload, markdown)
    return {**payload, "json": str(json_path), "markdown": str(md_path), "table": markdown}
