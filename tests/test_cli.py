"""The command line: listed verbs, info and encode (the quickstart has tests/test_quickstart.py)."""

import numpy as np
from typer.testing import CliRunner

from neoembed.cli import app

runner = CliRunner()


def test_help_lists_the_working_verbs():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for verb in ("info", "encode", "quickstart", "bench"):
        assert verb in result.output


def test_info_reports_versions_device_and_backends():
    result = runner.invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    assert "torch" in result.output and "transformers" in result.output
    assert "unpadded: sdpa per sequence" in result.output
    assert "neoembed[gpu]" in result.output


def test_encode_prints_similarities_and_saves_embeddings(tmp_path):
    out = tmp_path / "emb.npy"
    texts = ["a dog runs in the park", "a puppy is running on grass", "interest rates rose again"]
    result = runner.invoke(app, ["encode", *texts, "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "384-dim" in result.output
    embeddings = np.load(out)
    assert embeddings.shape == (3, 384)
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    scores = embeddings @ embeddings.T
    assert scores[0, 1] > scores[0, 2] + 0.3, "the real MiniLM puts the two dog sentences together"


def test_encode_rejects_an_unloadable_model(tmp_path):
    result = runner.invoke(app, ["encode", "hello", "--model", str(tmp_path / "missing")])
    assert result.exit_code != 0
    assert "cannot load embedder" in result.output


def test_encode_checks_its_files_before_any_work(tmp_path):
    bad_output = runner.invoke(app, ["encode", "hello", "--output", str(tmp_path / "emb.csv")])
    assert bad_output.exit_code != 0 and ".npy or .jsonl" in bad_output.output
    latin1 = tmp_path / "texts.txt"
    latin1.write_bytes("caf\xe9\n".encode("latin-1"))
    bad_file = runner.invoke(app, ["encode", "--file", str(latin1)])
    assert bad_file.exit_code != 0 and "not UTF-8" in bad_file.output
