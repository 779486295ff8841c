"""The batcher's token budget: the flag, the CPU's measured constant, and on a GPU the knee of a sweep timed
once the port is bound, /health saying so meanwhile."""

import os
import signal
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
from test_serve import metric

from neoembed.errors import InputError
from neoembed.serve import (
    ServeSettings,
    budget as budget_module,
    create_app,
    serve_in_thread,
    state as state_module,
)
from neoembed.serve.budget import (
    MEASURE_LENGTH,
    fastest_budget,
    fixed_budget,
    gpu_candidates,
    measure_budget,
    provisional_budget,
)
from neoembed.serve.warmup import full_batch
from neoembed.serve.worker import ModelInfo


def model_on(device: str, max_length: int = 512) -> ModelInfo:
    def tokenizer(text: str) -> dict[str, list[int]]:
        return {"input_ids": [101, 2773, 102]}  # [CLS] word [SEP]

    return ModelInfo(tokenizer, max_length, 384, device, "float32", None, None, compiled=False)


def test_the_smallest_budget_within_tolerance_of_the_fastest_is_chosen():
    assert fastest_budget({2048: 100.0, 4096: 180.0, 8192: 197.0, 16384: 200.0}) == 8192
    assert fastest_budget({2048: 150.0, 4096: 120.0, 8192: 90.0}) == 2048  # larger batches only slow down
    assert fastest_budget({4096: 100.0}) == 4096


def test_every_gpu_candidate_holds_a_full_length_input():
    assert gpu_candidates(512)[0] == 2048
    assert gpu_candidates(8192) == [8192, 16384, 32768, 65536]


def test_only_a_gpu_without_the_flag_times_its_budget():
    assert fixed_budget(ServeSettings(), "cpu", 512) == 1024  # the CPU's measured constant, nothing timed
    assert fixed_budget(ServeSettings(), "cpu", 2048) == 2048  # a full-length input fits
    assert fixed_budget(ServeSettings(max_batch_tokens=4096), "cuda", 512) == 4096
    assert fixed_budget(ServeSettings(), "cuda", 512) is None  # timed once the port is bound


def test_the_provisional_budget_is_the_first_candidate_and_holds_a_full_length_input():
    assert provisional_budget(512) == gpu_candidates(512)[0] == 2048
    assert provisional_budget(8192) == 8192


