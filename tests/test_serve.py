"""The embedding server against real clients: the official `openai` client and httpx, on a loopback port.

MiniLM is served by two apps: `url` with the defaults, and `tight_url` with small limits (batch budget,
queue, items, body) plus an API key and truncation, to exercise every limit. Each app loads the model in
its own inference process; `model`, loaded here, gives the `SentenceTransformer.encode` reference. Both
apps serve in fp32, pinned, so served vectors equal that reference to 1e-5 on any CPU; bf16 serving has
its own tests in test_serve_models.py.
"""

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import openai
import pytest
import torch

from neoembed.embedder import load_embedder
from neoembed.serve import ServeSettings, create_app, serve_in_thread
from neoembed.serve.batcher import Batcher, plan_batches
from neoembed.serve.metrics import Metrics

KEY = "test-key"
TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog.", "embeddings map text to vectors", "a"]
LONG = "word " * 400  # about 400 tokens, over MiniLM's 256


@pytest.fixture(scope="module")
def model(minilm_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_embedder(str(minilm_path))
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def url():
    # One intra-op thread: the server shares 2 cores with its clients here.
    with serve_in_thread(create_app(ServeSettings(model="minilm", threads=1, dtype="float32"))) as base:
        yield base


@pytest.fixture(scope="module")
def tight_url():
    settings = ServeSettings(
        model="minilm",
        threads=1,
        dtype="float32",
        served_model_name="tight",
        api_key=KEY,
        truncate=True,
        max_batch_tokens=256,
        max_queue_items=64,
        max_client_batch_size=64,
        max_body_bytes=20_000,
    )
    with serve_in_thread(create_app(settings)) as base:
        yield base


def encode(model, texts):
    return model.encode(texts, convert_to_numpy=True)


def metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def assert_envelope(response: httpx.Response, status: int, *, param=None, code=None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


# --- the OpenAI client --------------------------------------------------------------------------------


def test_openai_client_base64_default_equals_encode(url, model):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    response = client.embeddings.create(input=TEXTS, model="anything")  # the client asks for base64
    got = np.array([d.embedding for d in response.data])
    assert [d.index for d in response.data] == list(range(len(TEXTS)))
    np.testing.assert_allclose(got, encode(model, TEXTS), atol=1e-5)
    assert response.model == "minilm"
    tokens = sum(len(ids) for ids in model.tokenizer(TEXTS)["input_ids"])
    assert response.usage.prompt_tokens == response.usage.total_tokens == tokens


def test_openai_client_float_and_single_string(url, model):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    response = client.embeddings.create(input=TEXTS[1], model="m", encoding_format="float")
    assert len(response.data) == 1
    np.testing.assert_allclose(response.data[0].embedding, encode(model, [TEXTS[1]])[0], atol=1e-5)


def test_base64_is_little_endian_float32(url, model):
    body = {"input": TEXTS[:1], "model": "m", "encoding_format": "base64"}
    raw = httpx.post(f"{url}/v1/embeddings", json=body).json()["data"][0]["embedding"]
    np.testing.assert_allclose(
        np.frombuffer(base64.b64decode(raw), dtype="<f4"), encode(model, TEXTS[:1])[0], atol=1e-5
    )


def test_float_and_base64_answers_carry_the_same_float32_values(url):
    body = {"input": TEXTS, "model": "m"}
    floats = httpx.post(f"{url}/v1/embeddings", json={**body, "encoding_format": "float"}).json()["data"]
    encoded = httpx.post(f"{url}/v1/embeddings", json={**body, "encoding_format": "base64"}).json()["data"]
    rows = httpx.post(f"{url}/embed", json={"inputs": TEXTS}).json()
    want = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in encoded])
    np.testing.assert_array_equal(np.array([d["embedding"] for d in floats], dtype=np.float32), want)
    np.testing.assert_array_equal(np.array(rows, dtype=np.float32), want)


def test_float_bodies_are_valid_json_that_reads_back_as_the_same_float32():
    from neoembed.serve.responses import rows_body

    vectors = np.array([[1e-8, -0.0, 1.0, 3e38, 0.1, -1.17549435e-38]], dtype="<f4")
    np.testing.assert_array_equal(np.array(json.loads(rows_body(vectors)), dtype=np.float32), vectors)


