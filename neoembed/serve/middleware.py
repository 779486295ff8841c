"""ASGI middleware around the routes: unexpected errors as one log line and a 500, per-route request metrics,
the API-key check, and the body's size limit and deadline.

Written as plain ASGI (not Starlette's BaseHTTPMiddleware) so they add no task per request and run before
the body is read: a request without a valid key is refused before any parsing.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from neoembed.serve.errors import error_response
from neoembed.serve.metrics import Metrics

log = logging.getLogger("neoembed.serve")

# Load balancers and Prometheus poll these without credentials, and a browser loads the search page (static;
# its calls carry the key checks); they reveal nothing about inputs.
OPEN_PATHS = frozenset({"/", "/health", "/metrics"})


class ApiKeyMiddleware:
    """Require `Authorization: Bearer <key>` on every route except OPEN_PATHS."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = Headers(scope=scope).get("authorization", "").encode()
            if not hmac.compare_digest(given, self._expected):
                message = (
                    "Incorrect API key provided."
                    if given
                    else "Missing API key: send 'Authorization: Bearer <key>'."
                )
                response = error_response(
                    401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Refuse bodies over `max_bytes` with 413: at once when Content-Length says so, else while streaming;
    and bodies that have not arrived `timeout` seconds after the request began with 408, so a client that
    sends half a body holds neither a request nor the shutdown.

    FastAPI's own `max_body_size` answers in plain text from inside the router; this one keeps the OpenAI
    envelope. A chunked body that grows too large raises an HTTPException from `receive`, which FastAPI
    passes through its body reading to the app's error handler.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            response = error_response(
                413, _too_large(int(declared), self.max_bytes), code="request_too_large"
            )
            await response(scope, receive, send)
            return
        received = 0
        deadline = time.monotonic() + self.timeout
        complete = False

        async def limited_receive() -> Message:
            nonlocal received, complete
            if complete:  # after the body only a disconnect can come, which a handler may await at any time
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                raise HTTPException(
                    408, f"The request body did not arrive within {self.timeout:g} seconds (--body-timeout)."
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, _too_large(received, self.max_bytes))
                complete = not message.get("more_body", False)
            return message

        await self.app(scope, limited_receive, send)


def _too_large(size: int, limit: int) -> str:
    return f"The request body ({size} bytes) exceeds this server's limit of {limit} bytes (--max-body-bytes)."


class RequestMetricsMiddleware:
    """Count requests by route and status and time them; unknown paths share one label."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: frozenset[str]) -> None:
        self.app = app
        self._metrics = metrics
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self._routes else "other"
        status = 500
        started = time.perf_counter()

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            self._metrics.requests.labels(route, str(status)).inc()
            self._metrics.request_seconds.labels(route).observe(time.perf_counter() - started)


class UnexpectedErrorMiddleware:
    """The outermost layer: an error no handler expected becomes a 500 in the envelope and one log line (the
    traceback only at debug level), so no request can fill the log. Starlette's own handler for it would log
    the traceback and re-raise for the server to log it again."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_and_watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        except Exception as err:
            log.error(
                "unhandled error on %s %s: %s: %s", scope["method"], scope["path"], type(err).__name__, err
            )
            log.debug("traceback", exc_info=True)
            if not started:
                response = error_response(
                    500, f"Internal server error: {type(err).__name__}", code="internal_error"
                )
                await response(scope, receive, send)
