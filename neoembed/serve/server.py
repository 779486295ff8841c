"""Run the server: build the app (the model loads in its inference process) and hand it to uvicorn.

`serve_in_thread` runs an app on a background thread of this process (tests, benchmarks, notebooks).
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

from neoembed.errors import InputError, RunError
from neoembed.serve.app import create_app
from neoembed.serve.protocol import with_header_timeout
from neoembed.serve.settings import ServeSettings, default_threads
from neoembed.serve.shutdown import ShutdownSchedule
from neoembed.serve.state import ServerState

log = logging.getLogger("neoembed.serve")


def run_server(settings: ServeSettings) -> None:
    """Serve until SIGINT/SIGTERM; on shutdown, requests already accepted are finished first, and the process
    has exited within --shutdown-timeout whatever the inference process does (shutdown.py). If the inference process dies more often than --max-worker-restarts allows, the
    server stops and this raises `RunError` (exit status 1), for a supervisor to restart it."""
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(settings)
    state = app.state.server
    sock = bind(settings.host, settings.port)  # a port in use fails here, before "serving on" is logged
    server = Server(
        uvicorn_config(app, settings, log_level=settings.log_level), state, exits_at_deadline=True
    )
    state.on_fatal = lambda: setattr(server, "should_exit", True)
    # Move everything loaded so far (fastapi, transformers, numpy) out of the garbage collector's view: a
    # full collection over those objects pauses every thread of this process, /health included.
    gc.collect()
    gc.freeze()
    source = "--max-input-length" if settings.max_input_length else "the model's max_seq_length"
    rule = "truncated to it" if settings.truncate else "refused with 400 context_length_exceeded"
    log.info(
        "serving %s on http://%s:%d: %d-dimensional embeddings on %s (%s, %d threads); inputs up to %d "
        "tokens (%s), longer ones %s",
        state.name,
        settings.host,
        sock.getsockname()[1],
        state.model.dimension,
        state.model.device,
        state.model.dtype,
        settings.threads or default_threads(),
        state.model.max_length,
        source,
        rule,
    )
    server.run(sockets=[sock])
    if state.failure is not None:
        raise RunError(f"the server stopped: {state.failure}")


class Server(uvicorn.Server):
    """uvicorn's server, which starts the state's shutdown schedule when told to exit (SIGTERM, SIGINT), and
    with `exits_at_deadline` (the `neoembed serve` process) ends the process at the schedule's exit time,
    its inference process killed first, however far the shutdown has come."""

    def __init__(self, config: uvicorn.Config, state: ServerState, *, exits_at_deadline: bool) -> None:
        super().__init__(config)
        self._state = state
        self._exits_at_deadline = exits_at_deadline

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            self.begin_shutdown()
        super().handle_exit(sig, frame)

    def begin_shutdown(self) -> None:
        self._state.begin_shutdown()
        if self._exits_at_deadline:
            exit_s = ShutdownSchedule(self._state.settings.shutdown_timeout).exit_s
            timer = threading.Timer(exit_s, self._exit_now)
            timer.daemon = True
            timer.start()

    def _exit_now(self) -> None:
        log.error(
            "the shutdown did not finish within --shutdown-timeout (%g s); exiting now",
            self._state.settings.shutdown_timeout,
        )
        if log.isEnabledFor(logging.DEBUG):  # where it was stuck
            faulthandler.dump_traceback(all_threads=True)
        self._state.backend.kill()
        logging.shutdown()
        os._exit(128 + signal.SIGTERM)  # the status of a process ended by SIGTERM, as a shell reports it


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or an `InputError` that says the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {err.strerror}", param="--port") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def uvicorn_config(app, settings: ServeSettings, log_level: str) -> uvicorn.Config:
    """uvicorn's configuration with the server's time limits: request headers (`TimedH11Protocol`), idle
    keep-alive connections, and the graceful shutdown, which cancels what is left at the schedule's
    `cancel_s` (bodies have their deadline in `BodyLimitMiddleware`)."""
    return uvicorn.Config(
        app,
        log_level=log_level,
        http=with_header_timeout(settings.header_timeout),
        # uvicorn annotates these as int, and uses them as seconds of any kind (asyncio timeouts)
        timeout_keep_alive=settings.keep_alive_timeout,  # type: ignore[arg-type]
        timeout_graceful_shutdown=ShutdownSchedule(settings.shutdown_timeout).cancel_s,  # type: ignore[arg-type]
    )


@contextmanager
def serve_in_thread(app, *, host: str = "127.0.0.1", port: int = 0, timeout: float = 60.0) -> Iterator[str]:
    """Serve `app` with uvicorn on a background thread; yields its base URL (port 0: a free port).

    On exit the server shuts down as on SIGTERM: in-flight requests finish, then the app's shutdown runs.
    """
    state = app.state.server
    sock = bind(host, port)
    server = Server(uvicorn_config(app, state.settings, log_level="warning"), state, exits_at_deadline=False)
    state.on_fatal = lambda: setattr(server, "should_exit", True)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="neoembed-uvicorn", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.begin_shutdown()
        server.should_exit = True
        thread.join()
