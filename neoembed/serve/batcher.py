"""Dynamic batching: requests queue token-id sequences, a worker thread hands batches to the backend.

Each request queues as one job, its inputs ordered longest first. Each window is one turn over the queued
requests (round-robin), at most one batch's worth of tokens from each and WINDOW_BATCHES batches' worth in
all, so a large request is served in slices between other requests' inputs, and the window's batches run
shortest inputs first: a small request behind a 2,048-input one waits for the batch in flight, not for the
whole large one. The window is sorted by length so a batch pads little, cut into batches whose padded size (longest input x
inputs) fits the token budget, and each row is written back into its request's slot. A request whose client
left (its future cancelled: a disconnect, a request timeout) is dropped from the queue and from the batches
not yet run. The queue is bounded: a request that would overflow it is refused (429) instead of waiting
without limit. The worker thread only waits on the backend (the inference process), so /health and /metrics
answer while a batch is running.

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
from typing import cast

import numpy as np

from neoembed.errors import RunError
from neoembed.serve.backend import BackendGone, WorkerRestarted
from neoembed.serve.metrics import Metrics

log = logging.getLogger("neoembed.serve")

# A window holds up to this many batches' worth of tokens: enough choice for length-aware grouping across many
# small requests, small enough that a request arriving behind it waits for a few batches at most.
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


@dataclass(eq=False)  # one per request: compared by identity
class _Job:
    """One request: its future on the event loop, its inputs not yet taken into a window (longest first), and
    the rows filled in so far (worker thread only)."""

    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    rows: list[np.ndarray | None]
    remaining: int
    waiting: deque[_Item] = field(default_factory=deque)

    @property
    def cancelled(self) -> bool:
        # Read from the worker thread: a benign race; at worst one batch of a gone request is computed.
        return self.future.done()

    def take(self, tokens: int) -> list[_Item]:
        """Its next inputs, as many as a batch of `tokens` padded tokens holds (at least one): the first is
        the longest, as its inputs are sorted."""
        taken = [self.waiting.popleft()]
        while self.waiting and len(taken[0].ids) * (len(taken) + 1) <= tokens:
            taken.append(self.waiting.popleft())
        return taken

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
        self._jobs: deque[_Job] = deque()  # requests with inputs not yet in a window, in turn order
        self._queued = 0  # their inputs
        self._window: list[_Item] = []  # the inputs the worker is running now
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
        return self._queued

    def submit(self, sequences: list[list[int]]) -> asyncio.Future:
        """Queue one request's token-id sequences; the future resolves to their embeddings, one row per
        sequence, in order. Cancelling it drops the inputs not yet embedded."""
        loop = asyncio.get_running_loop()
        job = _Job(loop.create_future(), loop, [None] * len(sequences), len(sequences))
        longest_first = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
        job.waiting.extend(_Item(job, i, sequences[i]) for i in longest_first)
        with self._cond:
            if self._closing:
                raise ShuttingDownError("the server is shutting down")
            if self._queued + len(sequences) > self.max_queue_items:
                raise QueueFullError(
                    f"the queue holds {self._queued} inputs and this request adds {len(sequences)}; "
                    f"the limit is {self.max_queue_items}"
                )
            self._jobs.append(job)
            self._queued += len(sequences)
            self._metrics.queue_depth.set(self._queued)
            self._cond.notify()
        job.future.add_done_callback(lambda future: self._drop(job) if future.cancelled() else None)
        return job.future

    def _drop(self, job: _Job) -> None:
        """Take a cancelled request's inputs out of the queue at once (its client left, or it timed out)."""
        with self._cond:
            if job in self._jobs:
                self._jobs.remove(job)
                self._queued -= len(job.waiting)
                job.waiting.clear()
                self._metrics.queue_depth.set(self._queued)

    def close(self, timeout: float) -> bool:
        """Refuse new work and let the worker finish everything already queued, waiting up to `timeout`
        seconds; whether it finished."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def abort(self, err: BaseException) -> None:
        """Refuse new work and fail every request queued or in a batch with `err` (the shutdown's deadline)."""
        with self._cond:
            self._closing = True
            failed = [*self._window, *(item for job in self._jobs for item in job.waiting)]
            self._jobs.clear()
            self._queued = 0
            self._cond.notify_all()
        self._settle_all(failed, err)

    # --- worker side -----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while (window := self._next_window()) is not None:
                batches = plan_batches([len(item.ids) for item in window], self.max_batch_tokens)
                for batch in reversed(batches):  # shortest inputs first: a small request is answered soonest
                    self._run_batch([window[i] for i in batch])
        except BaseException as err:  # no inference process any more, or a bug: no request may wait forever
            if isinstance(err, BackendGone):
                log.error("serving stopped: %s", err)  # one line: the backend logged each death already
            else:
                log.exception("the batcher stopped")
            self.abort(err)
            self.on_fatal(err)

    def _next_window(self) -> list[_Item] | None:
        """One turn over the queued requests, at most one batch (padded tokens) from each and WINDOW_BATCHES
        batches in all; None once closed and drained. A request's inputs are already sorted by length, so a request
        alone loses no grouping to a one-budget window, and one arriving behind it waits a batch or two."""
        with self._cond:
            while not self._jobs and not self._closing:
                self._cond.wait()
            window: list[_Item] = []
            tokens, limit = 0, WINDOW_BATCHES * self.max_batch_tokens
            for _ in range(len(self._jobs)):
                if tokens >= limit:
                    break
                job = self._jobs[0]
                taken = job.take(min(self.max_batch_tokens, limit - tokens))
                window += taken
                tokens += len(taken[0].ids) * len(taken)
                self._queued -= len(taken)
                if job.waiting:
                    self._jobs.rotate(-1)  # its next slice after the other requests' turns
                else:
                    self._jobs.popleft()
            self._metrics.queue_depth.set(self._queued)
            self._window = window
            return window or None

    def _run_batch(self, items: list[_Item]) -> None:
        items = [item for item in items if not item.job.cancelled]
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
                job.settle(np.stack(cast(list[np.ndarray], job.rows)))  # every row is set: none remaining

    @staticmethod
    def _settle_all(items: list[_Item], err: BaseException) -> None:
        """Fail every request that has an input among `items`, once each."""
        for job in {id(item.job): item.job for item in items}.values():
            job.settle(error=err)
