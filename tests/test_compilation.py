"""Compiled inference on a CPU: the one switch and decision, compilation bounded over batch shapes, and a
compiled server that warms up before it says ready.

Which graphs torch.compile builds, and when it recompiles, is dynamo's decision whatever the backend; these
tests compile with `aot_eager` (`NEOEMBED_COMPILE_BACKEND`), which hands dynamo's graphs on without generating
code, so they run in seconds. The inductor variant is marked slow.
"""

import random
import time

import httpx
import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch._dynamo.utils import counters
from typer.testing import CliRunner

from neoembed.cli import app
from neoembed.compilation import BACKEND_VARIABLE, compile_for_inference, compile_wanted
from neoembed.embedder import load_embedder
from neoembed.serve import ServeSettings, create_app, serve_in_thread
from neoembed.serve.warmup import warm_up_batches
from neoembed.serve.worker import ModelInfo, ModelRunner

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "near",
    "the",
    "river",
    "bank",
    "at",
    "dawn",
]
# A padded batch of one sequence, a padded batch of several, their unpadded tokens: the shape classes
# dynamo may specialise NeoBERT's two compiled regions to. Batch lengths and sizes add none.
NEOBERT_GRAPHS = 2 * 3


@pytest.fixture
def compiles(monkeypatch):
    """Compile with `aot_eager` from a clean dynamo; returns a function counting the graphs compiled since."""
    monkeypatch.setenv(BACKEND_VARIABLE, "aot_eager")
    torch._dynamo.reset()
    counters.clear()
    yield lambda: counters["stats"]["unique_graphs"]
    torch._dynamo.reset()


def texts(rng: random.Random, count: int, longest: int = 60) -> list[str]:
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, longest))) for _ in range(count)]


@pytest.mark.parametrize(
    ("setting", "device", "expected"),
    [("auto", "cuda", True), ("auto", "cpu", False), (True, "cpu", True), (False, "cuda", False)],
)
def test_auto_compiles_on_cuda_only_and_true_or_false_force_it(setting, device, expected):
    assert compile_wanted(setting, device) is expected


def test_auto_leaves_a_cpu_embedder_eager_and_true_compiles_its_neobert_blocks(neobert_embedder):
    eager, compiled = load_embedder(str(neobert_embedder)), load_embedder(str(neobert_embedder))
    assert compile_for_inference(eager, "auto") is False
    assert compile_for_inference(compiled, True) is True
    blocks = [[b.compiled for b in m[0].auto_model.transformer_encoder] for m in (eager, compiled)]
    assert blocks == [[None] * 2, ["inductor"] * 2]


def test_compiled_neobert_encode_compiles_a_bounded_set_of_graphs_and_matches_eager(
    neobert_embedder, compiles
):
    """sentence-transformers pads each batch to its longest text: 15 batches of 1 to 8 texts, lengths 3 to 62
    tokens, and a batch of equal lengths (nothing padded) compile at most NEOBERT_GRAPHS graphs."""
    eager, compiled = load_embedder(str(neobert_embedder)), load_embedder(str(neobert_embedder))
    assert compile_for_inference(compiled, True)
    rng = random.Random(0)
    for batch_size in (1, 2, 3, 5, 8):
        batch = texts(rng, 3 * batch_size)
        np.testing.assert_allclose(
            compiled.encode(batch, batch_size=batch_size),
            eager.encode(batch, batch_size=batch_size),
            atol=1e-5,
        )
    compiled.encode(["the same five words here"] * 4, batch_size=4)
    assert 0 < compiles() <= NEOBERT_GRAPHS


