"""The inference process stopping, dying or running long (docs/reliability.md, "The server"): each fault gets its
answer (503 with a code, 400, an exit status), the process is replaced without waiting for a request, one line
is logged, and serving goes on. The process is stopped with SIGSTOP, so a test never depends on how fast the
model runs; the time limits asserted are deadlines only a hang exceeds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from test_serve_cli import start, wait_healthy
from test_serve_load import handed_over

from neoembed.bench.serve_faults import inference_process
from neoembed.serve import ServeSettings, create_app, serve_in_thread
from neoembed.serve.backend import HUNG_AFTER_SECONDS
from neoembed.serve.errors import InvalidInput
from neoembed.serve.inputs import Inputs
from neoembed.serve.tokenization import CHARS_PER_TOKEN

pytestmark = pytest.mark.faults  # the fault suite: docs/reliability.md

KEY = {"Authorization": "Bearer from-env"}  # test_serve_cli.start serves with this API key
TEXTS = [f"a sentence about rivers and rain, number {i}" for i in range(16)]


@contextmanager
def serving(model: Path, **settings) -> Iterator[tuple[str, object]]:
    app = create_app(ServeSettings(model=str(model), threads=1, dtype="float32", **settings))
    with serve_in_thread(app) as url:
        yield url, app.state.server


def until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def replaced(url: str, state, old_pid: int) -> bool:
    return state.backend.pid != old_pid and httpx.get(f"{url}/health").status_code == 200


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):  # already killed and reaped
            os.kill(pid, signal.SIGCONT)


def embed_in_background(pool: ThreadPoolExecutor, url: str):
    return pool.submit(httpx.post, f"{url}/embed", json={"inputs": TEXTS}, timeout=120)


def error_code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def test_a_killed_process_is_replaced_at_once_without_a_request(neobert_embedder):
    with serving(neobert_embedder) as (url, state):
        old = state.backend.pid
        os.kill(old, signal.SIGKILL)
        until(lambda: replaced(url, state, old), 60, "no new inference process without a request")
        assert state.backend.restarts == 1
        assert httpx.post(f"{url}/embed", json={"inputs": TEXTS}).status_code == 200


def test_a_request_whose_process_dies_gets_503_and_the_next_is_served(neobert_embedder):
    with serving(neobert_embedder) as (url, state), ThreadPoolExecutor(1) as pool:
        old = state.backend.pid
        with stopped(old):
            pending = embed_in_background(pool, url)
            handed_over(url, len(TEXTS))  # the batch is with the stopped process
            os.kill(old, signal.SIGKILL)
            assert error_code(pending.result()) == (503, "worker_restarted")
        until(lambda: replaced(url, state, old), 60, "the dead process was not replaced")
        assert httpx.post(f"{url}/embed", json={"inputs": TEXTS}).status_code == 200


def test_a_silent_process_is_reported_not_ready_then_killed_and_replaced(neobert_embedder):
    """No heartbeat: /health says 503 at once (it never waits behind the process), the request in flight gets
    503 worker_restarted, a new process serves."""
    with serving(neobert_embedder) as (url, state), ThreadPoolExecutor(1) as pool:
        old = state.backend.pid
        with stopped(old):
            pending = embed_in_background(pool, url)
            handed_over(url, len(TEXTS))
            until(
                lambda: httpx.get(f"{url}/health").status_code == 503, 4 * HUNG_AFTER_SECONDS, "still ready"
            )
            assert error_code(pending.result()) == (503, "worker_restarted")
        until(lambda: replaced(url, state, old), 60, "the silent process was not replaced")
        assert httpx.post(f"{url}/embed", json={"inputs": TEXTS}).status_code == 200


def test_a_batch_past_its_deadline_has_its_process_replaced(neobert_embedder):
    with serving(neobert_embedder, batch_timeout=1.0) as (url, state), ThreadPoolExecutor(1) as pool:
        old = state.backend.pid
        with stopped(old):  # stopped for less than HUNG_AFTER_SECONDS: the batch deadline acts first
            pending = embed_in_background(pool, url)
            assert error_code(pending.result()) == (503, "worker_restarted")
        assert "took over 1 s for one batch" in pending.result().json()["error"]["message"]
        until(lambda: replaced(url, state, old), 60, "the late process was not replaced")
        assert httpx.post(f"{url}/embed", json={"inputs": TEXTS}).status_code == 200


def test_a_request_past_its_time_limit_gets_503_and_the_server_goes_on(neobert_embedder):
    with serving(neobert_embedder, request_timeout=1.0) as (url, state), ThreadPoolExecutor(1) as pool:
        old = state.backend.pid
        with stopped(old):  # resumed before it counts as hung: the same process serves on
            pending = embed_in_background(pool, url)
            assert error_code(pending.result()) == (503, "request_timeout")
        assert httpx.post(f"{url}/embed", json={"inputs": TEXTS}).status_code == 200
        assert state.backend.pid == old and state.backend.restarts == 0


def test_a_text_over_the_character_limit_is_refused_before_it_is_tokenized(neobert_embedder):
    with serving(neobert_embedder) as (url, state):
        limit = state.tokenizer.max_chars
        assert limit == CHARS_PER_TOKEN * state.model.max_length
        calls = []
        tokenizer = state.tokenizer._tokenizer
        state.tokenizer._tokenizer = Spy(tokenizer, calls)
        huge = "word " * (3 * 1024 * 1024 // 5)  # 3 MB
        answer = httpx.post(f"{url}/embed", json={"inputs": ["short", huge]}, timeout=60)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "context_length_exceeded"
        assert f"{len(huge):,} characters long" in answer.json()["error"]["message"] and calls == []
        # with truncation the text is cut by characters first, and gives what truncating by tokens gives
        cut = httpx.post(f"{url}/embed", json={"inputs": [huge], "truncate": True}, timeout=60)
        whole = httpx.post(f"{url}/embed", json={"inputs": [huge[: 4 * limit]], "truncate": True}, timeout=60)
        assert cut.status_code == whole.status_code == 200 and cut.json() == whole.json()
        assert max(map(len, calls[0])) <= limit


class Spy:
    """The request tokenizer's Rust tokenizer, recording the texts each `encode_batch` call received."""

    def __init__(self, tokenizer, calls: list) -> None:
        self._tokenizer, self._calls = tokenizer, calls

    def encode_batch(self, texts, **kwargs):
        self._calls.append(list(texts))
        return self._tokenizer.encode_batch(texts, **kwargs)


