"""Serving beyond the default app: an index on POST /search, a NeoBERT sentence-transformers directory, and
bf16. Tests that compare served vectors with fp32 `encode` to 1e-5 pin fp32; bf16 has its own tolerances."""

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import openai
import pytest
import torch
from sentence_transformers import SentenceTransformer

from neoembed.embedder import load_embedder
from neoembed.index import build_index
from neoembed.probe import worst_cosine
from neoembed.serve import ServeSettings, create_app, serve_in_thread

CHROMIUM = shutil.which("chromium")
DOCS = [
    ("cat", "The cat is a small domesticated carnivorous mammal.", "animals"),
    ("piano", "A piano is a keyboard instrument whose strings are struck by hammers.", "music"),
    ("rain", "Rain is water falling in drops from clouds.", "weather"),
    ("bread", "Bread is a staple food baked from a dough of flour and water.", "food"),
    ("jazz", "Jazz is a music genre that originated in New Orleans.", "music"),
    ("volcano", "A volcano is a rupture in the crust through which lava escapes.", "geology"),
]


@pytest.fixture(scope="module")
def minilm(minilm_path):
    return load_embedder(str(minilm_path))


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, minilm_path):
    root = tmp_path_factory.mktemp("serve-index")
    corpus = root / "docs.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": i, "text": t, "topic": topic}) + "\n" for i, t, topic in DOCS)
    )
    build_index([corpus], root / "index", model=str(minilm_path), tune_queries=len(DOCS), dtype="float32")
    return root / "index"


def test_search_returns_ranked_documents_with_metadata(index_dir, minilm_path, minilm):
    settings = ServeSettings(model=str(minilm_path), index=index_dir, dtype="float32")
    with serve_in_thread(create_app(settings)) as base:
        info = httpx.get(f"{base}/info").json()["index"]
        assert info["documents"] == len(DOCS)
        body = {"query": ["an instrument with keys and hammers", "lava and eruptions"], "k": 3}
        results = httpx.post(f"{base}/search", json=body).json()["results"]
        assert [r["query"] for r in results] == body["query"]
        top = [r["hits"][0] for r in results]
        assert [h["id"] for h in top] == ["piano", "volcano"]
        assert top[0]["metadata"] == {"topic": "music"} and top[0]["text"] == DOCS[1][1]
        hits = results[0]["hits"]
        assert [h["rank"] for h in hits] == [1, 2, 3]
        assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]
        # Scores are cosine similarities of the served model's embeddings.
        query, doc = minilm.encode([body["query"][0], DOCS[1][1]], normalize_embeddings=True)
        assert hits[0]["score"] == pytest.approx(float(query @ doc), abs=1e-4)
        bad = httpx.post(f"{base}/search", json={"query": "x", "k": 0})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "k"


def rendered(url: str, *, screenshot: Path | None = None) -> str:
    """The page at `url` as headless Chromium leaves it once its scripts ran (or a screenshot of it)."""
    what = [f"--screenshot={screenshot}", "--window-size=1000,640"] if screenshot else ["--dump-dom"]
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000", *what, url]
    return subprocess.run([CHROMIUM, *args], capture_output=True, text=True, timeout=120, check=True).stdout


