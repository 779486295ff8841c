"""The server's probes of issue 57 (docs/reliability.md, "The server"): a replacement inference process that
stalls while loading, SIGTERM in every state of the inference process, a client that leaves, a small request
behind a large one, non-finite vectors, /tokenize's limits, a request timeout that counts tokenizing, and slow
batches that must not end the server. Faults are made with SIGSTOP and SIGKILL on real processes, so no test
depends on how fast the model runs; the bounds asserted are the server's own settings.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from safetensors.torch import load_file, save_file
from test_faults_worker import KEY, TEXTS, error_code, serving, stopped, until
from test_serve_cli import start, wait_healthy

from neoembed.bench.serve_faults import inference_process

pytestmark = pytest.mark.faults  # the fault suite: docs/reliability.md


def children_of(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def gone(pid: int) -> bool:
    """The process has exited (a zombie left for an init that does not reap counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def running_the_worker(pid: int) -> bool:
    """Past exec: a child stopped between fork and exec would hold its parent in `subprocess.Popen`, a state
    no real process stays in."""
    try:
        return b"neoembed.serve.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False


def replacement_of(server_pid: int, old: int) -> int:
    """The pid of the inference process started after `old` died, once it runs the worker's code."""
    found: list[int] = []

    def started() -> bool:
        found[:] = [pid for pid in children_of(server_pid) if pid != old and running_the_worker(pid)]
        return bool(found)

    until(started, 30, "no replacement was started")
    return found[0]


def health(url: str) -> int:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code
    except httpx.TransportError:
        return 0


# --- a replacement that stalls while loading -------------------------------------------------------------


@pytest.mark.slow  # two loads of a replacement and the silence that gives the stopped one away: ~30 s
def test_a_replacement_stopped_while_loading_is_killed_and_tried_again(neobert_embedder):
    """Issue 57 item 1: the replacement SIGSTOPped while it loads used to hang the server for good."""
    with serving(neobert_embedder, load_timeout=30) as (url, state):
        old = state.backend.pid
        os.kill(old, signal.SIGKILL)
        loading = replacement_of(os.getpid(), old)
        os.kill(loading, signal.SIGSTOP)  # stopped before it could beat for long: silent while loading
        started = time.monotonic()
        until(lambda: gone(loading), 30, "the stopped replacement was not killed")
        assert health(url) == 503
        until(lambda: health(url) == 200, 60, "no working inference process after the stalled load")
        assert state.backend.pid not in (old, loading) and state.backend.restarts == 1
        assert time.monotonic() - started < 60
        assert httpx.post(f"{url}/embed", json={"inputs": TEXTS}).status_code == 200


# --- SIGTERM in every state of the inference process -----------------------------------------------------

SHUTDOWN_S = 4.0


def sigterm_and_time(process: subprocess.Popen) -> float:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    return time.monotonic() - started


def post_in_background(pool: ThreadPoolExecutor, base: str, texts: list[str]):
    return pool.submit(httpx.post, f"{base}/embed", json={"inputs": texts}, headers=KEY, timeout=120)


def assert_clean_503(response: httpx.Response) -> None:
    status, code = error_code(response)
    assert status == 503 and code in ("shutting_down", "worker_restarted"), response.text


@pytest.mark.parametrize("state", ["loading", "loading-stopped", "stopped-mid-batch", "mid-batch"])
def test_sigterm_ends_the_server_within_its_shutdown_timeout_in_every_state(neobert_embedder, state):
    """Issue 57 items 1 and 8: SIGTERM 1 s into a replacement's load took 14.8 s against --shutdown-timeout
    2; with the replacement stopped, the server never exited; requests in flight got a bare 500. Now the
    exit comes within --shutdown-timeout, measured from the signal, the inference processes go with it, and
    a request in flight gets a 503 envelope."""
    process, base = start(
        "--model", str(neobert_embedder), "--shutdown-timeout", str(SHUTDOWN_S), "--max-batch-tokens", "128"
    )
    try:
        wait_healthy(process, base)
        worker = inference_process(process.pid)
        with ThreadPoolExecutor(1) as pool:
            pending = None
            if state.startswith("loading"):
                os.kill(worker, signal.SIGKILL)
                worker = replacement_of(process.pid, worker)
                if state == "loading-stopped":
                    os.kill(worker, signal.SIGSTOP)
                pending = post_in_background(pool, base, TEXTS)  # queued: no process can take it
                time.sleep(0.5)
            elif state == "stopped-mid-batch":
                os.kill(worker, signal.SIGSTOP)
                pending = post_in_background(pool, base, TEXTS)
                handed_over(base)
            else:  # a large request computing (many small batches)
                pending = post_in_background(pool, base, [f"{t} " * 6 for t in TEXTS] * 128)
                handed_over(base)
            seconds = sigterm_and_time(process)
            response = pending.result()
        output = process.stdout.read()
    finally:
        process.kill()
    assert seconds < SHUTDOWN_S, f"exited {seconds:.1f} s after SIGTERM: {output}"
    assert process.returncode in (0, -signal.SIGTERM), output
    if not (state == "mid-batch" and response.status_code == 200):  # finished within the drain: also right
        assert_clean_503(response)
    until(lambda: gone(worker), 2, "the inference process outlived the server")
    assert "Traceback" not in output, output


# --- fairness: a client that leaves, a small request behind a large one ----------------------------------


def metric(url: str, name: str) -> float:
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    return float(next(line for line in lines if line.startswith(f"{name} ")).split()[1])


def batches(url: str) -> float:
    return metric(url, "neoembed_batch_size_count")


def handed_over(url: str) -> None:
    """Wait until a first batch has left the queue for the inference process."""
    until(lambda: metric(url, "neoembed_queue_duration_seconds_count") > 0, 30, "no batch left the queue")


def test_a_disconnected_clients_inputs_are_dropped_from_the_queue_and_unrun_batches(neobert_embedder):
    """Issue 57 item 2: a 2,048-input request whose client left after 2 s was computed to the end."""
    texts = [f"{t} " * 4 for t in TEXTS] * 128  # 2,048 inputs
    with serving(neobert_embedder, max_batch_tokens=128) as (url, state):
        before = batches(url)
        with stopped(state.backend.pid):  # the first batch is handed over and waits
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{url}/embed", json={"inputs": texts}, timeout=2)  # the client leaves
            until(lambda: httpx.get(f"{url}/health").json()["queue_depth"] == 0, 2, "its inputs still queued")
        time.sleep(1)
        assert batches(url) - before <= 1  # the batch in flight when it left, at most
        assert httpx.post(f"{url}/embed", json={"inputs": TEXTS}).status_code == 200


def test_a_small_request_behind_a_large_one_waits_a_few_batches_not_for_all_of_it(neobert_embedder):
    """Issue 57 item 2: a small request behind a 2,048-input one waited 120 s and got 503. The batcher takes
    the queued requests in turn, so the small one is answered while the large one has most batches to go."""
    large = [f"{t} " * 4 for t in TEXTS] * 128
    with serving(neobert_embedder, max_batch_tokens=128) as (url, state), ThreadPoolExecutor(2) as pool:
        before = batches(url)
        with stopped(state.backend.pid):
            big = pool.submit(httpx.post, f"{url}/embed", json={"inputs": large}, timeout=120)
            handed_over(url)
            small = pool.submit(httpx.post, f"{url}/embed", json={"inputs": "a small request"}, timeout=120)
            until(
                lambda: httpx.get(f"{url}/health").json()["queue_depth"] > len(large) - 100, 10, "not queued"
            )
            time.sleep(0.3)
        assert small.result().status_code == 200
        waited = batches(url) - before
        assert big.result().status_code == 200
        everything = batches(url) - before
        # Served in turn: a few windows of batches before it, of the large request's hundreds, not all of them.
        assert everything > 300 and waited < 50, (waited, everything)


# --- finite or refused -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nan_minilm(minilm_path, tmp_path_factory):
    """The packaged MiniLM with the word embedding of 'cat' set to NaN."""
    from transformers import AutoTokenizer

    path = tmp_path_factory.mktemp("nan-minilm") / "model"
    shutil.copytree(minilm_path, path)
    weights = path / "model.safetensors"
    tensors = load_file(weights)
    key = next(k for k in tensors if k.endswith("word_embeddings.weight"))
    cat = AutoTokenizer.from_pretrained(str(path)).convert_tokens_to_ids("cat")
    tensors[key][cat] = float("nan")
    save_file(tensors, weights, metadata={"format": "pt"})
    return path


def test_non_finite_vectors_are_refused_naming_the_inputs(nan_minilm):
    """Issue 57 item 3: the float body held `nan` (invalid JSON), the openai client's base64 got NaN with 200.
    Now every embedding route answers one error envelope naming the inputs, in valid JSON."""
    texts = ["a dog", "a cat", "rivers", "the cat sat"]
    with serving(nan_minilm) as (url, _):
        answers = [
            httpx.post(f"{url}/embed", json={"inputs": texts}),
            httpx.post(
                f"{url}/v1/embeddings", json={"input": texts, "model": "m", "encoding_format": "float"}
            ),
            httpx.post(
                f"{url}/v1/embeddings", json={"input": texts, "model": "m", "encoding_format": "base64"}
            ),
        ]
        for answer in answers:
            error = json.loads(answer.text)["error"]  # strict JSON: no NaN
            assert answer.status_code == 500 and error["code"] == "non_finite_embedding", answer.text
            assert "rows 1, 3;" in error["message"]
        fine = httpx.post(
            f"{url}/v1/embeddings", json={"input": ["a dog"], "model": "m", "encoding_format": "base64"}
        )
        vector = np.frombuffer(base64.b64decode(fine.json()["data"][0]["embedding"]), dtype="<f4")
        assert fine.status_code == 200 and np.isfinite(vector).all()


# --- limits and deadlines --------------------------------------------------------------------------------


def test_tokenize_has_the_embedding_routes_character_limit(neobert_embedder):
    """Issue 57 item 6: one 8 MB string made a 77 MB body in 16.4 s."""
    with serving(neobert_embedder) as (url, state):
        started = time.monotonic()
        answer = httpx.post(f"{url}/tokenize", json={"inputs": "word " * (8 * 1024 * 1024 // 5)}, timeout=60)
        assert time.monotonic() - started < 5
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "context_length_exceeded"
        assert f"at most {state.tokenizer.max_chars:,} characters" in answer.json()["error"]["message"]
        too_many = httpx.post(f"{url}/tokenize", json={"inputs": ["a"] * 2049})
        assert too_many.status_code == 400 and too_many.json()["error"]["code"] == "too_many_inputs"


def test_the_request_timeout_counts_tokenizing(neobert_embedder):
    """Issue 57 item 8: a request spent 14.2 s tokenizing against --request-timeout 3 before its 503."""
    with serving(neobert_embedder, request_timeout=1.0) as (url, state):
        texts = ["word " * (state.tokenizer.max_chars // 5)] * 2048  # about 8 MB to tokenize
        started = time.monotonic()
        answer = httpx.post(f"{url}/embed", json={"inputs": texts, "truncate": True}, timeout=120)
        seconds = time.monotonic() - started
        assert error_code(answer) == (503, "request_timeout")
        assert seconds < 1.0 + 2.0, seconds  # parsing the 8 MB body, then the timeout


def test_slow_batches_restart_the_process_without_spending_the_restart_budget(neobert_embedder):
    """Issue 57 item 8: each batch past --batch-timeout spent a restart of the lifetime budget, so four slow
    batches ended the server. With a budget of 0, two slow batches now leave it serving."""
    with serving(neobert_embedder, batch_timeout=1.0, max_worker_restarts=0) as (url, state):
        for _ in range(2):
            old = state.backend.pid
            with stopped(old):
                answer = httpx.post(f"{url}/embed", json={"inputs": TEXTS}, timeout=60)
            assert error_code(answer) == (503, "worker_restarted")
            until(lambda old=old: state.backend.pid != old and health(url) == 200, 60, "not replaced")
        assert state.backend.restarts == 0 and state.failure is None
        assert httpx.post(f"{url}/embed", json={"inputs": TEXTS}).status_code == 200
