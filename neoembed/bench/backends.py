"""Inference backends of one embedder, side by side: `neoembed bench encode --backends ...` times them
in-process, and `bench serve --backends ...` serves each (see `bench.serve`).

Backends: torch-fp32 (the reference), torch-bf16 (skipped, with the reason, where bf16 has no hardware: torch
then emulates it, far slower than fp32), onnx-fp32 and onnx-int8 (ONNX Runtime on an export written by
`neoembed.onnx_backend`, made once under the output directory).

Fidelity is measured on a WordNet probe (`wordnet_probe`): the glosses and, as held-out queries, an example
sentence of each synset that has one. Per backend: the worst cosine to torch-fp32 over all probe texts; the
overlap of each gloss's 10 nearest glosses with torch-fp32's (an exact FAISS search, the strictest view: it
moves whenever near-tied neighbours swap places); and retrieval recall@10 of the queries (is the gloss of the
query's own synset in its top 10?), the quality a user of a search index sees, with its change from torch-fp32.

`bench encode --backends` encodes the glosses in fixed-size batches, the passes interleaved in rotating order
so machine noise affects all backends alike: texts/s and p50/p95 seconds per batch.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from neoembed.bench.report import Report, Row, Table, WrittenReport, rotated, timed, write_report
from neoembed.bench.settings import EncodeBench
from neoembed.probe import lower_encoder, worst_cosine

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

REFERENCE = "torch-fp32"
ONNX_FILES = {"onnx-fp32": "model.onnx", "onnx-int8": "model_qint8.onnx"}
K = 10


@dataclass(frozen=True)
class Probe:
    """WordNet documents ("lemmas: gloss") and held-out queries: an example sentence of each synset that has
    one, whose relevant document is its own synset's (`gold[i]` indexes `documents`)."""

    documents: list[str]
    queries: list[str]
    gold: np.ndarray

    @property
    def texts(self) -> list[str]:
        return self.documents + self.queries


def wordnet_probe(n: int) -> Probe:
    """The first `n` synsets of the data's fixed sample order as a probe."""
    from neoembed.data import load_synsets, sample_order
    from neoembed.index import wordnet_documents

    synsets = sample_order(load_synsets())[:n]
    gold = [i for i, synset in enumerate(synsets) if synset.examples]
    documents = [doc.text for doc in wordnet_documents(synsets)]
    return Probe(documents, [synsets[i].examples[0] for i in gold], np.array(gold, dtype=np.int64))


def skip_reason(backend: str, device: str = "cpu") -> str | None:
    from neoembed.precision import resolve_precision

    if backend == "torch-bf16" and not resolve_precision("auto", device).bf16_supported:
        return (
            f"no bf16 matrix units on this {device} (a CPU needs AVX512-BF16/AMX): torch would emulate bf16, "
            "far slower than fp32"
        )
    return None


def onnx_export(model_name: str, export_dir: Path) -> Path:
    """`model_name` exported anew (fp32 and int8) to `export_dir`: a bench measures the graph this code
    writes for this model, never one an earlier run or another model left there."""
    from neoembed.onnx_backend import export_onnx

    shutil.rmtree(export_dir, ignore_errors=True)
    export_onnx(model_name, export_dir, quantize="int8")
    return export_dir