@pytest.fixture(scope="module")
def bert_embedder(tmp_path_factory, minilm_path):
    """A tiny random BERT (2 x 32) with MiniLM's tokenizer as a sentence-transformers directory: an encoder
    other than NeoBERT, compiled whole and run padded by the server."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    root = tmp_path_factory.mktemp("bert-embedder")
    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    BertModel(BertConfig(**shape)).eval().save_pretrained(root / "backbone")
    AutoTokenizer.from_pretrained(str(minilm_path)).save_pretrained(root / "backbone")
    SentenceTransformer(str(root / "backbone"), device="cpu").save(str(root / "embedder"))
    return root / "embedder"


@pytest.mark.parametrize(("kind", "graphs"), [("neobert", 2), ("bert", 2)])
def test_after_the_servers_warm_up_no_request_batch_compiles_anything(
    kind, graphs, neobert_embedder, bert_embedder, compiles
):
    """The warm-up batches compile every graph the server's runner can need (a NeoBERT packs every batch: one
    graph per compiled region; a BERT compiled whole runs padded: one graph for a single input, one for
    several); requests of any size and length then reuse them and get eager's vectors."""
    path = str(neobert_embedder if kind == "neobert" else bert_embedder)
    eager, compiled = load_embedder(path), load_embedder(path)
    assert compile_for_inference(compiled, True)
    runners = ModelRunner(eager), ModelRunner(compiled)
    info = ModelInfo(eager.tokenizer, eager.max_seq_length, 0, "cpu", "float32", None, None, compiled=True)
    for batch in warm_up_batches(info, budget=4 * eager.max_seq_length):
        runners[1].embed(*packed(batch))
    assert compiles() == graphs
    rng = random.Random(3)
    for count in (1, 2, 5, 1, 9, 3):
        ids = [eager.tokenizer(text)["input_ids"][: eager.max_seq_length] for text in texts(rng, count, 90)]
        expected, served = (runner.embed(*packed(ids)) for runner in runners)
        np.testing.assert_allclose(served, expected, atol=1e-5)
    assert compiles() == graphs


def packed(batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """A batch as the inference process receives it: the ids back to back, and each sequence's length."""
    flat = np.concatenate([np.asarray(row, dtype=np.int32) for row in batch])
    return flat, np.array([len(row) for row in batch], dtype=np.int32)


def test_encode_compiles_on_a_cpu_only_when_told(neobert_embedder, compiles):
    runner = CliRunner()
    for flag, said in (("--compile", "float32, compiled"), ("--no-compile", "(float32)")):
        args = ["encode", "a fox", "a dog", "--model", str(neobert_embedder), "--dtype", "float32", flag]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert said in result.output


def test_compiling_needs_the_torch_backend():
    with pytest.raises(ValidationError, match="--compile needs --backend torch"):
        ServeSettings(backend="onnx", compile=True)
    assert ServeSettings(backend="onnx").compile == "auto"  # auto on ONNX Runtime: nothing to compile


def test_a_compiled_server_says_warming_until_every_warm_up_batch_ran(neobert_embedder, compiles):
    """The port is bound before the compiled model warms up; /health answers 503 `warming` with its progress
    meanwhile, then 200, and the served vectors are eager encode's."""
    settings = ServeSettings(model=str(neobert_embedder), threads=1, dtype="float32", compile=True)
    served = create_app(settings)
    state = served.state.server
    assert state.model.compiled and not state.warm.finished  # nothing warmed before the port is bound
    messages = []
    with serve_in_thread(served) as url:
        deadline = time.monotonic() + 120
        while (response := httpx.get(f"{url}/health")).status_code != 200:
            error = response.json()["error"]
            assert response.status_code == 503 and error["code"] == "warming", response.text
            messages.append(error["message"])
            assert time.monotonic() < deadline, "still warming after 120 s"
            time.sleep(0.05)
        assert messages and "0 of 3 warm-up batches run" in messages[0]
        assert httpx.get(f"{url}/info").json()["compiled"] is True
        body = httpx.post(f"{url}/embed", json={"inputs": WORDS[:5]}, timeout=60).json()
    expected = load_embedder(str(neobert_embedder)).encode(WORDS[:5], normalize_embeddings=True)
    np.testing.assert_allclose(np.array(body), expected, atol=1e-5)


@pytest.mark.slow
def test_inductor_compiles_the_served_neobert_to_the_same_vectors(neobert_embedder, monkeypatch):
    """The real compiler (C++ code generated for this CPU): the packed runner on two graphs, eager's vectors."""
    monkeypatch.delenv(BACKEND_VARIABLE, raising=False)
    torch._dynamo.reset()
    counters.clear()
    eager, compiled = load_embedder(str(neobert_embedder)), load_embedder(str(neobert_embedder))
    assert compile_for_inference(compiled, True)
    runners = ModelRunner(eager), ModelRunner(compiled)
    ids = [eager.tokenizer(text)["input_ids"] for text in texts(random.Random(2), 6)]
    for rows in (ids[:1], ids):
        expected, served = (runner.embed(*packed(rows)) for runner in runners)
        np.testing.assert_allclose(served, expected, atol=1e-4)
    assert counters["stats"]["unique_graphs"] == 2
    torch._dynamo.reset()
