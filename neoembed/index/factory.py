"""Choose a FAISS index for a corpus by its size and the memory at hand, and name its search parameter.

The rules follow the FAISS wiki's "Guidelines to choose an index": exact search while it is cheap; HNSW
(fastest at high recall, ~2 x 4 x M extra bytes per vector) below a million vectors when memory allows;
IVF with about 4 sqrt(n) lists above that; IVF with scalar (SQ8, 4x smaller) or product quantisation when
the float vectors do not fit in memory. Memory defaults to half of what the machine has available.
"""

from __future__ import annotations

import math
import os

from neoembed.faiss_setup import faiss

FLAT_MAX = 50_000  # exact search over 50k x 384 floats still answers a query in about a millisecond
HNSW_MAX = 1_000_000  # HNSW build time grows quickly beyond this on a few cores
HNSW_M = 32


def available_memory() -> int:
    """Bytes of memory available to new allocations (MemAvailable), or total memory where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def ivf_lists(n: int) -> int:
    """The power of two nearest 4 sqrt(n), at least 16."""
    return max(16, 2 ** round(math.log2(4 * math.sqrt(max(n, 1)))))


def _ivf_prefix(n: int) -> str:
    nlist = ivf_lists(n)
    # Beyond 64k lists, assigning vectors to a flat coarse quantizer dominates: use an HNSW quantizer.
    return f"IVF{nlist}_HNSW32" if nlist >= 65536 else f"IVF{nlist}"


def pq_subquantizers(dim: int, max_bytes: int) -> int:
    """The largest divisor of `dim` within `max_bytes` codes that keeps >= 4 dimensions per sub-quantizer."""
    fitting = [m for m in range(1, min(dim // 4, max_bytes) + 1) if dim % m == 0]
    return max(fitting, default=1)


def choose_factory(n: int, dim: int, memory_bytes: int | None = None) -> tuple[str, str]:
    """(factory string, reason) for `n` vectors of `dim` floats within `memory_bytes`."""
    memory = available_memory() // 2 if memory_bytes is None else memory_bytes
    flat_bytes = 4 * n * dim
    gib = f"{memory / 2**30:.1f} GiB"
    if n <= FLAT_MAX and flat_bytes <= memory:
        return "Flat", f"{n} vectors <= {FLAT_MAX}: exact search is fast enough"
    if n <= HNSW_MAX and flat_bytes + 8 * HNSW_M * n <= memory:
        return f"HNSW{HNSW_M}", f"{n} vectors <= {HNSW_MAX} and vectors + graph fit in {gib}"
    if flat_bytes <= memory:
        return f"{_ivf_prefix(n)},Flat", f"{n} vectors: inverted lists over float vectors fit in {gib}"
    if n * dim <= memory:
        return f"{_ivf_prefix(n)},SQ8", f"float vectors do not fit in {gib}; 8-bit scalar quantisation does"
    m = pq_subquantizers(dim, memory // n)
    return (
        f"{_ivf_prefix(n)},PQ{m}",
        f"8-bit vectors do not fit in {gib}: product quantisation, {m} bytes each",
    )


def faiss_metric(metric: str) -> int:
    return faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT


def nlist(index) -> int | None:
    """The number of inverted lists of an IVF index (also one wrapped in a pre-transform); None otherwise."""
    try:
        return faiss.extract_index_ivf(index).nlist
    except RuntimeError:  # not an IVF index
        return None


def search_parameter(index) -> tuple[str | None, list[int]]:
    """The name of the index's speed/recall knob and the values to try, in increasing cost."""
    lists = nlist(index)
    if lists is not None:
        return "nprobe", [2**i for i in range(int(math.log2(lists)) + 1)]
    if isinstance(faiss.downcast_index(index), faiss.IndexHNSW):
        return "efSearch", [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
    return None, []


def set_search_params(index, params: dict) -> None:
    """Apply {"nprobe": 8}-style parameters through FAISS's ParameterSpace (handles wrapped indexes)."""
    space = faiss.ParameterSpace()
    for name, value in params.items():
        space.set_index_parameter(index, name, value)
