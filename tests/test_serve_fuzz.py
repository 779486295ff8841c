"""The server's JSON layer under generated input: any body gets an answer in the envelope, never a 500.

hypothesis generates request bodies for every route: well-formed requests whose texts hold any Unicode
(lone surrogates, format and control characters, emoji, very long words), JSON values of every shape where a
field expects another, and raw bytes that are not JSON or not UTF-8. Each answer must be 200 with the
route's shape, or a 4xx whose body is OpenAI's error envelope; the server must keep serving afterwards.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from neoembed.serve import ServeSettings, create_app, serve_in_thread

pytestmark = pytest.mark.faults  # the fault suite: docs/reliability.md

ROUTES = ("/v1/embeddings", "/embed", "/tokenize")
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Every code point, surrogates (Cs) included: JSON's \uXXXX escapes can spell one alone.
any_text = st.text(st.characters(codec=None, categories=None), max_size=200)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(any_text, children, max_size=5),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def url(neobert_embedder):
    """A tiny NeoBERT served with small limits, so that generated requests also meet every limit."""
    settings = ServeSettings(
        model=str(neobert_embedder), threads=1, dtype="float32", max_client_batch_size=8, max_queue_items=64
    )
    with serve_in_thread(create_app(settings)) as base:
        yield base


@pytest.fixture(scope="module")
def client(url):
    with httpx.Client(base_url=url, timeout=60) as client:
        yield client


def assert_answered(response: httpx.Response) -> None:
    assert response.status_code != 500 and response.status_code < 500, response.text
    if response.status_code == 200:
        json.loads(response.text)
        return
    assert 400 <= response.status_code < 500
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]


def post(client: httpx.Client, route: str, body: bytes) -> httpx.Response:
    return client.post(route, content=body, headers={"content-type": "application/json"})


def escaped(value) -> bytes:
    """JSON with every non-ASCII character escaped, as a client's JSON encoder writes a lone surrogate."""
    return json.dumps(value, ensure_ascii=True).encode()


@FUZZ
@given(texts=st.lists(any_text, min_size=1, max_size=10), route=st.sampled_from(ROUTES))
def test_any_texts_are_embedded_or_refused_with_an_envelope(client, texts, route):
    field = "input" if route == "/v1/embeddings" else "inputs"
    body = {field: texts, "model": "m"}
    response = post(client, route, escaped(body))
    assert_answered(response)
    if response.status_code == 200 and route != "/tokenize":
        rows = response.json()["data"] if route == "/v1/embeddings" else response.json()
        assert len(rows) == len(texts)


@FUZZ
@given(
    value=json_values,
    route=st.sampled_from(ROUTES),
    field=st.sampled_from(["input", "inputs", "model", "dimensions"]),
)
def test_any_json_in_any_field_gets_an_answer(client, value, route, field):
    body = {"input": ["a"], "inputs": ["a"], "model": "m"} | {field: value}
    assert_answered(post(client, route, escaped(body)))


@FUZZ
@given(body=st.binary(max_size=300) | json_values.map(escaped), route=st.sampled_from(ROUTES))
def test_any_bytes_get_an_answer(client, body, route):
    assert_answered(post(client, route, body))


def test_the_named_cases_and_the_server_still_serves(client):
    lone = post(client, "/v1/embeddings", b'{"input": "a\\udfffb", "model": "m"}')
    assert lone.status_code == 400 and lone.json()["error"]["code"] == "invalid_text"
    not_utf8 = post(client, "/v1/embeddings", b'{"input": "\xff\xfe", "model": "m"}')
    assert not_utf8.status_code == 400 and not_utf8.json()["error"]["code"] == "invalid_json"
    ids = [101, *[2000] * 3000, 102]  # one framed sequence of 3,002 token ids, not 3,002 inputs
    long = post(client, "/v1/embeddings", escaped({"input": ids, "model": "m"}))
    assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded"
    ok = post(client, "/v1/embeddings", escaped({"input": ["still serving"], "model": "m"}))
    assert ok.status_code == 200 and len(ok.json()["data"][0]["embedding"]) == 64
