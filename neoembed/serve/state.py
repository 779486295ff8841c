"""The server's state: what the routes depend on, built once from the settings.

`ServerState` holds the settings, the model's description, the request tokenizer, the batcher in front of
the inference process, the metrics and the optional index. `create_app` (app.py) stores it on `app.state`;
the handlers in routes.py receive it through a FastAPI dependency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from starlette.concurrency import run_in_threadpool

from neoembed.errors import InputError
from neoembed.serve.backend import BackendGone, SupervisedProcess, WorkerRestarted
from neoembed.serve.batcher import Batcher, QueueFullError, ShuttingDownError
from neoembed.serve.budget import default_budget, filled_batch
from neoembed.serve.errors import APIError
from neoembed.serve.inputs import Inputs
from neoembed.serve.metrics import Metrics
from neoembed.serve.search import ServedIndex
from neoembed.serve.settings import ServeSettings
from neoembed.serve.tokenization import Prepared, RequestTokenizer
from neoembed.serve.worker import ModelInfo


def served_name(settings: ServeSettings) -> str:
    """The `model` reported to clients: --served-model-name, else a directory's name, else the name given."""
    if settings.served_model_name:
        return settings.served_model_name
    path = Path(settings.model)
    return path.resolve().name if path.exists() else settings.model


@dataclass
class ServerState:
    settings: ServeSettings
    name: str
    model: ModelInfo
    tokenizer: RequestTokenizer
    backend: SupervisedProcess
    batcher: Batcher
    metrics: Metrics
    index: ServedIndex | None
    failure: str | None = None  # why the server must stop (the inference process died for good)
    on_fatal: Callable[[], None] = lambda: None  # stops the HTTP server (set by whoever runs it)
    closing: bool = False

    def fail(self, err: BaseException) -> None:
        """Serving ended for good (no inference process, or the batcher stopped): record why and stop the
        server, which then exits non-zero. Not a failure while the server is shutting down anyway."""
        if self.closing or self.failure is not None:
            return
        self.failure = str(err) or type(err).__name__
        self.on_fatal()

    @property
    def healthy(self) -> bool:
        """Ready for traffic: the batcher runs and the inference process is up and beating."""
        return self.batcher.alive and self.backend.ready

    async def embed(self, inputs: Inputs, *, truncate: bool, field: str) -> tuple[np.ndarray, Prepared]:
        """Tokenize and check `inputs` on a request thread, queue their ids, and await the embeddings."""
        prepared = await run_in_threadpool(self.tokenizer.prepare, inputs, truncate=truncate, field=field)
        try:
            future = self.batcher.submit(prepared.ids)
        except QueueFullError as err:
            raise APIError(
                429,
                f"The server is busy: {err}. Retry shortly.",
                code="queue_full",
                headers={"Retry-After": "1"},
            ) from err
        except ShuttingDownError as err:
            raise APIError(503, "The server is shutting down.", code="shutting_down") from err
        try:
            vectors = await asyncio.wait_for(future, self.settings.request_timeout)
        except TimeoutError as err:  # wait_for cancelled the future: the batcher skips what is still queued
            raise APIError(
                503,
                f"The request did not finish within {self.settings.request_timeout:g} s "
                "(--request-timeout); send fewer or shorter inputs, or retry.",
                code="request_timeout",
            ) from err
        except WorkerRestarted as err:
            raise APIError(
                503, f"{err}; retry the request.", code="worker_restarted", headers={"Retry-After": "5"}
            ) from err
        except BackendGone as err:
            raise APIError(503, f"The inference worker is not running: {err}.", code="unhealthy") from err
        self.metrics.input_tokens.inc(prepared.tokens)
        self.metrics.truncations.inc(len(prepared.truncated))
        return vectors, prepared

    def close(self) -> None:
        """Finish everything queued (an inference process that dies meanwhile is not replaced), then stop the
        process and release the index."""
        self.closing = True
        self.backend.stop_restarts()
        self.batcher.close()
        self.backend.close()
        if self.index is not None:
            self.index.close()


def build_state(settings: ServeSettings) -> ServerState:
    """Start the inference process (loading the model there) and everything in front of it.

    Everything that can fail on bad settings (the model, the index, the batch budget) fails here, before a
    port is bound; the inference process is stopped again when it does.
    """
    backend = SupervisedProcess(settings, fingerprint=settings.index is not None)
    try:
        model = backend.info
        budget = settings.max_batch_tokens or default_budget(backend.embed, model)
        if budget < model.max_length:
            raise InputError(
                f"--max-batch-tokens ({budget}) must be at least the max input length ({model.max_length} "
                "tokens), or a full-length input would fit no batch; raise it or lower --max-input-length",
                param="--max-batch-tokens",
            )
        backend.calibrate(full_batch(model, budget))
        index = (
            ServedIndex(Path(settings.index), model.fingerprint, threads=settings.threads)
            if settings.index
            else None
        )
    except BaseException:
        backend.close()
        raise
    metrics = Metrics()
    batcher = Batcher(
        backend.embed, max_batch_tokens=budget, max_queue_items=settings.max_queue_items, metrics=metrics
    )
    tokenizer = RequestTokenizer(
        model.tokenizer, max_length=model.max_length, prompt=model.prompt, max_chars=settings.max_input_chars
    )
    state = ServerState(settings, served_name(settings), model, tokenizer, backend, batcher, metrics, index)
    batcher.on_fatal = backend.on_fatal = state.fail
    return state


def full_batch(model: ModelInfo, budget: int) -> list[list[int]]:
    """A batch that fills the token budget with full-length inputs of one repeated word, framed as the
    tokenizer frames a text: what `SupervisedProcess.calibrate` times."""
    return filled_batch(model, budget, min(model.max_length, budget))
