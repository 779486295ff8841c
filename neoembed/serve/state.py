"""The server's state: what the routes depend on, built once from the settings.

`ServerState` holds the settings, the model's description, the request tokenizer, the batcher in front of
the inference process, the metrics, the optional index and the warm-up's progress. `create_app` (app.py)
stores it on `app.state`; the handlers in routes.py receive it through a FastAPI dependency.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from starlette.concurrency import run_in_threadpool

from neoembed.errors import InputError
from neoembed.finite import NonFiniteVectors, require_finite
from neoembed.serve.backend import BackendGone, SupervisedProcess, WorkerRestarted
from neoembed.serve.batcher import Batcher, QueueFullError, ShuttingDownError
from neoembed.serve.budget import fixed_budget, gpu_candidates, measure_budget, provisional_budget
from neoembed.serve.errors import APIError
from neoembed.serve.inputs import Inputs
from neoembed.serve.metrics import Metrics
from neoembed.serve.search import ServedIndex
from neoembed.serve.settings import ServeSettings
from neoembed.serve.shutdown import ShutdownSchedule
from neoembed.serve.tokenization import Prepared, RequestTokenizer
from neoembed.serve.warmup import WarmUp, warm_up_batches
from neoembed.serve.worker import ModelInfo

log = logging.getLogger("neoembed.serve")

# How often a request waiting for its embeddings looks whether its client is still connected.
DISCONNECT_POLL_SECONDS = 0.25
T = TypeVar("T")


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
    warm: WarmUp
    failure: str | None = None  # why the server must stop (the inference process died for good)
    on_fatal: Callable[[], None] = lambda: None  # stops the HTTP server (set by whoever runs it)
    closing: bool = False  # shutting down: an inference process's end is no failure
    shutdown_deadline: float | None = None  # monotonic time by which the server has exited

    def fail(self, err: BaseException) -> None:
        """Serving ended for good (no inference process, or the batcher stopped): record why and stop the
        server, which then exits non-zero. Not a failure while the server is shutting down anyway."""
        if self.closing or self.failure is not None:
            return
        self.failure = str(err) or type(err).__name__
        self.on_fatal()

    @property
    def healthy(self) -> bool:
        """Ready for traffic: warmed up, the batcher runs and the inference process is up and beating."""
        return self.warm.finished and self.batcher.alive and self.backend.ready

    def start_warm_up(self) -> None:
        """Time the budget sweep and warm a compiled model up on a thread of its own, the port already bound,
        so /health can say so (an eager model with a known budget was warmed up before); a failure, such as a
        compiler error, stops the server."""
        if not self.warm.finished:
            threading.Thread(target=self._warm_up, name="neoembed-warm-up", daemon=True).start()

    def _warm_up(self) -> None:
        started = time.perf_counter()
        try:
            if self.warm.sweeping:
                log.info("timing %d batch budgets; /health says ready after the warm-up", self.warm.budgets)
                self.choose_budget()
            log.info("warming the model up on %d batches; /health says ready after", len(self.warm.batches))
            self.backend.warm_up(self.warm)
        except Exception as err:
            if not self.closing:  # a warm-up cut short by shutdown is no failure
                log.error("warming up failed: %s", err)
            self.fail(err)
        else:
            log.info("warmed up in %.1f s: ready", time.perf_counter() - started)

    def choose_budget(self) -> None:
        """Time the sweep, hand its budget to the batcher (which ran the provisional one until now), and set
        the warm-up batches for it. Done once: a replaced inference process keeps the budget."""
        budget = measure_budget(
            self.backend.embed_without_deadline, self.model, on_timed=self.warm.count_timed
        )
        self.batcher.max_batch_tokens = budget
        self.warm.batches = warm_up_batches(self.model, budget)

    async def embed(
        self, inputs: Inputs, *, truncate: bool, field: str, disconnected: Callable[[], Awaitable[bool]]
    ) -> tuple[np.ndarray, Prepared]:
        """Tokenize and check `inputs` on a request thread, queue their ids, and await the embeddings, all
        within --request-timeout; `disconnected` says whether the client has gone (its inputs are dropped)."""
        deadline = time.monotonic() + self.settings.request_timeout
        prepared = await self._until(
            run_in_threadpool(self.tokenizer.prepare, inputs, truncate=truncate, field=field),
            deadline,
            disconnected,
        )
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
            vectors = await self._until(future, deadline, disconnected)
        except WorkerRestarted as err:
            raise APIError(
                503, f"{err}; retry the request.", code="worker_restarted", headers={"Retry-After": "5"}
            ) from err
        except ShuttingDownError as err:
            raise APIError(503, f"{str(err).capitalize()}.", code="shutting_down") from err
        except BackendGone as err:
            if self.closing:
                raise APIError(503, "The server is shutting down.", code="shutting_down") from err
            raise APIError(503, f"The inference worker is not running: {err}.", code="unhealthy") from err
        try:
            require_finite(vectors, what=f"'{field}'")
        except NonFiniteVectors as err:
            log.error("%s", err)
            raise APIError(500, f"{err}.", param=field, code="non_finite_embedding") from err
        self.metrics.input_tokens.inc(prepared.tokens)
        self.metrics.truncations.inc(len(prepared.truncated))
        return vectors, prepared

    async def _until(
        self, work: Awaitable[T], deadline: float, disconnected: Callable[[], Awaitable[bool]]
    ) -> T:
        """The result of `work`, unless the request's deadline passes (503 request_timeout) or its client
        disconnects first; either way `work` is cancelled (the batcher drops a cancelled request's inputs)."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise APIError(
                        503,
                        f"The request did not finish within {self.settings.request_timeout:g} s "
                        "(--request-timeout); send fewer or shorter inputs, or retry.",
                        code="request_timeout",
                    )
                done, _ = await asyncio.wait({task}, timeout=min(left, DISCONNECT_POLL_SECONDS))
                if done:
                    return task.result()
                if await disconnected():
                    raise APIError(499, "The client disconnected.", code="client_disconnected")
        finally:
            task.cancel()

    def begin_shutdown(self) -> None:
        """SIGTERM (or the end of `serve_in_thread`): start no new inference process (one still loading is
        killed), and at the schedule's drain time fail what is still unanswered with 503 shutting_down and
        kill the inference process (`abort`), so the shutdown never waits on it (shutdown.py)."""
        if self.shutdown_deadline is not None:
            return
        self.closing = True
        self.shutdown_deadline = time.monotonic() + self.settings.shutdown_timeout
        self.backend.stop_restarts()
        timer = threading.Timer(ShutdownSchedule(self.settings.shutdown_timeout).drain_s, self.abort)
        timer.daemon = True
        timer.start()

    def abort(self) -> None:
        """Fail every request queued or in a batch with 503 shutting_down, and kill the inference process."""
        self.batcher.abort(
            ShuttingDownError("the server is shutting down, and this request did not finish in time")
        )
        self.backend.kill()

    def close(self) -> None:
        """The app's end, after uvicorn's drain: finish what is still queued while the shutdown's schedule
        allows, then stop the process and release the index; bounded by --shutdown-timeout in all."""
        self.begin_shutdown()
        assert self.shutdown_deadline is not None  # set by begin_shutdown
        left = ShutdownSchedule(self.settings.shutdown_timeout).drain_s - self._since_shutdown()
        if not self.batcher.close(timeout=max(left, 0.0)):
            self.abort()
        self.backend.close(timeout=max(self.shutdown_deadline - time.monotonic(), 0.0))
        if self.index is not None:
            self.index.close()

    def _since_shutdown(self) -> float:
        assert self.shutdown_deadline is not None  # called after begin_shutdown
        return time.monotonic() - (self.shutdown_deadline - self.settings.shutdown_timeout)


