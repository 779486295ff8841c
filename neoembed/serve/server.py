"""Run the server: build the app (the model loads in its inference process) and hand it to uvicorn.

`serve_in_thread` runs an app on a background thread of this process (tests, benchmarks, notebooks).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from neoembed.serve.app import create_app
from neoembed.serve.settings import ServeSettings, default_threads

log = logging.getLogger("neoembed.serve")


def run_server(settings: ServeSettings) -> None:
    """Serve until SIGINT/SIGTERM; on shutdown, requests already accepted are finished first."""
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(settings)
    state = app.state.server
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
        settings.port,
        state.model.dimension,
        state.model.device,
        state.model.dtype,
        settings.threads or default_threads(),
        state.model.max_length,
        source,
        rule,
    )
    # timeout_graceful_shutdown=None: on SIGTERM uvicorn stops accepting, then waits for every in-flight
    # request before the app's shutdown drains the batcher.
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=None,
    )


@contextmanager
def serve_in_thread(app, *, host: str = "127.0.0.1", port: int = 0, timeout: float = 60.0) -> Iterator[str]:
    """Serve `app` with uvicorn on a background thread; yields its base URL (port 0: a free port).

    On exit the server shuts down as on SIGTERM: in-flight requests finish, then the app's shutdown runs.
    """
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="neoembed-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join()
