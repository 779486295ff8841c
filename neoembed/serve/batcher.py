"""Dynamic batching: requests queue token-id sequences, a worker thread hands batches to the backend.

Requests queue their inputs one item at a time and await a future; the worker drains the queue in FIFO
windows, sorts each window by length so a batch pads little, cuts it into batches whose padded size
(longest input x inputs) fits the token budget, and writes each row back into its request's slot. A request
larger than the budget is thereby split across batches and reassembled in order. The queue is bounded:
a request that would overflow it is refused (429) instead of waiting without limit. The worker thread only
waits on the backend (the inference process), so /health and /metrics answer while a batch is running.

Hand-written because neither FastAPI nor sentence-transformers has a request batcher; text-embeddings-inference
(Rust) is the design it follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from neoembed.errors import RunError
from neoembed.serve.backend import BackendGone, WorkerRestarted
from neoembed.serve.metrics import Metrics

log = logging.getLogger("neoembed.serve")

# A window holds up to this many batches' worth of tokens: enough choice for length-aware grouping, small
# enough that a request arriving behind it waits for a few batches at most.
WINDOW_BATCHES = 4


class QueueFullError(RunError):
    """The queue cannot take the request's inputs now (answered with 429)."""


class ShuttingDownError(RunError):
    """The server is draining for shutdown and takes no new work (answered with 503)."""


def plan_batches(lengths: Sequence[int], max_batch_tokens: int) -> list[list[int]]:
    """Group positions into batches whose padded size (longest x count) stays within `max_batch_tokens`.

    Positions are visited longest first, so each batch holds inputs of similar length; an input longer than
    the budget on its own still gets a batch of one.
    """
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        current = batches[-1] if batches else None
        if current is None or lengths[current[0]] * (len(current) + 1) > max_batch_tokens:
            batches.append([i])
        else:
            current.append(i)
    return batches


@dataclass
class _Job:
    """One request: its future on the event loop and the rows filled in so far (worker thread only)."""

    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    rows: list[np.ndarray | None]
    remaining: int

    def settle(self, result: np.ndarray | None = None, error: BaseException | None = None) -> None:
        def resolve() -> None:
            if self.future.done():  # the request was cancelled (client gone) or already failed
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        with contextlib.suppress(RuntimeError):  # the event loop is closed: nobody is waiting any more
            self.loop.call_soon_threadsafe(resolve)


@dataclass
class _Item:
    job: _Job
    position: int
    ids: list[int]
    enqueued: float = field(default_factory=time.perf_counter)


class Batcher:
    def __init__(
        self,
        embed: Callable[[list[list[int]]], np.ndarray],
        *,
        max_batch_tokens: int,
        max_queue_items: int,
        metrics: Metrics,
    ) -> None:
        self._embed = embed
        self.on_fatal: Callable[[BaseException], None] = lambda err: (
            None
        )  # told when the worker stops for good
        # Read for each window: a GPU's budget sweep sets it once it has chosen (state.py).
        self.max_batch_tokens = max_batch_tokens
        self.max_queue_items = max_queue_items
        self._metrics = metrics
        self._pending: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="neoembed-inference", daemon=True)

    # --- event-loop side -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._closing

    @property
    def depth(self) -> int:
        return len(self._pending)

    def submit(self, sequences: list[list[int]]) -> asyncio.Future:
        """Queue one request's token-id sequences; the future resolves to their embeddings, one row per
        sequence, in order."""
        loop = asyncio.get_running_loop()
        job = _Job(loop.create_future(), loop, [None] * len(sequences), len(sequences))
        with self._cond:
            if self._closing:
                raise ShuttingDownError("the server is shutting down")
            if len(self._pending) + len(sequences) > self.max_queue_items:
                raise QueueFullError(
                    f"the queue holds {len(self._pending)} inputs and this request adds {len(sequences)}; "
                    f"the limit is {self.max_queue_items}"
                )
            self._pending.extend(_Item(job, i, ids) for i, ids in enumerate(sequences))
            self._metrics.queue_depth.set(len(self._pending))
            self._cond.notify()
        return job.future

    def close(self) -> None:
        """Refuse new work, let the worker finish everything already queued, and wait for it."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    # --- worker side -----------------------------------------------------------------------------------

    def _run(self) -> None:
        window: list[_Item] | None = []
        try:
            while (window := self._next_window()) is not None:
                for batch in plan_batches([len(item.ids) for item in window], self.max_batch_tokens):
                    self._run_batch([window[i] for i in batch])
        except BaseException as err:  # no inference process any more, or a bug: no request may wait forever
            if isinstance(err, BackendGone):
                log.error("serving stopped: %s", err)  # one line: the backend logged each death already
            else:
                log.exception("the batcher stopped")
            with self._cond:
                self._closing = True
                failed = [*(window or []), *self._pending]
                self._pending.clear()
            self._settle_all(failed, err)
            self.on_fatal(err)

    def _next_window(self) -> list[_Item] | None:
        """The oldest queued inputs, up to WINDOW_BATCHES budgets of tokens; None once closed and drained."""
        with self._cond:
            while not self._pending and not self._closing:
                self._cond.wait()
            if not self._pending:
                return None
            window, tokens = [], 0
            limit = WINDOW_BATCHES * self.max_batch_tokens
            while self._pending and (not window or tokens + len(self._pending[0].ids) <= limit):
                item = self._pending.popleft()
                window.append(item)
                tokens += len(item.ids)
            self._metrics.queue_depth.set(len(self._pending))
            return window

    def _run_batch(self, items: list[_Item]) -> None:
        # Reading done() from this thread is a benign race: at worst one cancelled request's rows get computed.
        items = [item for item in items if not item.job.future.done()]
        if not items:
            return
        started = time.perf_counter()
        for item in items:
            self._metrics.queue_seconds.observe(started - item.enqueued)
        try:
            vectors = self._embed([item.ids for item in items])
            if len(vectors) != len(items):
                raise RuntimeError(f"the model returned {len(vectors)} embeddings for {len(items)} inputs")
        except BackendGone:
            raise  # nothing can be served any more: `_run` fails every waiting request
        except WorkerRestarted as err:  # its process died or hung (logged there): these requests get 503
            self._settle_all(items, err)
            return
        except Exception as err:  # a failed batch fails its requests, never the worker
            log.exception("batch of %d inputs failed", len(items))
            self._settle_all(items, err)
            return
        self._metrics.inference_seconds.observe(time.perf_counter() - started)
        self._metrics.batch_tokens.observe(max(len(item.ids) for item in items) * len(items))
        self._metrics.batch_size.observe(len(items))
        for item, vector in zip(items, vectors):
            job = item.job
            job.rows[item.position] = vector
            job.remaining -= 1
            if job.remaining == 0:
                job.settle(np.stack(job.rows))

    @staticmethod
    def _settle_all(items: list[_Item], err: BaseException) -> None:
        """Fail every request that has an input among `items`, once each."""
        for job in {id(item.job): item.job for item in items}.values():
            job.settle(error=err)
