"""The one place neoembed imports faiss: pick the BLAS core type first, and set thread counts explicitly.

The faiss-cpu wheel bundles an OpenBLAS that falls back to generic kernels on CPUs it does not recognise,
which makes exact (Flat) search about 5x slower. OpenBLAS reads OPENBLAS_CORETYPE once, when it is
loaded, so it must be set before the first `import faiss` anywhere in the process. Every module of this
toolkit (index, data mining, benchmarks) imports faiss from here.
"""

from __future__ import annotations

import os
import sys
import warnings


def _core_type() -> str | None:
    """The OpenBLAS kernel family for this CPU, read from /proc/cpuinfo (None: leave OpenBLAS to decide)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return None


if "faiss" in sys.modules:
    if "OPENBLAS_CORETYPE" not in os.environ:
        warnings.warn(
            "faiss was imported before neoembed.index; exact search may run on slow generic BLAS kernels. "
            "Import neoembed.index first or set OPENBLAS_CORETYPE.",
            stacklevel=2,
        )
elif (core_type := _core_type()) is not None:
    os.environ.setdefault("OPENBLAS_CORETYPE", core_type)

from neoembed.extras import require  # noqa: E402

faiss = require("faiss")


def set_threads(threads: int | None) -> int:
    """Set faiss's OpenMP thread count (None: all CPUs this process may use) and return it."""
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    faiss.omp_set_num_threads(threads)
    return threads


__all__ = ["faiss", "set_threads"]
