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

import numpy as np

from neoembed.serve.settings import ServeSettings
from neoembed.serve.warmup import WarmUp
from neoembed.serve.worker import HEARTBEAT_SECONDS, ModelInfo

WORKER_MAIN = "import sys; from neoembed.serve.worker import main; main(int(sys.argv[1]), int(sys.argv[2]))"
# A process silent this long is stopped or stuck (a busy one still beats from its own thread): killed, replaced.
HUNG_AFTER_SECONDS = 5.0

log = logging.getLogger("neoembed.serve")


class BackendGone(RuntimeError):
    """The inference process has exited and will not be started again: no batch can be served any more."""


class WorkerRestarted(RuntimeError):
    """The inference process died or hung during this batch and was started again; its requests can be
    retried."""


class BatchTimedOut(RuntimeError):
    """The inference process did not finish a batch within its deadline (it is then killed and replaced)."""


class InferenceProcess:
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
        try:
            self._conn.send((settings, fingerprint))
            status, payload = self._receive()
        except BaseException:
            self.kill()
            raise
        if status == "error":
            self.close()
            raise payload
        self.info: ModelInfo = payload
        self.last_beat = time.monotonic()

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

    def _receive(self) -> tuple[str, object]:
        try:
            return self._conn.recv()
        except (EOFError, OSError) as err:  # closed, or reset by the process's death
            raise BackendGone(self.exit_message()) from err

    def exit_message(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
        code = self._process.returncode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"the inference process exited ({how})"

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def stop(self) -> None:
        """SIGKILL, whatever the process is doing (a stopped one too); safe from any thread. Its death closes
        its ends of both sockets, which wakes whoever waits on ours."""
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    def kill(self) -> None:
        self.stop()
        self._process.wait()
        self.release()

    def close(self, timeout: float = 60.0) -> None:
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
    deadline is killed and started again, at most `max_worker_restarts` times in all. After that its end is
    final: `on_fatal` is told, requests get `BackendGone`, and the server exits non-zero for the supervisor
    above it (systemd, Kubernetes) to act.

    `embed` is called by the batcher's thread only. A process is replaced under one lock by whichever thread
    finds it dead first: the watchdog at once while no batch is running, else the batcher before its next
    batch. A batch whose process dies or hangs fails at once with `WorkerRestarted` (503 for its requests),
    without waiting for the replacement to load. Meanwhile requests queue and `ready` is False (/health 503).
    A replacement runs the warm-up's untimed batches before it takes one, so a compiled model compiles there,
    never against a batch's deadline."""

    def __init__(self, settings: ServeSettings, *, fingerprint: bool = False) -> None:
        self.settings = settings
        self.restarts = 0
        self.batch_timeout: float | None = settings.batch_timeout  # None until `calibrate`
        self.on_fatal: Callable[[BaseException], None] = lambda err: None
        self.process = InferenceProcess(settings, fingerprint=fingerprint)
        self.info: ModelInfo = self.process.info
        self.warm_batches: list[list[list[int]]] = []  # what a replacement runs first (`warm_up`)
        self._lock = threading.Lock()  # held while a batch or a replacement uses `process`
        self._gone: BackendGone | None = None  # set once the end is final
        self._closing = threading.Event()
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
            if self._closing.is_set():
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
                self.process.stop()
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
        self.process.release()
        if self._closing.is_set():  # shutting down: no new process, and not a failure of the server
            self._gone = BackendGone(f"{why} during shutdown")
            raise self._gone
        if self.restarts >= self.settings.max_worker_restarts:
            self._gone = BackendGone(f"{why}, after {self.restarts} restarts")
        else:
            self.restarts += 1
            log.error(
                "%s; starting it again (restart %d of %d)",
                why,
                self.restarts,
                self.settings.max_worker_restarts,
            )
            try:
                self.process = self._warmed_process()
                return
            except Exception as err:  # the model no longer loads: nothing can be served
                self._gone = BackendGone(f"{why}, and a new one failed to start: {err}")
        self.on_fatal(self._gone)
        raise self._gone

    def _warmed_process(self) -> InferenceProcess:
        process = InferenceProcess(self.settings)
        try:
            for batch in self.warm_batches:
                process.embed(batch)
        except BaseException:
            process.kill()
            raise
        return process

    def _watch(self) -> None:
        """Take heartbeats; kill a process that stops sending them, and replace a dead one while no batch uses
        the process (a batch in flight finds the death itself)."""
        while not self._closing.is_set() and self._gone is None:
            process = self.process
            try:
                beating = process.read_beats(HEARTBEAT_SECONDS)
            except (OSError, ValueError):  # released by the batcher's replacement: look at the new one
                continue
            silent = time.monotonic() - process.last_beat
            if beating and silent > HUNG_AFTER_SECONDS and process.alive:
                log.error("the inference process sent no heartbeat for %.0f s; killing it", silent)
                process.stop()
            if not process.alive and self._lock.acquire(blocking=False):
                try:
                    self._ensure_running()
                except BackendGone:
                    return
                finally:
                    self._lock.release()
            elif not beating:
                self._closing.wait(0.05)  # dead, and a batch holds the process: it will replace it

    def stop_restarts(self) -> None:
        """From now on a process that dies stays dead (the server is shutting down)."""
        self._closing.set()

    def close(self, timeout: float = 5.0) -> None:
        """Stop watching, then stop the process: after its current batch, or killed after `timeout` seconds."""
        self._closing.set()
        self._watchdog.join()
        with self._lock:
            if self.process.alive:
                self.process.close(timeout)
