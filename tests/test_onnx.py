"""ONNX export: the exported graph embeds as the torch model does, and the server serves it to the openai client."""

import json

import numpy as np
import openai
import pytest

from neoembed.errors import InputError
from neoembed.onnx_backend import export_onnx, load_onnx_embedder

TEXTS = [
    "a",
    "hello world",
    "a much longer sentence, with many more tokens than the others, to pad the batch",
]


@pytest.fixture(scope="module")
def minilm_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx") / "minilm"
    export_onnx("minilm", out, quantize="int8")
    return out


def _torch_and_onnx(model_dir, export_dir, file_name=None):
    from neoembed.embedder import load_embedder

    expected = load_embedder(str(model_dir), device="cpu").encode(TEXTS)
    return expected, load_onnx_embedder(export_dir, file_name=file_name).encode(TEXTS)


def test_minilm_export_embeds_as_torch_and_int8_stays_close(minilm_export, minilm_path):
    expected, got = _torch_and_onnx(minilm_path, minilm_export)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    _, int8 = _torch_and_onnx(minilm_path, minilm_export, "model_qint8.onnx")
    assert (int8 * expected).sum(1).min() > 0.97  # normalised rows: the dot is the cosine
    report = json.loads((minilm_export / "onnx" / "export.json").read_text())
    assert report["files"]["model.onnx"]["max_abs"] < 1e-4


@pytest.mark.faults
def test_an_onnx_export_records_its_vocabulary_and_a_permuted_one_is_refused(minilm_export, tmp_path):
    """An ONNX export writes the vocabulary record contrastive exports write; the export with its vocabulary
    permuted (tokenizer.json's ids moved among its words) is refused at load instead of embedding cat and
    kitten as strangers."""
    import random
    import shutil

    from neoembed.embedder import TOKENIZER_RECORD, EmbedderError

    assert (minilm_export / TOKENIZER_RECORD).is_file()
    cat, kitten = load_onnx_embedder(minilm_export).encode(["cat", "kitten"])
    assert float(cat @ kitten) > 0.6
    export = tmp_path / "export"
    shutil.copytree(minilm_export, export)
    tokenizer = json.loads((export / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    words = [word for word, number in vocab.items() if number >= 1000]  # specials stay
    numbers = [vocab[word] for word in words]
    random.Random(0).shuffle(numbers)
    vocab.update(zip(words, numbers))
    (export / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(
        EmbedderError, match="tokenizer maps tokens to other ids than the one it was exported"
    ):
        load_onnx_embedder(export)


def test_tiny_neobert_exports_on_its_padded_path(neobert_dir, tmp_path):
    export_onnx(str(neobert_dir), tmp_path / "out")
    expected, got = _torch_and_onnx(neobert_dir, tmp_path / "out")
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_a_directory_without_an_export_is_a_clear_error(neobert_dir):
    with pytest.raises(InputError, match="neoembed export onnx"):
        load_onnx_embedder(neobert_dir)


def test_the_server_serves_the_onnx_backend_to_the_openai_client(minilm_export, minilm_path):
    from neoembed.embedder import load_embedder
    from neoembed.serve import ServeSettings, create_app, serve_in_thread

    settings = ServeSettings(model=str(minilm_export), backend="onnx", threads=1)
    with serve_in_thread(create_app(settings)) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
        response = client.embeddings.create(input=TEXTS, model="anything")
    got = np.array([d.embedding for d in response.data])
    np.testing.assert_allclose(got, load_embedder(str(minilm_path)).encode(TEXTS), atol=1e-4)
