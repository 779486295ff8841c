"""uvicorn's HTTP/1.1 protocol with a request-header timeout.

uvicorn closes an idle keep-alive connection after `timeout_keep_alive`, but it arms that timer only once a
response has been sent: a new connection that sends nothing, or only part of its headers, is held open for
as long as its client likes, and each one holds a file descriptor (and, on SIGTERM, the shutdown). uvicorn
has no setting for it, so this subclass arms a timer whenever the connection waits for a request's headers
and closes the connection when it fires. Bodies have their own deadline (`BodyLimitMiddleware`).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class TimedH11Protocol(H11Protocol):
    header_timeout: float = 10.0  # set per server by `with_header_timeout`

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._waiting_for_headers():
            self._arm_header_timer()  # after a keep-alive wait, a new request: its headers get the full time
        else:
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._disarm_header_timer()  # idle between requests: the keep-alive timer's job

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _waiting_for_headers(self) -> bool:
        return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()


def with_header_timeout(seconds: float) -> type[TimedH11Protocol]:
    """The protocol class for a server whose request headers must arrive within `seconds`."""
    return type("TimedH11Protocol", (TimedH11Protocol,), {"header_timeout": seconds})