def text_of(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</(p|ol)>', html, re.DOTALL)
    assert match, f"no #{element_id} in the page"
    return re.sub(r"<[^>]+>", " ", match.group(1))


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_search_page_shows_hits_and_the_servers_errors_in_a_real_browser(
    index_dir, minilm_path, tmp_path
):
    """Headless Chromium loads / with a query in its address (selenium is not installed here to type one):
    the page submits it to /search, then lists the hits with their scores and text, and the model, index
    type and latency; an empty query shows the server's own error message."""
    settings = ServeSettings(model=str(minilm_path), index=index_dir, dtype="float32", threads=1)
    with serve_in_thread(create_app(settings)) as base:
        query = "lava and eruptions"
        expected = httpx.post(f"{base}/search", json={"query": query, "k": 10}).json()["results"][0]["hits"]
        html = rendered(f"{base}/?q={quote(query)}")
        about = text_of(html, "about")
        assert f"model {minilm_path.name}" in about and "index Flat (cosine, 6 documents)" in about
        assert re.fullmatch(r"\s*6 hits in \d+ ms \(model .+\)\s*", text_of(html, "status"))
        hits = re.findall(r'class="score">([-0-9.]+)</span><span><span class="text">(.*?)</span>', html)
        assert hits == [(f"{h['score']:.3f}", h["text"]) for h in expected]
        assert "volcano" in hits[0][1]

        error = httpx.post(f"{base}/search", json={"query": ""}).json()["error"]["message"]
        empty = rendered(f"{base}/?q=")
        assert 'id="status" class="error"' in empty
        assert text_of(empty, "status").strip() == f"400: {error}"
        assert 'class="hit"' not in empty

        shot = tmp_path / "search-page.png"
        rendered(f"{base}/?q={quote(query)}", screenshot=shot)
        assert shot.stat().st_size > 10_000


def test_a_bf16_model_serves_unit_vectors_close_to_fp32_next_to_its_index(index_dir, minilm_path, minilm):
    """The index is checked against the stored weights; the bf16 conversion for serving comes after. The
    encoder runs in bf16, MiniLM's pooling and Normalize module in fp32: its raw output has norm 1 to fp32
    rounding, and stays within bf16's error of the fp32 embedding."""
    texts = [text for _, text, _ in DOCS]
    settings = ServeSettings(model=str(minilm_path), index=index_dir, dtype="bfloat16")
    with serve_in_thread(create_app(settings)) as base:
        dtype = httpx.get(f"{base}/info").json()["dtype"]
        raw = np.array(httpx.post(f"{base}/embed", json={"inputs": texts, "normalize": False}).json())
        body = {"query": ["an instrument with keys and hammers"], "k": 1}
        results = httpx.post(f"{base}/search", json=body).json()["results"]
    assert dtype == "bfloat16"
    np.testing.assert_allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-6)
    assert worst_cosine(minilm.encode(texts), raw) > 0.99
    assert results[0]["hits"][0]["id"] == "piano"


def test_auto_serves_in_bf16_exactly_where_the_cpu_has_bf16_units(neobert_embedder, cpu_bf16):
    with serve_in_thread(create_app(ServeSettings(model=str(neobert_embedder)))) as base:
        dtype = httpx.get(f"{base}/info").json()["dtype"]
    assert dtype == ("bfloat16" if cpu_bf16 else "float32")


def test_a_max_length_beyond_the_model_positions_is_refused(minilm_path):
    from neoembed.embedder import EmbedderError

    with pytest.raises(EmbedderError, match="512 positions"):
        create_app(ServeSettings(model=str(minilm_path), max_input_length=1000))


def test_index_built_with_another_model_is_refused_at_start(index_dir, neobert_embedder):
    with pytest.raises(ValueError, match="was built with .* not with the served model"):
        create_app(ServeSettings(model=str(neobert_embedder), index=index_dir))


def test_serves_a_neobert_sentence_transformers_directory(neobert_embedder):
    # The real loading path (load_embedder via the settings), as `neoembed serve --model DIR` does.
    app = create_app(ServeSettings(model=str(neobert_embedder), dtype="float32"))
    reference = SentenceTransformer(str(neobert_embedder), device="cpu")
    texts = ["a short one", "a much longer sentence with many more words in it than the first"]
    with serve_in_thread(app) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        response = client.embeddings.create(input=texts, model="neobert")
        info = httpx.get(f"{base}/info").json()
        with pytest.raises(openai.BadRequestError) as too_long:  # the export declares 128 tokens
            client.embeddings.create(input=["fits", "word " * 200], model="neobert")
    assert too_long.value.body["code"] == "context_length_exceeded"
    assert (
        "'input[1]' is 202 tokens long" in too_long.value.message and "at most 128" in too_long.value.message
    )
    assert response.model == "embedder"  # the directory's name
    assert (info["dimension"], info["max_input_length"]) == (64, 128)
    got = np.array([d.embedding for d in response.data])
    with torch.no_grad():
        expected = reference.encode(texts, normalize_embeddings=True)  # /v1/embeddings returns unit vectors
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.faults
def test_a_strict_server_answers_404_for_another_model_name(neobert_embedder):
    settings = ServeSettings(model=str(neobert_embedder), served_model_name="tiny", strict_model_name=True)
    with serve_in_thread(create_app(settings)) as base:
        other = httpx.post(f"{base}/v1/embeddings", json={"input": "x", "model": "gpt-embed"})
        ours = httpx.post(f"{base}/v1/embeddings", json={"input": "x", "model": "tiny"})
    assert other.status_code == 404
    assert other.json()["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    assert "serves 'tiny'" in other.json()["error"]["message"] and ours.status_code == 200