def test_dimensions_truncate_and_renormalise(url, model):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    response = client.embeddings.create(input=TEXTS, model="m", dimensions=64)
    got = np.array([d.embedding for d in response.data])
    full = encode(model, TEXTS)[:, :64]
    np.testing.assert_allclose(got, full / np.linalg.norm(full, axis=1, keepdims=True), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_token_ids_from_this_tokenizer_are_embedded_as_their_text(url, model):
    ids = httpx.post(f"{url}/tokenize", json={"inputs": TEXTS[:2]}).json()
    sequences = [[token["id"] for token in tokens] for tokens in ids]
    assert sequences == model.tokenizer(TEXTS[:2])["input_ids"]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    response = client.embeddings.create(input=sequences, model="m")
    np.testing.assert_allclose([d.embedding for d in response.data], encode(model, TEXTS[:2]), atol=1e-5)
    assert response.usage.prompt_tokens == sum(map(len, sequences))
    single = client.embeddings.create(input=sequences[0], model="m")  # one id list, not a list of lists
    np.testing.assert_allclose(single.data[0].embedding, encode(model, TEXTS[:1])[0], atol=1e-5)


@pytest.mark.parametrize(
    "ids",
    [
        [9906, 1917],  # "Hello world" in tiktoken's cl100k_base: what LangChain sends by default
        [7592, 2088],  # this vocabulary's ids but without the model's [CLS] ... [SEP] framing
        [101, 2088, 7592, 2088, 102, 102],  # framed wrongly
        [101, 50000, 102],  # outside the vocabulary
    ],
)
def test_token_ids_that_cannot_be_verified_are_refused(url, ids):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(input=[ids], model="m")
    assert "not a token-id sequence from this model's tokenizer" in caught.value.message
    assert caught.value.body["code"] == "invalid_token_ids"


def test_too_long_input_is_refused_by_default(url):
    response = httpx.post(f"{url}/v1/embeddings", json={"input": ["ok", LONG], "model": "m"})
    error = assert_envelope(response, 400, param="input", code="context_length_exceeded")
    assert "'input[1]'" in error["message"] and "256" in error["message"]


# --- TEI-style routes, info, health, metrics -------------------------------------------------------------


def test_embed_route_normalize_and_dimensions(url, model):
    raw = httpx.post(f"{url}/embed", json={"inputs": TEXTS, "normalize": False}).json()
    np.testing.assert_allclose(raw, encode(model, TEXTS), atol=1e-5)
    cut = np.array(httpx.post(f"{url}/embed", json={"inputs": TEXTS[0], "dimensions": 8}).json())
    assert cut.shape == (1, 8)
    np.testing.assert_allclose(np.linalg.norm(cut), 1.0, atol=1e-5)
    truncated = httpx.post(f"{url}/embed", json={"inputs": [LONG], "truncate": True})
    assert truncated.status_code == 200 and truncated.headers["x-truncated-inputs"] == "0"


def test_tokenize_offsets_point_into_the_text(url):
    tokens = httpx.post(f"{url}/tokenize", json={"inputs": "Hello, World"}).json()[0]
    assert tokens[0]["special"] and tokens[-1]["special"]
    assert [t["text"] for t in tokens[1:-1]] == ["Hello", ",", "World"]
    assert all("Hello, World"[t["start"] : t["stop"]] == t["text"] for t in tokens[1:-1])
    plain = httpx.post(f"{url}/tokenize", json={"inputs": "Hello", "add_special_tokens": False}).json()[0]
    assert [t["text"] for t in plain] == ["Hello"]


def test_info_health_and_metrics(url):
    info = httpx.get(f"{url}/info").json()
    assert (info["model"], info["dimension"], info["max_input_length"]) == ("minilm", 384, 256)
    assert info["max_batch_tokens"] == 1024 and info["max_client_batch_size"] == 2048
    assert httpx.get(f"{url}/health").json()["status"] == "ok"
    before = metric(url, 'neoembed_requests_total{route="/v1/embeddings",status="200"}')
    httpx.post(f"{url}/v1/embeddings", json={"input": "count me", "model": "m"})
    after = metric(url, 'neoembed_requests_total{route="/v1/embeddings",status="200"}')
    assert after == before + 1
    text = httpx.get(f"{url}/metrics").text
    for name in (
        "neoembed_request_duration_seconds_bucket",
        "neoembed_queue_duration_seconds_count",
        "neoembed_inference_duration_seconds_count",
        "neoembed_batch_tokens_bucket",
        "neoembed_queue_depth",
        "neoembed_truncated_inputs_total",
        "neoembed_input_tokens_total",
    ):
        assert name in text


def test_search_without_an_index_says_how_to_load_one(url):
    error = assert_envelope(httpx.post(f"{url}/search", json={"query": "x"}), 404, code="no_index")
    assert "--index" in error["message"]


def test_the_search_page_is_served_at_the_root_and_calls_the_servers_routes(url, tight_url):
    page = httpx.get(f"{url}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert '<input id="q"' in html, "a query box"
    assert 'call("/search", {query:' in html and 'call("/info")' in html
    assert "data.error?.message" in html, "the server's error message is shown"
    # The page is static and open like /health; its calls still need the key.
    assert httpx.get(f"{tight_url}/").status_code == 200
    assert httpx.get(f"{tight_url}/info").status_code == 401


# --- bad input: status, envelope, and the server keeps answering -----------------------------------------

VALID = {"input": "still fine", "model": "m"}

BAD_JSON_BODIES = [
    # (body, status, param, code)
    ({"input": "", "model": "m"}, 400, "input", "empty_input"),
    ({"input": ["ok", ""], "model": "m"}, 400, "input", "empty_input"),
    ({"input": [], "model": "m"}, 400, "input", "empty_input"),
    ({"input": 5, "model": "m"}, 400, "input", "invalid_type"),
    ({"input": None, "model": "m"}, 400, "input", "invalid_type"),
    ({"input": ["ok", 3], "model": "m"}, 400, "input", "invalid_type"),
    ({"input": [[101, 102], "text"], "model": "m"}, 400, "input", "invalid_type"),
    ({"input": [[101, 1.5, 102]], "model": "m"}, 400, "input", "invalid_type"),
    ({"input": [[101, 102], []], "model": "m"}, 400, "input", "empty_input"),
    ({"input": {"text": "x"}, "model": "m"}, 400, "input", "invalid_type"),
    ({"input": ["x"] * 2049, "model": "m"}, 400, "input", "too_many_inputs"),
    ({"model": "m"}, 400, "input", "missing_field"),
    ({"input": "x"}, 400, "model", "missing_field"),
    ({"input": "x", "model": 7}, 400, "model", "invalid_value"),
    ({"input": "x", "model": "m", "encoding_format": "hex"}, 400, "encoding_format", "invalid_value"),
    ({"input": "x", "model": "m", "dimensions": 0}, 400, "dimensions", "invalid_value"),
    ({"input": "x", "model": "m", "dimensions": "64"}, 400, "dimensions", "invalid_value"),
    ({"input": "x", "model": "m", "dimensions": 385}, 400, "dimensions", "invalid_dimensions"),
    ([{"input": "x", "model": "m"}], 400, None, "invalid_type"),
]


@pytest.mark.parametrize(("body", "status", "param", "code"), BAD_JSON_BODIES)
def test_bad_input_gets_an_envelope_and_the_server_keeps_serving(url, body, status, param, code):
    assert_envelope(httpx.post(f"{url}/v1/embeddings", json=body), status, param=param, code=code)
    assert httpx.post(f"{url}/v1/embeddings", json=VALID).status_code == 200


@pytest.mark.parametrize(
    ("content", "headers", "code"),
    [
        (b'{"input": "x", "model": ', {"content-type": "application/json"}, "invalid_json"),
        (b"input=x&model=m", {"content-type": "application/x-www-form-urlencoded"}, "invalid_json"),
    ],
)
def test_malformed_bodies(url, content, headers, code):
    response = httpx.post(f"{url}/v1/embeddings", content=content, headers=headers)
    assert_envelope(response, 400, code=code)
    assert httpx.post(f"{url}/v1/embeddings", json=VALID).status_code == 200


def test_other_routes_check_their_inputs(url):
    assert_envelope(httpx.post(f"{url}/embed", json={"inputs": ["a", ""]}), 400, param="inputs")
    assert_envelope(
        httpx.post(f"{url}/embed", json={"inputs": "a", "normalize": "yes"}), 400, param="normalize"
    )
    assert_envelope(httpx.post(f"{url}/tokenize", json={"inputs": [1, 2]}), 400, param="inputs")
    assert_envelope(httpx.get(f"{url}/v1/nothing"), 404, code="unknown_route")
    assert_envelope(httpx.get(f"{url}/v1/embeddings"), 405, code="method_not_allowed")


# --- limits: batch splitting, queue, key, body size, truncation -----------------------------------------


def test_plan_batches_fits_the_budget_and_groups_by_length():
    lengths = [5, 120, 7, 60, 64, 300, 8, 9, 100]
    batches = plan_batches(lengths, 128)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert longest * len(batch) <= 128 or len(batch) == 1  # 300 > budget alone: a batch of one
    # Longest first: the short inputs share a batch instead of padding to a long one.
    assert sorted(batches[-1]) == [0, 2, 6, 7]


def test_a_failing_batch_fails_its_requests_and_the_worker_keeps_going():
    def embed(sequences):  # a backend that cannot embed one particular input
        if [66] in sequences:
            raise RuntimeError("cannot embed [66]")
        return np.array([[len(ids), 1.0] for ids in sequences], dtype=np.float32)

    batcher = Batcher(embed, max_batch_tokens=4, max_queue_items=16, metrics=Metrics())
    batcher.start()

    async def submit_one_by_one():
        outcomes = []
        for sequences in ([[1, 2], [66]], [[3, 4, 5], [6]]):
            try:
                outcomes.append(await asyncio.wait_for(batcher.submit(sequences), 30))
            except RuntimeError as err:
                outcomes.append(err)
        return outcomes

    failed, served = asyncio.run(submit_one_by_one())
    assert batcher.close(timeout=30)
    assert isinstance(failed, RuntimeError) and "[66]" in str(failed)
    np.testing.assert_array_equal(served, [[3, 1], [1, 1]])
    assert not batcher.alive


def test_oversized_request_is_split_into_budget_batches_and_reassembled(tight_url, model):
    auth = {"Authorization": f"Bearer {KEY}"}
    texts = [("word " * (3 + 7 * (i % 9))).strip() + f" {i}" for i in range(64)]  # ~5-60 tokens each
    batches_before = metric(tight_url, "neoembed_batch_tokens_count")
    response = httpx.post(f"{tight_url}/embed", json={"inputs": texts}, headers=auth, timeout=120)
    assert response.status_code == 200
    np.testing.assert_allclose(response.json(), encode(model, texts), atol=1e-5)
    batches = metric(tight_url, "neoembed_batch_tokens_count") - batches_before
    assert batches >= 8  # ~2000 tokens through a 256-token budget
    # Every batch so far fitted the budget: all observations are in the le=256 bucket.
    assert metric(tight_url, 'neoembed_batch_tokens_bucket{le="256.0"}') == metric(
        tight_url, "neoembed_batch_tokens_count"
    )


def test_full_queue_answers_429_and_accepted_requests_stay_correct(tight_url, model):
    auth = {"Authorization": f"Bearer {KEY}"}
    texts = [f"request queue filler number {i} " + "padding words " * 10 for i in range(64)]
    expected = encode(model, texts)

    async def burst():
        async with httpx.AsyncClient(headers=auth, timeout=120) as client:
            return await asyncio.gather(
                *(client.post(f"{tight_url}/embed", json={"inputs": texts}) for _ in range(8))
            )

    responses = asyncio.run(burst())
    statuses = [r.status_code for r in responses]
    assert 429 in statuses and 200 in statuses, statuses
    for response in responses:
        if response.status_code == 200:
            np.testing.assert_allclose(response.json(), expected, atol=1e-5)
        else:
            assert_envelope(response, 429, code="queue_full")
            assert response.headers["retry-after"] == "1"
    assert httpx.post(f"{tight_url}/embed", json={"inputs": "after"}, headers=auth).status_code == 200


def test_api_key(tight_url):
    body = {"input": "x", "model": "m"}
    assert_envelope(httpx.post(f"{tight_url}/v1/embeddings", json=body), 401, code="invalid_api_key")
    wrong = {"Authorization": "Bearer nope"}
    assert_envelope(httpx.post(f"{tight_url}/v1/embeddings", json=body, headers=wrong), 401)
    # A bad body without a key is still a 401: the key is checked before the body is read.
    assert_envelope(httpx.post(f"{tight_url}/v1/embeddings", content=b"{"), 401)
    client = openai.OpenAI(base_url=f"{tight_url}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.embeddings.create(input="x", model="m")
    good = openai.OpenAI(base_url=f"{tight_url}/v1", api_key=KEY)
    assert good.embeddings.create(input="x", model="m").model == "tight"
    assert httpx.get(f"{tight_url}/health").status_code == 200  # open for load balancers
    assert httpx.get(f"{tight_url}/metrics").status_code == 200


def test_body_limit_with_and_without_content_length(tight_url):
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    big = json.dumps({"input": ["x " * 200] * 60, "model": "m"}).encode()  # ~24 kB > 20 kB
    assert len(big) > 20_000
    error = assert_envelope(httpx.post(f"{tight_url}/v1/embeddings", content=big, headers=auth), 413)
    assert "20000" in error["message"]

    def chunks():  # a generator body is sent chunked, without Content-Length
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    assert_envelope(httpx.post(f"{tight_url}/v1/embeddings", content=chunks(), headers=auth), 413)
    assert_envelope(
        httpx.post(f"{tight_url}/v1/embeddings", json={"input": ["x"] * 65, "model": "m"}, headers=auth),
        400,
        code="too_many_inputs",
    )
    assert httpx.post(f"{tight_url}/v1/embeddings", json=VALID, headers=auth).status_code == 200


def test_truncation_is_applied_and_reported(tight_url, model):
    auth = {"Authorization": f"Bearer {KEY}"}
    before = metric(tight_url, "neoembed_truncated_inputs_total")
    body = {"input": ["short", LONG], "model": "m", "encoding_format": "float"}
    response = httpx.post(f"{tight_url}/v1/embeddings", json=body, headers=auth).json()
    assert response["truncated_inputs"] == [1]
    assert response["usage"]["prompt_tokens"] == 3 + 256
    got = [d["embedding"] for d in response["data"]]
    np.testing.assert_allclose(
        got, encode(model, ["short", LONG]), atol=1e-5
    )  # encode truncates the same way
    assert metric(tight_url, "neoembed_truncated_inputs_total") == before + 1


# --- graceful shutdown ----------------------------------------------------------------------------------


def test_graceful_shutdown_finishes_accepted_requests(model):
    texts = [f"sentence number {i} waiting in the queue during shutdown" for i in range(300)]
    app = create_app(ServeSettings(model="minilm", max_batch_tokens=256, threads=1, dtype="float32"))
    result = {}
    with serve_in_thread(app) as base:

        def request():
            result["response"] = httpx.post(f"{base}/embed", json={"inputs": texts}, timeout=120)

        client = threading.Thread(target=request)
        client.start()
        deadline = time.monotonic() + 30
        while httpx.get(f"{base}/health").json()["queue_depth"] == 0:  # the request is queued
            assert time.monotonic() < deadline
            time.sleep(0.005)
        # Leaving the block shuts the server down (as SIGTERM does) while the request is in flight.
    client.join()
    response = result["response"]
    assert response.status_code == 200
    np.testing.assert_allclose(response.json(), encode(model, texts), atol=1e-5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/health")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_request_tokenization_starts_no_tokenizer_thread_pool(minilm_path):
    """Requests are tokenized side by side on request threads already; the Rust tokenizer's own pool would
    add a spinning thread per core, CPU taken from the inference process."""
    code = (
        "import os, sys\n"
        "from transformers import AutoTokenizer\n"
        "from neoembed.serve.inputs import Inputs\n"
        "from neoembed.serve.tokenization import RequestTokenizer\n"
        "tokenizer = RequestTokenizer(AutoTokenizer.from_pretrained(sys.argv[1]), max_length=128)\n"
        "before = len(os.listdir('/proc/self/task'))\n"
        "texts = [f'some text number {i}' for i in range(256)]\n"
        "for _ in range(3):\n"
        "    tokenizer.prepare(Inputs(texts=texts), truncate=True, field='input')\n"
        "print(len(os.listdir('/proc/self/task')) - before)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, "-c", code, str(minilm_path)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "0", "tokenizing requests started threads"


def test_the_bench_load_generator_gets_every_response_and_fails_on_an_error(url):
    from neoembed.bench import load

    port = int(url.rsplit(":", 1)[1])
    texts = [f"text number {i}" for i in range(12)]
    requests = [
        load.post("127.0.0.1", port, "/v1/embeddings", {"input": texts[i : i + 3], "model": "m"})
        for i in range(0, 12, 3)
    ]
    wall, latencies = asyncio.run(load.drive("127.0.0.1", port, requests, clients=2))
    assert len(latencies) == 4 and wall >= max(latencies) > 0
    empty = load.post("127.0.0.1", port, "/v1/embeddings", {"input": "", "model": "m"})
    with pytest.raises(RuntimeError, match="400"):
        asyncio.run(load.drive("127.0.0.1", port, [empty], clients=1))


def test_the_bench_openai_round_gets_every_answer_over_processes_and_fails_on_an_error(url):
    from neoembed.bench import load

    port = int(url.rsplit(":", 1)[1])
    requests = [[f"text number {i}", f"and {i} more"] for i in range(6)]
    wall, latencies = load.openai_round(port, "m", requests, clients=4, processes=2)
    assert len(latencies) == 6 and wall >= max(latencies) > 0
    with pytest.raises(RuntimeError, match="an openai client failed: BadRequestError"):
        load.openai_round(port, "m", [[""]], clients=1, processes=1)
