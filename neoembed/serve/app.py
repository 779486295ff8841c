"""The FastAPI application: the server's state (state.py) on `app.state`, the routes, the middleware."""

from __future__ import annotations

from contextlib import asynccontextmanager
from importlib.metadata import version

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from neoembed.serve.errors import install_error_handlers
from neoembed.serve.middleware import (
    ApiKeyMiddleware,
    BodyLimitMiddleware,
    RequestMetricsMiddleware,
    UnexpectedErrorMiddleware,
)
from neoembed.serve.routes import route_paths, router
from neoembed.serve.settings import ServeSettings
from neoembed.serve.state import build_state


@asynccontextmanager
async def lifespan(app: FastAPI):
    state = app.state.server
    state.batcher.start()
    state.start_warm_up()
    try:
        yield
    finally:
        # Uvicorn has already waited for in-flight requests; this drains anything still queued.
        await run_in_threadpool(state.close)


def create_app(settings: ServeSettings) -> FastAPI:
    """The server for `settings`: its state on `app.state.server`, the routes, the middleware.

    The model loads here, in the inference process; bad settings fail here, before a port is bound.
    """
    state = build_state(settings)
    app = FastAPI(
        title="neoembed",
        version=version("neoembed"),
        summary=f"Embeddings of {state.name}",
        lifespan=lifespan,
    )
    app.state.server = state
    app.include_router(router)
    install_error_handlers(app)
    # Added innermost first: a request meets the error net, metrics, the key check, then the body limit.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    app.add_middleware(RequestMetricsMiddleware, metrics=state.metrics, routes=route_paths())  # sees 401s
    app.add_middleware(UnexpectedErrorMiddleware)
    return app
