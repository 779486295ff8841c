"""Prometheus metrics of one server, in a registry of its own (several apps can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_POWERS_OF_TWO = tuple(float(2**k) for k in range(0, 18))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "neoembed_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.request_seconds = Histogram(
            "neoembed_request_duration_seconds",
            "HTTP request duration",
            ["route"],
            buckets=_SECONDS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "neoembed_queue_duration_seconds",
            "Time an input waits before its batch starts",
            buckets=_SECONDS,
            registry=r,
        )
        self.inference_seconds = Histogram(
            "neoembed_inference_duration_seconds", "Model time per batch", buckets=_SECONDS, registry=r
        )
        self.batch_tokens = Histogram(
            "neoembed_batch_tokens",
            "Padded tokens per batch (longest x inputs)",
            buckets=_POWERS_OF_TWO,
            registry=r,
        )
        self.batch_size = Histogram(
            "neoembed_batch_size", "Inputs per batch", buckets=_POWERS_OF_TWO, registry=r
        )
        self.queue_depth = Gauge("neoembed_queue_depth", "Inputs waiting for a batch", registry=r)
        self.input_tokens = Counter("neoembed_input_tokens", "Tokens embedded (after truncation)", registry=r)
        self.truncations = Counter(
            "neoembed_truncated_inputs", "Inputs truncated to the model's max length", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
