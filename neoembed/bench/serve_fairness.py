"""The fairness round of `neoembed bench serve`: how long a small request waits while a large one runs.

One client posts a request of `LARGE_INPUTS` texts; once it is queued, a second client posts one-text
requests, one after another, until the large one is answered. A batcher that serves requests in arrival order
makes each small request wait for the whole large one; one that interleaves requests' batches makes it wait a
few batches. The small requests' p95 latency says which (issue 57: 120 s behind a 2,048-input request).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from neoembed.bench.report import percentile_ms

LARGE_INPUTS = 2048  # OpenAI's limit on inputs per request, the server's default --max-client-batch-size
QUEUED_AFTER_S = 0.5  # the large request is parsed, tokenized and queued by then


@dataclass(frozen=True)
class Fairness:
    """The small requests' latencies while the large request ran (answered or not), how many were not
    answered 200, and the large request's seconds and status."""

    small_p50_ms: float
    small_p95_ms: float
    small_requests: int
    small_failed: int
    large_s: float
    large_status: int

    def line(self) -> str:
        return (
            f"a one-text request while a {LARGE_INPUTS}-input request runs: p95 {self.small_p95_ms:.0f} ms, "
            f"p50 {self.small_p50_ms:.0f} ms over {self.small_requests} requests ({self.small_failed} not "
            f"answered 200); the large one took {self.large_s:.1f} s (status {self.large_status})"
        )


def large_texts(texts: list[str], characters: int) -> list[str]:
    """LARGE_INPUTS texts of about `characters` characters each, made by joining `texts` in turn."""
    stream, joined = itertools.cycle(texts), []
    for _ in range(LARGE_INPUTS):
        text = ""
        while len(text) < characters:
            text += next(stream) + " "
        joined.append(text[:characters])
    return joined


def fairness_round(port: int, texts: list[str], *, characters: int = 160) -> Fairness:
    """Small requests' latencies behind one large request of `texts` lengthened to `characters` each."""
    base, large = f"http://127.0.0.1:{port}", list[tuple[float, int]]()

    def post(inputs: list[str] | str, via: Any = httpx) -> tuple[float, int]:  # seconds, status
        started = time.perf_counter()
        status = via.post(f"{base}/embed", json={"inputs": inputs}, timeout=600).status_code
        return time.perf_counter() - started, status

    thread = threading.Thread(target=lambda: large.append(post(large_texts(texts, characters))))
    thread.start()
    time.sleep(QUEUED_AFTER_S)
    with httpx.Client() as client:
        small = [post(texts[0], client)]
        while thread.is_alive():
            small.append(post(texts[len(small) % len(texts)], client))
    thread.join()
    latencies, failed = [s for s, _ in small], sum(status != 200 for _, status in small)
    return Fairness(percentile_ms(latencies, 50), percentile_ms(latencies, 95), len(small), failed, *large[0])
