"""The fault round of `neoembed bench serve`: how fast a server is ready again after its inference process
dies or hangs, and how fast /health answers meanwhile (issue 42's targets: ready again within 5 s of a death,
model load included, without a request; /health p95 under 100 ms throughout).

Two deaths, each a SIGKILL of the inference process; then a hang, a SIGSTOP, which the server's watchdog must
notice (no heartbeat for `HUNG_AFTER_SECONDS`), kill and replace. /health is polled every 10 ms the whole time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from neoembed.bench.report import percentile_ms

RESTART_TARGET_S = 5.0
POLL_S = 0.01
DEADLINE_S = 120.0


def inference_process(server_pid: int) -> int | None:
    """The inference process of the server `server_pid`: its one child (started by whichever of its threads),
    or None between two of them."""
    children = [
        int(pid)
        for task in Path(f"/proc/{server_pid}/task").iterdir()
        for pid in (task / "children").read_text().split()
    ]
    return children[0] if len(children) == 1 else None


@dataclass(frozen=True)
class Faults:
    """Seconds from each death to a new inference process answering ready, from the hang to /health's first
    503 and to ready, and /health's latency over the whole round."""

    restart_s: list[float]
    hang_unready_s: float
    hang_ready_s: float
    health_p95_ms: float
    health_probes: int


def _until_replaced(
    server: subprocess.Popen, base: str, old: int, latencies: list[float]
) -> tuple[float, float]:
    """Poll /health until a new inference process answers ready; seconds to the first 503 and to ready."""
    started, unready = time.perf_counter(), None
    with httpx.Client(timeout=10) as client:
        while time.perf_counter() - started < DEADLINE_S:
            if server.poll() is not None:
                raise RuntimeError(
                    f"the server exited with status {server.returncode} during the fault round"
                )
            tic = time.perf_counter()
            try:
                status = client.get(f"{base}/health").status_code
            except httpx.TransportError:  # the server itself went away: the check above says how
                time.sleep(POLL_S)
                continue
            latencies.append(time.perf_counter() - tic)
            if status != 200 and unready is None:
                unready = time.perf_counter() - started
            if status == 200 and unready is not None and inference_process(server.pid) not in (None, old):
                return unready, time.perf_counter() - started
            time.sleep(POLL_S)
    raise RuntimeError(f"no new inference process was ready {DEADLINE_S:.0f} s after the fault")


def fault_round(server: subprocess.Popen, port: int, kills: int = 2) -> Faults:
    """`kills` deaths and one hang of the inference process of a running, idle server. Three faults in all:
    the server's default `--max-worker-restarts`, past which it exits for its supervisor to restart."""
    base = f"http://127.0.0.1:{port}"
    latencies: list[float] = []

    def fault(sig: int) -> tuple[float, float]:
        old = inference_process(server.pid)
        if old is None:  # the server is idle and the last fault's replacement answered ready: never expected
            raise RuntimeError(f"server {server.pid} has no single inference process to fault")
        os.kill(old, sig)
        return _until_replaced(server, base, old, latencies)

    restarts = [fault(signal.SIGKILL)[1] for _ in range(kills)]
    unready, ready = fault(signal.SIGSTOP)
    return Faults(restarts, unready, ready, percentile_ms(latencies, 95), len(latencies))