def load_backends(
    model_name: str, backends: Sequence[str], export_dir: Path, threads: int
) -> dict[str, SentenceTransformer]:
    from neoembed.embedder import load_embedder
    from neoembed.onnx_backend import load_onnx_embedder

    reference = load_embedder(model_name, device="cpu").eval()
    models = {REFERENCE: reference}
    if "torch-bf16" in backends:
        models["torch-bf16"] = lower_encoder(reference, torch.bfloat16)  # as encode and serve lower it
    onnx = [backend for backend in backends if backend in ONNX_FILES]
    if onnx:
        onnx_export(model_name, export_dir)
    return models | {
        b: load_onnx_embedder(export_dir, file_name=ONNX_FILES[b], threads=threads) for b in onnx
    }


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to norm 1, as float32 for FAISS: an inner-product search over them ranks by cosine."""
    vectors = np.asarray(vectors, dtype=np.float64)
    return np.ascontiguousarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), dtype="float32")


def _top_k(documents: np.ndarray, queries: np.ndarray) -> np.ndarray:
    from neoembed.faiss_setup import faiss

    index = faiss.IndexFlatIP(documents.shape[1])
    index.add(documents)
    return index.search(queries, K)[1]


def fidelity(probe: Probe, reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """How far `candidate`'s vectors of `probe.texts` are from `reference`'s (both in probe order): figures
    by name, for a bench's rows."""
    n = len(probe.documents)

    def recall(vectors: np.ndarray) -> float:  # queries whose own synset's document is in their top K
        top = _top_k(vectors[:n], vectors[n:])
        return float(np.mean([gold in row for gold, row in zip(probe.gold, top)]))

    cosine, reference, candidate = worst_cosine(reference, candidate), _unit(reference), _unit(candidate)
    want, got = _top_k(reference[:n], reference[:n]), _top_k(candidate[:n], candidate[:n])
    served = recall(candidate)
    return {
        "worst cosine": cosine,
        f"neighbour overlap@{K}": float(np.mean([len(set(w) & set(g)) / K for w, g in zip(want, got)])),
        f"recall@{K}": served,
        f"recall@{K} change": served - recall(reference),
    }


def run(settings: EncodeBench, progress=print) -> WrittenReport:
    torch.set_num_threads(settings.threads)
    probe = wordnet_probe(settings.texts)
    skipped = {b: reason for b in settings.backends if (reason := skip_reason(b))}
    running = [b for b in settings.backends if b not in skipped]
    models = load_backends(settings.model, running, settings.out / "export", settings.threads)
    texts, size, repeats = probe.documents, settings.batch_size, settings.repeats
    batches = [texts[i : i + size] for i in range(0, len(texts), size)]

    def encode(backend: str, texts: list[str]) -> np.ndarray:
        return models[backend].encode(texts, batch_size=size, normalize_embeddings=True)

    vectors = {b: encode(b, probe.texts) for b in {*running, REFERENCE}}
    latencies: dict[str, list[float]] = {b: [] for b in running}
    for rep in range(repeats):
        for backend in rotated(running, rep):
            latencies[backend] += [timed(partial(encode, backend, batch)) for batch in batches]
            progress(f"pass {rep + 1}/{repeats} {backend}: {sum(latencies[backend][-len(batches) :]):.1f} s")
    speed = {b: len(texts) * repeats / float(np.sum(latencies[b])) for b in running}
    rows = []
    for backend in settings.backends:
        if backend in skipped:
            rows.append(Row({"backend": backend}, note=f"skipped: {skipped[backend]}"))
            continue
        figures = {"texts/s": speed[backend]}
        figures |= {f"p{q} s/batch": float(np.percentile(latencies[backend], q)) for q in (50, 95)}
        figures |= fidelity(probe, vectors[REFERENCE], vectors[backend])
        if REFERENCE in speed:
            figures["vs torch-fp32"] = speed[backend] / speed[REFERENCE]
        rows.append(Row({"backend": backend}, figures))
    described = {"model": settings.model, "texts": len(texts), "queries": len(probe.queries)}
    described |= {"batch_size": size, "repeats": repeats, "threads": settings.threads}
    report = Report(
        name="encode-backends",
        title="neoembed bench encode --backends",
        intro=[
            f"Settings: {described}. texts/s and latency over {repeats} interleaved passes over the glosses. "
            f"Against torch-fp32: the worst cosine over glosses and queries, the overlap of each gloss's {K} "
            f"nearest glosses, and retrieval recall@{K} of the example-sentence queries with its change."
        ],
        tables=[Table([row for row in rows if not row.note])],
        verdicts=[f"{row['backend']} {row.note}" for row in rows if row.note],
        payload={"settings": described, "rows": rows},
    )
    return write_report(report, settings.out)