def test_the_character_limit_is_a_setting():
    from neoembed.pretrain.neobert.tokenizer import load_tokenizer
    from neoembed.serve.tokenization import RequestTokenizer

    tokenizer = RequestTokenizer(load_tokenizer(max_length=128), max_length=128, max_chars=10)
    with pytest.raises(InvalidInput, match="at most 10 characters"):
        tokenizer.prepare(Inputs(texts=["eleven char"]), truncate=False, field="input")
    assert tokenizer.prepare(Inputs(texts=["ten chars!"]), truncate=False, field="input").ids


# --- `neoembed serve` as a process: its log and its exit -------------------------------------------------


def new_worker(process: subprocess.Popen, base: str, old: int) -> int:
    def started() -> bool:
        assert process.poll() is None, process.stdout.read()
        try:
            new = inference_process(process.pid) not in (None, old)  # None: between two processes
            return new and httpx.get(f"{base}/health").status_code == 200
        except httpx.TransportError:
            return False

    until(started, 60, "no new inference process")
    return inference_process(process.pid)


def test_a_death_is_one_log_line_and_one_too_many_stops_the_server_with_status_1(neobert_embedder):
    process, base = start("--model", str(neobert_embedder), "--max-worker-restarts", "1")
    try:
        wait_healthy(process, base)
        first = inference_process(process.pid)
        os.kill(first, signal.SIGKILL)
        os.kill(new_worker(process, base, first), signal.SIGKILL)
        assert process.wait(timeout=60) == 1
        output = process.stdout.read()
    finally:
        process.kill()
    lines = [line for line in output.splitlines() if "inference process" in line]
    assert "Traceback" not in output, output
    assert len(lines) == 2, output  # the restart, then the end
    assert "killed by signal 9" in lines[0] and "starting it again (restart 1 of 1)" in lines[0]
    assert "the server stopped: the inference process exited (killed by signal 9), after 1 restarts" in output


def test_sigterm_exits_within_its_grace_period_while_the_process_is_stopped(neobert_embedder):
    process, base = start("--model", str(neobert_embedder), "--shutdown-timeout", "10")
    try:
        wait_healthy(process, base)
        with ThreadPoolExecutor(1) as pool:
            os.kill(inference_process(process.pid), signal.SIGSTOP)  # killed by the watchdog, not resumed
            pending = pool.submit(
                httpx.post, f"{base}/embed", json={"inputs": TEXTS}, headers=KEY, timeout=120
            )
            time.sleep(0.5)
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) in (0, -signal.SIGTERM)
            assert time.monotonic() - started < 10  # --shutdown-timeout, enforced by the server itself
            assert error_code(pending.result()) == (503, "worker_restarted")
        output = process.stdout.read()
    finally:
        process.kill()
    assert "Traceback" not in output, output
