"""The shutdown's schedule: what happens when after SIGTERM, so that the server has exited within
--shutdown-timeout whatever its inference process is doing (loading, warming up, stopped, mid-batch).

- From SIGTERM: no new connection is accepted, no new inference process is started (a load in progress is
  killed), and requests already accepted are served.
- At `drain_s`: requests still unanswered get 503 shutting_down, and the inference process is killed.
- At `cancel_s`: uvicorn cancels what is left (a client still sending its body).
- At `exit_s`: `neoembed serve` exits however far its shutdown has come, its inference process killed first.

The stretch after `drain_s` is for closing: 2 s, or half the timeout when that is shorter.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShutdownSchedule:
    timeout: float  # --shutdown-timeout

    @property
    def _closing_s(self) -> float:
        return min(2.0, self.timeout / 2)

    @property
    def drain_s(self) -> float:
        return self.timeout - self._closing_s

    @property
    def cancel_s(self) -> float:
        return self.timeout - self._closing_s / 2

    @property
    def exit_s(self) -> float:
        return self.timeout - self._closing_s / 4
