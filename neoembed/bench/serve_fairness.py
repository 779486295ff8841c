"""The fairness round of `neoembed bench serve`: how long a small request waits while a large one runs.

One client posts a request of `LARGE_INPUTS` texts; once it is queued, a second client posts one-text
requests, one after another, until the large one is answered. A batcher that serves requests in arrival order
makes each small request wait for the whole large one; one that interleaves requests' batches makes it wait a
few batches. The small requests' p95 latency says which (issue 57: 120 s behind a 2,048-input request).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

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
    joined, i = [], 0
    for _ in range(LARGE_INPUTS):
        text = ""
        while len(text) < characters:
            text += texts[i % len(texts)] + " "
            i += 1
        joined.append(text[:characters])
    return joined


def fairness_round(port: int, texts: list[str], *, characters: int = 160) -> Fairness:
    """Small requests' latencies behind one large request of `texts` lengthened to `characters` each."""
    base = f"http://127.0.0.1:{port}"
    large: list[tuple[float, int]] = []

    def post_large() -> None:
        started = time.perf_counter()
        response = httpx.post(f"{base}/embed", json={"inputs": large_texts(texts, characters)}, timeout=600)
        large.append((time.perf_counter() - started, response.status_code))

    thread = threading.Thread(target=post_large, name="large-request")
    thread.start()
    time.sleep(QUEUED_AFTER_S)
    latencies: list[float] = []
    failed = 0
    with httpx.Client(base_url=base, timeout=600) as client:
        while thread.is_alive() or not latencies:
            started = time.perf_counter()
            response = client.post("/embed", json={"inputs": texts[len(latencies) % len(texts)]})
            latencies.append(time.perf_counter() - started)
            failed += response.status_code != 200
    thread.join()
    ((large_s, large_status),) = large
    return Fairness(
        percentile_ms(latencies, 50),
        percentile_ms(latencies, 95),
        len(latencies),
        failed,
        large_s,
        large_status,
    )
