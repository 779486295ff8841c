"""Server settings: one typed model that `neoembed serve` binds its options to and `create_app` reads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from neoembed.compilation import InferenceCompile
from neoembed.recipes import StrictSettings

# OpenAI's limit on the number of inputs in one embeddings request.
OPENAI_MAX_INPUTS = 2048
# Token budget of one batch on the CPU when the flag is not given (a GPU's is measured at start: budget.py).
# 1024 padded tokens: measured on 2 cores over 512 WordNet glosses, the inference process embedded 1.14x as
# fast as encode(batch_size=32) for MiniLM with 1024, 0.98x with 2048 and 0.74x with 4096 (activations of
# larger batches leave the caches); a small NeoBERT ran 1.45x with 1024 or 2048, 1.21x with 4096.
CPU_BATCH_TOKENS = 1024


def default_threads() -> int:
    """CPU cores this process may use (respects affinity masks and container CPU sets)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class ServeSettings(StrictSettings):
    """Everything `neoembed serve` can be told; each field is the CLI option of the same name."""

    model_config = ConfigDict(frozen=True)

    model: str = "minilm"
    """Embedder: directory, hub id, or 'minilm'."""
    served_model_name: str | None = None
    """Model name reported to clients (default: the model's name)."""
    index: Path | None = None
    """Index directory to serve on POST /search (built with this model)."""
    host: str = "127.0.0.1"
    """Address to bind; 0.0.0.0 to accept remote clients."""
    port: int = Field(8000, ge=0, le=65535)
    """Port to bind."""
    api_key: str | None = None
    """Require 'Authorization: Bearer KEY' (all but /health, /metrics)."""
    truncate: bool = False
    """Truncate over-long inputs instead of refusing them with 400."""
    max_input_length: int | None = Field(None, ge=1)
    """Max tokens per input (default: the model's max_seq_length)."""
    max_batch_tokens: int | None = Field(None, ge=1)
    """Padded tokens per batch (default: 1024 on CPU, on a GPU the fastest of a sweep timed at start; at least
    the max input length)."""
    max_queue_items: int = Field(16384, ge=1)
    """Queued inputs before requests get 429."""
    max_client_batch_size: int = Field(OPENAI_MAX_INPUTS, ge=1)
    """Inputs per request."""
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1)
    """Largest request body; larger gets 413."""
    threads: int | None = Field(None, ge=1)
    """torch CPU threads (default: usable cores)."""
    device: str | None = None
    """torch device, e.g. cpu or cuda:0 (default: auto)."""
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    """auto (bfloat16 where it has hardware, float16 on older GPUs, else float32; checked against float32 on
    probe texts), float32, float16 or bfloat16."""
    backend: Literal["torch", "onnx"] = "torch"
    """torch, or onnx: ONNX Runtime on the CPU, for a directory written by `neoembed export onnx`."""
    onnx_file: str | None = None
    """With --backend onnx: the graph under onnx/ (default model.onnx; model_qint8.onnx for int8)."""
    compile: InferenceCompile = "auto"
    log_level: str = "info"
    """uvicorn and server log level."""
    strict_model_name: bool = False
    """Answer 404 model_not_found to a request that names another model than the served one, as OpenAI does
    (default: serve whatever name a client sends)."""
    header_timeout: float = Field(10.0, gt=0)
    """Seconds a connection may take to send a request's headers (an idle new connection is closed then)."""
    body_timeout: float = Field(30.0, gt=0)
    """Seconds a request's body may take to arrive; a slower one gets 408."""
    keep_alive_timeout: float = Field(5.0, gt=0)
    """Seconds an idle keep-alive connection stays open between requests."""
    shutdown_timeout: float = Field(30.0, gt=0)
    """On SIGTERM, seconds until the server has exited, whatever its inference process is doing: accepted
    requests are finished until shortly before, the rest get 503 shutting_down."""
    batch_timeout: float | None = Field(None, gt=0)
    """Seconds one batch may compute before its inference process counts as hung: it is killed and started
    again, and the batch's requests get 503 worker_restarted (default: 20 x a full batch's time, measured at
    start, at least 10 s)."""
    request_timeout: float = Field(120.0, gt=0)
    """Seconds a request may wait and compute in all; a longer one gets 503 request_timeout and its inputs
    still queued are dropped."""
    max_input_chars: int | None = Field(None, ge=1)
    """Characters per input text, checked before tokenizing: a longer text is refused with 400 (or, with
    truncation, cut to it) (default: 32 x the max input length in tokens)."""
    max_worker_restarts: int = Field(3, ge=0)
    """Times the inference process is restarted after it dies (a crash, the OOM killer, a stray signal); once
    more and the server exits with status 1 (for a supervisor to act on). A process the server kills itself,
    for a batch past --batch-timeout or a missing heartbeat, is replaced without counting."""
    load_timeout: float = Field(120.0, gt=0)
    """Seconds a replacement inference process may take to load and warm up; past it, it is killed and
    started again (3 tries, 1 s and 4 s apart), then the server exits with status 1."""

    @model_validator(mode="after")
    def _consistent(self) -> ServeSettings:
        if self.max_queue_items < self.max_client_batch_size:
            raise ValueError(
                f"--max-queue-items ({self.max_queue_items}) must be at least --max-client-batch-size "
                f"({self.max_client_batch_size}), or a full-size request could never be queued"
            )
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("--api-key must not be empty")
        if self.api_key is not None and not (self.api_key.isascii() and self.api_key.isprintable()):
            # A client sends it in an HTTP header, which carries printable ASCII; a key read from a non-UTF-8
            # environment arrives as lone surrogates that no header can ever match.
            raise ValueError("--api-key (or NEOEMBED_API_KEY) must be printable ASCII, as HTTP headers carry")
        if self.backend == "onnx" and (
            self.dtype not in ("auto", "float32") or self.device not in (None, "cpu")
        ):
            raise ValueError(
                "--backend onnx runs the exported graph's own dtype on the CPU: leave --dtype and --device"
            )
        if self.onnx_file is not None and self.backend != "onnx":
            raise ValueError("--onnx-file needs --backend onnx")
        if self.compile is True and self.backend == "onnx":
            raise ValueError("--compile needs --backend torch: ONNX Runtime runs the exported graph as it is")
        if self.index is not None and not Path(self.index).is_dir():
            raise ValueError(f"--index {self.index}: no such directory")
        return self