def test_a_gpu_gets_the_knee_of_its_measured_throughput():
    """A device whose batches cost a fixed 2 ms launch plus 1 us a token: throughput keeps rising with the
    batch, by under 5% past 32,768 tokens, so 32,768 is chosen; each shape is run once untimed first, and
    progress is reported after each budget."""
    now, calls, timed = [0.0], [], []

    def embed(batch):
        calls.append((len(batch), {len(ids) for ids in batch}))
        now[0] += 0.002 + 1e-6 * sum(map(len, batch))

    chosen = measure_budget(
        embed, model_on("cuda:0"), clock=lambda: now[0], on_timed=lambda: timed.append(len(calls))
    )
    assert chosen == 32768
    assert all(lengths == {MEASURE_LENGTH} for _, lengths in calls)
    sizes = [count for count, _ in calls]
    assert sizes[::2] == sizes[1::2] == [budget // MEASURE_LENGTH for budget in gpu_candidates(512)]
    assert timed == list(range(2, len(calls) + 1, 2))


# --- a server that times its budget: this CPU taken for a GPU ------------------------------------------------

MAX_LENGTH = 128  # the served tiny NeoBERT's inputs
CANDIDATES = (256, 512, 1024)
# Seconds each candidate's timed batch takes: 256, 512 and 512 tokens/s, so 512 is chosen (the smallest within
# 5% of the fastest).
SECONDS = {256: 1.0, 512: 1.0, 1024: 2.0}
SAME_LENGTH = "word " * 30  # [CLS] + 30 + [SEP]: 32 tokens


@pytest.fixture
def on_a_gpu(monkeypatch):
    """Start servers as on a GPU, with three candidate budgets and a sweep that waits at each batch until
    `gate` is set and runs on a fake clock (so its choice is known), each batch still sent through the
    inference process; `batches` counts the sweep's batches."""
    monkeypatch.setattr(
        state_module,
        "fixed_budget",
        lambda settings, device_type, max_length: fixed_budget(settings, "cuda", max_length),
    )
    monkeypatch.setattr(budget_module, "GPU_BUDGETS", CANDIDATES)
    sweep = SimpleNamespace(gate=threading.Event(), batches=[])
    now = [0.0]

    def held_sweep(embed, model, **kwargs):
        def slow_embed(batch):
            assert sweep.gate.wait(60), "the test never let the sweep go on"
            sweep.batches.append(len(batch))
            now[0] += SECONDS[len(batch) * len(batch[0])]
            return embed(batch)

        return measure_budget(slow_embed, model, clock=lambda: now[0], **kwargs)

    monkeypatch.setattr(state_module, "measure_budget", held_sweep)
    return sweep


def settings(model, **fields) -> ServeSettings:
    return ServeSettings(model=str(model), threads=1, dtype="float32", max_input_length=MAX_LENGTH, **fields)


def until(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def batches_of_one_request(url: str) -> tuple[float, float]:
    """Embed 64 inputs of 32 tokens; the batches they took and the padded tokens of each."""
    count, tokens = metric(url, "neoembed_batch_size_count"), metric(url, "neoembed_batch_tokens_sum")
    answer = httpx.post(f"{url}/embed", json={"inputs": [SAME_LENGTH] * 64}, timeout=60)
    assert answer.status_code == 200, answer.text
    batches = metric(url, "neoembed_batch_size_count") - count
    return batches, (metric(url, "neoembed_batch_tokens_sum") - tokens) / batches


def test_a_gpu_server_times_its_budget_after_binding_and_keeps_it_across_restarts(neobert_embedder, on_a_gpu):
    """The port answers while the sweep runs: /health 503 `warming` saying so, requests served at the
    provisional budget; then the batcher and /info take the chosen budget, the warm-up runs for it, and a
    replaced inference process keeps it without timing anything again."""
    app = create_app(settings(neobert_embedder))
    state = app.state.server
    assert state.warm.sweeping and on_a_gpu.batches == []  # nothing timed before the port is bound
    with serve_in_thread(app) as url:
        health = httpx.get(f"{url}/health")
        assert health.status_code == 503 and health.headers["Retry-After"] == "5"
        error = health.json()["error"]
        assert error["code"] == "warming" and "timing batch budgets: 0 of 3" in error["message"]
        assert httpx.get(f"{url}/info").json()["max_batch_tokens"] == 256  # the provisional budget
        assert batches_of_one_request(url) == (8, 256)  # served meanwhile, 8 inputs a batch

        on_a_gpu.gate.set()
        until(lambda: httpx.get(f"{url}/health").status_code == 200, "not ready after the sweep")
        assert len(on_a_gpu.batches) == 2 * len(CANDIDATES)
        assert httpx.get(f"{url}/info").json()["max_batch_tokens"] == 512
        assert state.warm.batches[-1] == full_batch(state.model, 512)  # calibrated on the chosen budget
        assert batches_of_one_request(url) == (4, 512)

        old = state.backend.pid
        os.kill(old, signal.SIGKILL)
        until(
            lambda: state.backend.pid != old and httpx.get(f"{url}/health").status_code == 200,
            "the killed inference process was not replaced",
        )
        assert len(on_a_gpu.batches) == 2 * len(CANDIDATES)  # no second sweep
        assert httpx.get(f"{url}/info").json()["max_batch_tokens"] == 512
        assert batches_of_one_request(url) == (4, 512)


def test_a_given_budget_is_checked_before_binding_and_nothing_is_timed(neobert_embedder, on_a_gpu):
    with pytest.raises(InputError, match=rf"--max-batch-tokens \(100\) must be at least .* \({MAX_LENGTH} "):
        create_app(settings(neobert_embedder, max_batch_tokens=100))
    state = create_app(settings(neobert_embedder, max_batch_tokens=1024)).state.server
    try:
        assert state.warm.finished and state.batcher.max_batch_tokens == 1024  # warmed before binding
    finally:
        state.close()
    assert on_a_gpu.batches == []
