"""Server settings: one typed dataclass that the CLI fills and `create_app` reads."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# OpenAI's limit on the number of inputs in one embeddings request.
OPENAI_MAX_INPUTS = 2048
# Token budget of one batch on CPU when the flag is not given: large enough to amortise per-call overhead,
# small enough that a short request waiting behind a batch waits well under a second for MiniLM.
DEFAULT_BATCH_TOKENS = 4096
DTYPES = ("auto", "float32", "float16", "bfloat16")


def default_threads() -> int:
    """CPU cores this process may use (respects affinity masks and container CPU sets)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class ServeSettings:
    """Everything `neoembed serve` can be told; each field is one CLI flag of the same name."""

    model: str = "minilm"
    served_model_name: str | None = None  # the `model` reported to clients; defaults to the model's name
    index: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    truncate: bool = False  # False: inputs over the max length are rejected with 400
    max_input_length: int | None = None  # tokens; defaults to the model's max_seq_length
    max_batch_tokens: int | None = None  # padded tokens per batch; defaults to max(4096, max length)
    max_queue_items: int = 16384  # inputs waiting for a batch before new requests get 429
    max_client_batch_size: int = OPENAI_MAX_INPUTS  # inputs per request
    max_body_bytes: int = 16 * 1024 * 1024
    threads: int | None = None  # torch intra-op threads; defaults to the usable CPU cores
    device: str | None = None
    dtype: str = "auto"  # auto: float32 on CPU, bfloat16 (or float16) on GPU
    log_level: str = "info"

    def __post_init__(self) -> None:
        positive = {
            "max_queue_items": self.max_queue_items,
            "max_client_batch_size": self.max_client_batch_size,
            "max_body_bytes": self.max_body_bytes,
            "max_input_length": self.max_input_length,
            "max_batch_tokens": self.max_batch_tokens,
            "threads": self.threads,
        }
        for name, value in positive.items():
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {self.port}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.max_queue_items < self.max_client_batch_size:
            raise ValueError(
                f"--max-queue-items ({self.max_queue_items}) must be at least --max-client-batch-size "
                f"({self.max_client_batch_size}), or a full-size request could never be queued"
            )
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("--api-key must not be empty")
        if self.index is not None and not Path(self.index).is_dir():
            raise ValueError(f"--index {self.index}: no such directory")
