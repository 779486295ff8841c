"""The HTTP process's handle on the inference process (worker.py): start it, send it batches, watch it, stop it.

The process is a fresh interpreter (`python -c`, not a fork: forking a process that already runs torch's
thread pools can deadlock; and not multiprocessing's spawn, which re-imports the caller's main script in
the child). It talks to this one over a socket pair with multiprocessing's message framing, and beats on a
second socket pair every `HEARTBEAT_SECONDS` from a thread of its own, so a process that computes a long batch
still beats while one that is stopped or stuck does not. Loading happens there; what fails while loading (a
bad model name, a length beyond the model's positions) is raised here, from the constructor, with the child's
own exception.

`SupervisedProcess` keeps one running: a watchdog thread kills a process that misses its heartbeats and starts
a dead one again at once, request or not; a batch that outlives its deadline has its process killed and
replaced too. Either way the requests of the batch in flight get 503 and can be retried.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from neoembed.serve.settings import ServeSettings
from neoembed.serve.warmup import WarmUp
from neoembed.serve.worker import HEARTBEAT_SECONDS, ModelInfo

WORKER_MAIN = "import sys; from neoembed.serve.worker import main; main(int(sys.argv[1]), int(sys.argv[2]))"
# A process silent this long is stopped or stuck (a busy one still beats from its own thread): killed, replaced.
HUNG_AFTER_SECONDS = 5.0
# A loading process may hold the interpreter lock for long stretches (importing torch, reading weights), so its
# silence counts as a stop only after longer.
LOAD_SILENT_AFTER_SECONDS = 2 * HUNG_AFTER_SECONDS
# A replacement that fails to load is tried again after these pauses, then the server gives up.
LOAD_BACKOFF_SECONDS = (1.0, 4.0)
LOAD_TRIES = len(LOAD_BACKOFF_SECONDS) + 1

log = logging.getLogger("neoembed.serve")


class BackendGone(RuntimeError):
    """The inference process has exited and will not be started again: no batch can be served any more."""


class WorkerRestarted(RuntimeError):
    """The inference process died or hung during this batch and was started again; its requests can be
    retried."""


class BatchTimedOut(RuntimeError):
    """The inference process did not finish a batch within its deadline (it is then killed and replaced)."""


class LoadFailed(RuntimeError):
    """A new inference process did not load in time, or fell silent while loading (it is then killed)."""


class InferenceProcess:
    """One inference process. Constructing it starts the child and hands it the settings without waiting;
    `wait_ready` waits for the model to load, so a supervisor can `stop` a load from another thread."""

    def __init__(self, settings: ServeSettings, *, fingerprint: bool = False) -> None:
        ours, theirs = socket.socketpair()
        self._beats, beats_theirs = socket.socketpair()
        # The child imports neoembed from wherever this process did.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
        fds = [theirs.fileno(), beats_theirs.fileno()]
        self._process = subprocess.Popen(
            [sys.executable, "-c", WORKER_MAIN, *map(str, fds)], pass_fds=fds, env=env
        )
        theirs.close()  # the child holds its ends; ours closing lets recv see the child's exit
        beats_theirs.close()
        self._conn = Connection(ours.detach())
        self.last_beat = time.monotonic()
        self.killed_for: str | None = None  # why this side killed it, if it did (`stop`)
        try:
            self._conn.send((settings, fingerprint))
        except BaseException:
            self.kill()
            raise

    def wait_ready(self, timeout: float | None = None) -> ModelInfo:
        """Wait for the model to load and return its description. The process is killed, and this raises, when
        loading fails, takes over `timeout` seconds, or the process falls silent for LOAD_SILENT_AFTER_SECONDS
        (stopped or stuck); a `stop` from another thread ends the wait at once with `BackendGone`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._conn.poll(HEARTBEAT_SECONDS):  # a dead process's end polls ready (EOF)
                self.read_beats(0)
                silent = time.monotonic() - self.last_beat
                if silent > LOAD_SILENT_AFTER_SECONDS:
                    raise LoadFailed(
                        f"the new inference process sent no heartbeat for {silent:.0f} s while loading"
                    )
                if deadline is not None and time.monotonic() > deadline:
                    raise LoadFailed(
                        f"the new inference process did not load within {timeout:g} s (--load-timeout)"
                    )
            status, payload = self._receive()
        except BaseException:
            self.kill()
            raise
        if status == "error":
            self.close(timeout=HUNG_AFTER_SECONDS)  # it exits after sending the error
            raise payload
        self.info: ModelInfo = payload
        self.last_beat = time.monotonic()
        return self.info

    @property
    def pid(self) -> int:
        return self._process.pid

    def embed(self, sequences: list[list[int]], timeout: float | None = None) -> np.ndarray:
        """One float32 row per token-id sequence; `BatchTimedOut` if the answer takes over `timeout` seconds."""
        lengths = np.fromiter(map(len, sequences), dtype=np.int32, count=len(sequences))
        flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int32, count=int(lengths.sum()))
        try:
            self._conn.send((flat, lengths))
            answered = self._conn.poll(timeout)
        except OSError as err:
            raise BackendGone(self.exit_message()) from err
        if not answered:
            raise BatchTimedOut(f"the inference process took over {timeout:.0f} s for one batch")
        status, payload = self._receive()
        if status == "error":
            raise payload
        return payload

    def read_beats(self, wait: float) -> bool:
        """Take the heartbeats that arrived (waiting up to `wait` seconds for one); False once the process's end
        of the heartbeat socket is closed (it exited)."""
        ready, _, _ = select.select([self._beats], [], [], wait)
        if not ready:
            return True
        try:
            data = self._beats.recv(4096)
        except OSError:
            return False
        if data:
            self.last_beat = time.monotonic()
        return bool(data)

    def _receive(self) -> tuple[str, Any]:
        try:
            return self._conn.recv()
        except (EOFError, OSError) as err:  # closed, or reset by the process's death
            raise BackendGone(self.exit_message()) from err

    def exit_message(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
        if self.killed_for is not None:
            return f"the inference process was killed: {self.killed_for}"
        code = self._process.returncode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"the inference process exited ({how})"

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def stop(self, why: str | None = None) -> None:
        """SIGKILL, whatever the process is doing (a stopped one too); safe from any thread. Its death closes
        its ends of both sockets, which wakes whoever waits on ours. `why` records that this side decided it
        (a hang, a batch past its deadline), which spends no restart (`SupervisedProcess`)."""
        if why is not None and self.alive:
            self.killed_for = why
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    def kill(self) -> None:
        self.stop()
        self._process.wait()
        self.release()

    def close(self, timeout: float) -> None:
        """Tell the process to stop once its current batch is done; kill it after `timeout` seconds."""
        if self.alive:
            with contextlib.suppress(OSError):  # it exited meanwhile
                self._conn.send(None)
            try:
                self._process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self.release()

    def release(self) -> None:
        """Close this side's sockets (the process has exited)."""
        self._conn.close()
        self._beats.close()


class SupervisedProcess:
    """The inference process, kept running: a dead one is started again at once (a crash, the kernel's OOM
    killer, a stray kill), a silent one (no heartbeat for HUNG_AFTER_SECONDS) or one that outlives a batch's
    deadline is killed and started again.

    Restarts after deaths this side did not order (crashes, OOM kills, stray signals) are counted: at most
    `max_worker_restarts` in the server's life. A process killed here for a hang or a batch past its deadline
    is replaced without spending that budget, so slow batches never end the server. A replacement must load
    and warm up within --load-timeout (and keep beating while it loads); one that does not is killed and
    started again after LOAD_BACKOFF_SECONDS, LOAD_TRIES times in all. When the budget or the tries run out,
    the end is final: `on_fatal` is told, requests get `BackendGone`, and the server exits non-zero for the
    supervisor above it (systemd, Kubernetes) to act.

    `embed` is called by the batcher's thread only. A process is replaced under one lock by whichever thread
    finds it dead first: the watchdog at once while no batch is running, else the batcher before its next
    batch. A batch whose process dies or hangs fails at once with `WorkerRestarted` (503 for its requests),
    without waiting for the replacement to load. Meanwhile requests queue and `ready` is False (/health 503).
    A replacement runs the warm-up's untimed batches before it takes one, so a compiled model compiles there,
    never against a batch's deadline.

    Shutting down never waits for a load: `stop_restarts` kills a replacement still loading or warming up,
    `kill` ends whatever runs, and `close` is bounded by its timeout."""

    def __init__(self, settings: ServeSettings, *, fingerprint: bool = False) -> None:
        self.settings = settings
        self.restarts = 0  # after deaths this side did not order: the budget's count
        self.replacements = 0  # every new process, for whatever reason
        self.batch_timeout: float | None = settings.batch_timeout  # None until `calibrate`
        self.on_fatal: Callable[[BaseException], None] = lambda err: None
        self.process = InferenceProcess(settings, fingerprint=fingerprint)
        self.info: ModelInfo = self.process.wait_ready()  # the first load may download: no deadline
        self.warm_batches: list[list[list[int]]] = []  # what a replacement runs first (`warm_up`)
        self._lock = threading.Lock()  # held while a batch or a replacement uses `process`
        self._gone: BackendGone | None = None  # set once the end is final
        self._starting: InferenceProcess | None = None  # a replacement loading or warming up
        self._stopping = threading.Event()  # shutting down: no new process
        self._closed = threading.Event()  # the watchdog stops
        self._watchdog = threading.Thread(target=self._watch, name="neoembed-watchdog", daemon=True)
        self._watchdog.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def ready(self) -> bool:
        """A process is running and beating: not dead, stopped, stuck or being replaced."""
        process = self.process
        return (
            self._gone is None and process.alive and time.monotonic() - process.last_beat < HUNG_AFTER_SECONDS
        )

    def warm_up(self, warm: WarmUp) -> None:
        """Run the warm-up batches, the untimed ones without a deadline (a compiled model compiles on them) and
        the last through `calibrate`, counting them in `warm.done`; stop early if the server shuts down."""
        self.warm_batches = warm.untimed
        for batch in warm.untimed:
            if self._stopping.is_set():
                return
            self.embed_without_deadline(batch)
            warm.done += 1
        self.calibrate(warm.batches[-1])
        warm.done += 1

    def embed_without_deadline(self, sequences: list[list[int]]) -> np.ndarray:
        """Embed a batch that may take long without the process counting as hung (a compiled model compiles on
        it): the budget sweep's and the warm-up's."""
        with self._lock:
            self._ensure_running()
            return self.process.embed(sequences)

    def calibrate(self, sequences: list[list[int]]) -> float:
        """Time one full batch; unless --batch-timeout was given, a batch may take 20 times that (at least
        10 s) before its process counts as hung. Returns the batch's seconds."""
        started = time.perf_counter()
        self.embed(sequences)
        seconds = time.perf_counter() - started
        if self.settings.batch_timeout is None:
            self.batch_timeout = max(10.0, 20 * seconds)
        return seconds

    def embed(self, sequences: list[list[int]]) -> np.ndarray:
        with self._lock:
            self._ensure_running()
            try:
                return self.process.embed(sequences, timeout=self.batch_timeout)
            except BatchTimedOut as err:
                log.error("%s; killing it", err)
                self.process.stop(str(err))
                raise WorkerRestarted(f"{err}, and is being replaced") from err
            except BackendGone as err:
                raise WorkerRestarted(
                    f"{err} while embedding this request; it is being started again"
                ) from err

    def _ensure_running(self) -> None:
        """Replace a dead process (the lock is held), or raise `BackendGone` where that is no longer allowed."""
        if self._gone is not None:
            raise self._gone
        if self.process.alive:
            return
        why = self.process.exit_message()
        ordered = self.process.killed_for is not None  # a hang or a late batch: spends no restart
        self.process.release()
        if self._stopping.is_set():  # shutting down: no new process, and not a failure of the server
            self._gone = BackendGone(f"{why} during shutdown")
            raise self._gone
        if not ordered and self.restarts >= self.settings.max_worker_restarts:
            self._gone = BackendGone(f"{why}, after {self.restarts} restarts")
        else:
            if not ordered:
                self.restarts += 1
            budget = "not counted: killed by the server" if ordered else f"restart {self.restarts} of "
            budget += "" if ordered else str(self.settings.max_worker_restarts)
            log.error("%s; starting it again (%s)", why, budget)
            try:
                self.process = self._replacement()
                self.replacements += 1
                return
            except BackendGone as err:  # shut down meanwhile
                self._gone = err
                raise
            except Exception as err:  # the model no longer loads: nothing can be served
                self._gone = BackendGone(f"{why}, and a new one failed to start {LOAD_TRIES} times: {err}")
        self.on_fatal(self._gone)
        raise self._gone

    def _replacement(self) -> InferenceProcess:
        """A new process, loaded and warmed up, tried LOAD_TRIES times with a pause between tries."""
        for attempt, pause in enumerate((*LOAD_BACKOFF_SECONDS, None), start=1):
            try:
                return self._warmed_process()
            except BackendGone:
                if self._stopping.is_set():
                    raise BackendGone("the server is shutting down") from None
                error: Exception = RuntimeError("the new inference process exited while loading")
            except Exception as err:
                error = err
            if pause is None:
                raise error
            log.error("%s; trying again in %g s (try %d of %d)", error, pause, attempt + 1, LOAD_TRIES)
            if self._stopping.wait(pause):
                raise BackendGone("the server is shutting down")
        raise AssertionError("unreachable")

    def _warmed_process(self) -> InferenceProcess:
        """A new process that has loaded and run the warm-up batches within --load-timeout in all; killed,
        and this raises, otherwise or when shutdown begins meanwhile (`stop_restarts`)."""
        timeout = self.settings.load_timeout
        deadline = time.monotonic() + timeout
        process = self._starting = InferenceProcess(self.settings)
        try:
            if self._stopping.is_set():  # set before `_starting` was: `stop_restarts` could not kill it
                raise BackendGone("the server is shutting down")
            process.wait_ready(timeout)
            for batch in self.warm_batches:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LoadFailed(
                        f"the new inference process did not warm up within {timeout:g} s (--load-timeout)"
                    )
                process.embed(batch, timeout=left)
        except BaseException:
            process.kill()
            raise
        finally:
            self._starting = None
        return process

    def _watch(self) -> None:
        """Take heartbeats; kill a process that stops sending them, and replace a dead one while no batch uses
        the process (a batch in flight finds the death itself)."""
        while not self._closed.is_set() and self._gone is None:
            process = self.process
            try:
                beating = process.read_beats(HEARTBEAT_SECONDS)
            except (OSError, ValueError):  # released by the batcher's replacement: look at the new one
                continue
            silent = time.monotonic() - process.last_beat
            if beating and silent > HUNG_AFTER_SECONDS and process.alive:
                log.error("the inference process sent no heartbeat for %.0f s; killing it", silent)
                process.stop(f"it sent no heartbeat for {silent:.0f} s")
            if not process.alive and self._lock.acquire(blocking=False):
                try:
                    self._ensure_running()
                except BackendGone:
                    return
                finally:
                    self._lock.release()
            elif not beating:
                self._closed.wait(0.05)  # dead, and a batch holds the process: it will replace it

    def stop_restarts(self) -> None:
        """From now on a process that dies stays dead, and a replacement still loading is killed (the server
        is shutting down)."""
        self._stopping.set()
        starting = self._starting
        if starting is not None:
            starting.stop()

    def kill(self) -> None:
        """SIGKILL whatever runs, a batch in flight included (the shutdown's deadline has come)."""
        self.stop_restarts()
        self.process.stop()

    def close(self, timeout: float) -> None:
        """Stop watching, then stop the process: after its current batch, or killed after `timeout` seconds.
        Bounded by `timeout` whatever the process does (loading, stopped, mid-batch)."""
        deadline = time.monotonic() + timeout
        self.stop_restarts()
        self._closed.set()
        self._watchdog.join(max(deadline - time.monotonic(), 0))
        if not self._lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
            self.process.stop()  # a batch still runs on it: the batcher's thread sees it die
            return
        try:
            self.process.close(max(deadline - time.monotonic(), 0))
        finally:
            self._lock.release()
