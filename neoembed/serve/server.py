"""Run the server: build the app (the model loads in its inference process) and hand it to uvicorn.

`serve_in_thread` runs an app on a background thread of this process (tests, benchmarks, notebooks).
"""

from __future__ import annotations

import gc
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from neoembed.errors import InputError, RunError
from neoembed.serve.app import create_app
from neoembed.serve.protocol import with_header_timeout
from neoembed.serve.settings import ServeSettings, default_threads

log = logging.getLogger("neoembed.serve")


def run_server(settings: ServeSettings) -> None:
    """Serve until SIGINT/SIGTERM; on shutdown, requests already accepted are finished first (within
    --shutdown-timeout). If the inference process dies more often than --max-worker-restarts allows, the
    server stops and this raises `RunError` (exit status 1), for a supervisor to restart it."""
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(settings)
    state = app.state.server
    sock = bind(settings.host, settings.port)  # a port in use fails here, before "serving on" is logged
    server = uvicorn.Server(uvicorn_config(app, settings, log_level=settings.log_level))
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
    keep-alive connections, and the graceful shutdown (bodies have theirs in `BodyLimitMiddleware`)."""
    return uvicorn.Config(
        app,
        log_level=log_level,
        http=with_header_timeout(settings.header_timeout),
        timeout_keep_alive=settings.keep_alive_timeout,
        timeout_graceful_shutdown=settings.shutdown_timeout,
    )


@contextmanager
def serve_in_thread(app, *, host: str = "127.0.0.1", port: int = 0, timeout: float = 60.0) -> Iterator[str]:
    """Serve `app` with uvicorn on a background thread; yields its base URL (port 0: a free port).

    On exit the server shuts down as on SIGTERM: in-flight requests finish, then the app's shutdown runs.
    """
    state = app.state.server
    sock = bind(host, port)
    server = uvicorn.Server(uvicorn_config(app, state.settings, log_level="warning"))
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
        server.should_exit = True
        thread.join()
