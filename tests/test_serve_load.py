"""The server under load, for MiniLM and for a NeoBERT export: every request answered correctly and
/health answering all along; and /health answering while a request is being tokenized and while the inference
process is stopped mid-batch, so it never waits behind tokenization or inference, whatever the machine's speed
(no test here asserts a latency).

The NeoBERT is the quickstart's size (4 x 128): its forward pass is mostly Python dispatching small tensor
ops, the load under which health once starved while the model ran in the server's own process. Served in
fp32, pinned, so every answer equals fp32 `encode` to 1e-5 on any CPU.
"""

import asyncio
import base64
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from neoembed.embedder import load_embedder
from neoembed.pretrain.neobert import NeoBERTConfig, NeoBERTModel
from neoembed.pretrain.neobert.tokenizer import load_tokenizer
from neoembed.serve import ServeSettings, create_app, serve_in_thread

CLIENTS = 24
REQUESTS = 600
MIN_PROBES = 150


@pytest.fixture(scope="module")
def neobert_export(tmp_path_factory):
    """A randomly initialised NeoBERT of the quickstart's size, saved as a sentence-transformers directory."""
    root = tmp_path_factory.mktemp("neobert-load")
    config = NeoBERTConfig(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512, max_length=128
    )
    NeoBERTModel(config).eval().save_pretrained(root / "backbone")
    load_tokenizer(max_length=128).save_pretrained(root / "backbone")
    SentenceTransformer(str(root / "backbone"), device="cpu").save(str(root / "embedder"))
    return root / "embedder"


def probe_health(url: str, statuses: list[int], done: threading.Event) -> None:
    with httpx.Client() as client:
        while not done.is_set():
            statuses.append(client.get(f"{url}/health").status_code)
            time.sleep(0.01)


async def drive(url: str, pool: list[str], expected: np.ndarray, probes: list[int]) -> list:
    """CLIENTS concurrent clients posting requests of 1-8 pool texts (base64, as the openai client asks)
    until REQUESTS were answered and MIN_PROBES health probes taken; returns the failures."""
    rng = np.random.default_rng(0)
    failures, answered = [], 0

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal answered
        while answered < REQUESTS or len(probes) < MIN_PROBES:
            chosen = rng.choice(len(pool), size=int(rng.integers(1, 9)), replace=False)
            body = {"input": [pool[i] for i in chosen], "model": "m", "encoding_format": "base64"}
            response = await client.post(f"{url}/v1/embeddings", json=body)
            answered += 1
            if response.status_code != 200:
                failures.append((response.status_code, response.text))
                continue
            data = response.json()["data"]
            got = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in data])
            want = expected[chosen] / np.linalg.norm(expected[chosen], axis=1, keepdims=True)
            if not np.allclose(got, want, atol=1e-5):
                failures.append("wrong embeddings")

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=CLIENTS)) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(CLIENTS)))
    return failures


@pytest.mark.parametrize("kind", ["minilm", "neobert"])
def test_under_load_every_request_is_right_and_health_answers_throughout(kind, minilm_path, neobert_export):
    path = str(minilm_path if kind == "minilm" else neobert_export)
    rng = np.random.default_rng(1)
    words = [
        "cats",
        "maths",
        "rain",
        "jazz",
        "bread",
        "rivers",
        "music",
        "the",
        "a",
        "of",
        "quietly",
        "over",
        "under",
        "old",
        "new",
    ]
    pool = [" ".join(rng.choice(words, size=int(rng.integers(3, 12)))) + f" {i}" for i in range(200)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        expected = load_embedder(path).encode(pool)
    finally:
        torch.set_num_threads(threads)

    statuses: list[int] = []
    done = threading.Event()
    with serve_in_thread(create_app(ServeSettings(model=path, threads=1, dtype="float32"))) as url:
        poller = threading.Thread(target=probe_health, args=(url, statuses, done))
        poller.start()
        try:
            failures = asyncio.run(drive(url, pool, expected, statuses))
        finally:
            done.set()
            poller.join()
    assert failures == []
    assert len(statuses) >= MIN_PROBES and set(statuses) == {200}, "health answered ok between the requests"


def handed_over(url: str, inputs: int) -> None:
    """Wait until `inputs` inputs have left the queue for the inference process (the metrics count them)."""
    line = f"neoembed_queue_duration_seconds_count {float(inputs)}"
    deadline = time.monotonic() + 30
    while line not in httpx.get(f"{url}/metrics").text:
        assert time.monotonic() < deadline, "the batch never left the queue"
        time.sleep(0.01)


@pytest.mark.faults
def test_health_answers_while_the_inference_process_is_stopped_mid_batch(minilm_path):
    """The ordering, not a latency: with the inference process stopped (SIGSTOP) while it holds a request,
    /health still answers, and the request completes, correct, once the process continues."""
    texts = [f"a sentence about rivers and rain, number {i}" for i in range(64)]
    expected = load_embedder(str(minilm_path)).encode(texts, normalize_embeddings=True)
    app = create_app(ServeSettings(model=str(minilm_path), threads=1, dtype="float32"))
    with serve_in_thread(app) as url:
        worker = app.state.server.backend.pid
        os.kill(worker, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(1) as pool:
                pending = pool.submit(httpx.post, f"{url}/embed", json={"inputs": texts}, timeout=120)
                handed_over(url, len(texts))  # to the stopped process: the request cannot finish now
                for _ in range(5):  # a health route behind inference would never answer: 10 s is a deadline
                    assert httpx.get(f"{url}/health", timeout=10).status_code in (200, 503)
                assert not pending.done(), "the request waits for the stopped inference process"
                os.kill(worker, signal.SIGCONT)
                answer = pending.result()
        finally:
            os.kill(worker, signal.SIGCONT)
    assert answer.status_code == 200
    assert np.allclose(np.asarray(answer.json(), dtype=np.float32), expected, atol=1e-5)


def test_health_answers_while_a_large_request_is_being_tokenized(minilm_path):
    """The ordering, not a latency: tokenization is held open (the real tokenizer runs once released) while
    /health is asked; a server tokenizing on its event loop could not answer until it was released."""
    texts = [f"a sentence about rivers and rain, number {i}" for i in range(512)]
    app = create_app(ServeSettings(model=str(minilm_path), threads=1, dtype="float32"))
    tokenizer = app.state.server.tokenizer
    entered, release = threading.Event(), threading.Event()
    prepare = tokenizer.prepare

    def held_prepare(*args, **kwargs):
        entered.set()
        release.wait(60)
        return prepare(*args, **kwargs)

    tokenizer.prepare = held_prepare
    with serve_in_thread(app) as url, ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post, f"{url}/v1/embeddings", json={"input": texts, "model": "m"}, timeout=300
        )
        assert entered.wait(60), "the request reached tokenization"
        try:
            health = httpx.get(f"{url}/health", timeout=30)  # a loop held by tokenization would time out
            assert not pending.done(), "the request was still being tokenized when /health answered"
        finally:
            release.set()
        answer = pending.result()
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert answer.status_code == 200 and len(answer.json()["data"]) == len(texts)