def build_state(settings: ServeSettings) -> ServerState:
    """Start the inference process (loading the model there) and everything in front of it.

    Everything that can fail on bad settings (the model, the index, --max-batch-tokens) fails here, before a
    port is bound; the inference process is stopped again when it does. An eager model with a known budget is
    warmed up here too; a GPU's budget sweep and a compiled model's warm-up run once the port is bound
    (`start_warm_up`), the batcher using the provisional budget until the sweep has chosen.
    """
    backend = SupervisedProcess(settings, fingerprint=settings.index is not None)
    try:
        model = backend.info
        budget = fixed_budget(settings, model.device.partition(":")[0], model.max_length)
        if budget is None:  # timed after binding; each candidate holds a full-length input
            warm = WarmUp(budgets=len(gpu_candidates(model.max_length)))
        elif budget < model.max_length:
            raise InputError(
                f"--max-batch-tokens ({budget}) must be at least the max input length ({model.max_length} "
                "tokens), or a full-length input would fit no batch; raise it or lower --max-input-length",
                param="--max-batch-tokens",
            )
        else:
            warm = WarmUp(batches=warm_up_batches(model, budget))
            if not model.compiled:  # a moment's work: done before the port is bound
                backend.warm_up(warm)
        index = None
        if settings.index:
            assert model.fingerprint is not None  # asked of the process whenever an index is served
            index = ServedIndex(Path(settings.index), model.fingerprint, threads=settings.threads)
    except BaseException:
        backend.close(timeout=settings.shutdown_timeout)
        raise
    metrics = Metrics()
    batcher = Batcher(
        backend.embed,
        max_batch_tokens=provisional_budget(model.max_length) if budget is None else budget,
        max_queue_items=settings.max_queue_items,
        metrics=metrics,
    )
    tokenizer = RequestTokenizer(
        model.tokenizer, max_length=model.max_length, prompt=model.prompt, max_chars=settings.max_input_chars
    )
    state = ServerState(
        settings, served_name(settings), model, tokenizer, backend, batcher, metrics, index, warm
    )
    batcher.on_fatal = backend.on_fatal = state.fail
    return state
