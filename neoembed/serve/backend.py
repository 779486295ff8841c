"""The HTTP process's handle on the inference process (worker.py): start it, send it batches, stop it.

The process is a fresh interpreter (`python -c`, not a fork: forking a process that already runs torch's
thread pools can deadlock; and not multiprocessing's spawn, which re-imports the caller's main script in
the child). It talks to this one over a socket pair with multiprocessing's message framing. Loading happens
there; what fails while loading (a bad model name, a length beyond the model's positions) is raised here,
from the constructor, with the child's own exception. Only the batcher's thread calls `embed`, so the
connection needs no lock.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

import numpy as np

from neoembed.serve.settings import ServeSettings
from neoembed.serve.worker import ModelInfo

WORKER_MAIN = "import sys; from neoembed.serve.worker import main; main(int(sys.argv[1]))"

log = logging.getLogger("neoembed.serve")


class BackendGone(RuntimeError):
    """The inference process has exited and will not be started again: no batch can be served any more."""


class WorkerRestarted(RuntimeError):
    """The inference process died during this batch and was started again; its requests can be retried."""


class InferenceProcess:
    def __init__(self, settings: ServeSettings, *, fingerprint: bool = False) -> None:
        ours, theirs = socket.socketpair()
        # The child imports neoembed from wherever this process did.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
        self._process = subprocess.Popen(
            [sys.executable, "-c", WORKER_MAIN, str(theirs.fileno())], pass_fds=[theirs.fileno()], env=env
        )
        theirs.close()  # the child holds its end; ours closing lets recv see the child's exit
        self._conn = Connection(ours.detach())
        self._conn.send((settings, fingerprint))
        status, payload = self._receive()
        if status == "error":
            self.close()
            raise payload
        self.info: ModelInfo = payload

    def embed(self, sequences: list[list[int]]) -> np.ndarray:
        """One float32 row per token-id sequence."""
        lengths = np.fromiter(map(len, sequences), dtype=np.int32, count=len(sequences))
        flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int32, count=int(lengths.sum()))
        try:
            self._conn.send((flat, lengths))
        except OSError as err:
            raise BackendGone(self._exit_message()) from err
        status, payload = self._receive()
        if status == "error":
            raise payload
        return payload

    def _receive(self) -> tuple[str, object]:
        try:
            return self._conn.recv()
        except (EOFError, OSError) as err:  # closed, or reset by the process's death
            raise BackendGone(self._exit_message()) from err

    def _exit_message(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
        return f"the inference process exited (exit code {self._process.returncode})"

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        """Tell the process to stop once its current batch is done, and wait for it."""
        if self.alive:
            with contextlib.suppress(OSError):  # it exited meanwhile
                self._conn.send(None)
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._conn.close()


class SupervisedProcess:
    """The inference process, started again when it dies (a crash, the kernel's OOM killer, a stray kill),
    at most `max_restarts` times; after that its death is final (`BackendGone`) and the server exits non-zero,
    so the process supervisor above it (systemd, Kubernetes) can act. Restarts happen on the batcher's thread,
    which is the only caller of `embed`; meanwhile requests queue and /health answers 503."""

    def __init__(self, settings: ServeSettings, *, fingerprint: bool = False) -> None:
        self.settings = settings
        self.restarts = 0
        self.process = InferenceProcess(settings, fingerprint=fingerprint)
        self.info: ModelInfo = self.process.info

    def embed(self, sequences: list[list[int]]) -> np.ndarray:
        try:
            return self.process.embed(sequences)
        except BackendGone as err:
            if self.restarts >= self.settings.max_worker_restarts:
                raise BackendGone(f"{err}, after {self.restarts} restarts") from err
            self.restarts += 1
            log.error(
                "%s; starting it again (restart %d of %d)",
                err,
                self.restarts,
                self.settings.max_worker_restarts,
            )
            self.process = InferenceProcess(self.settings)
            raise WorkerRestarted(f"{err} while embedding this request, and was started again") from err

    @property
    def alive(self) -> bool:
        return self.process.alive

    def close(self) -> None:
        self.process.close()
