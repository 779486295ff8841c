"""Inference backends side by side: the WordNet probe, the fidelity measures, and `bench encode/serve --backends`."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from neoembed.bench.backends import Probe, fidelity, wordnet_probe
from neoembed.cli import app

runner = CliRunner()


def test_the_probe_queries_are_example_sentences_of_their_own_synset():
    from neoembed.data.wordnet import load_synsets, sample_order

    probe = wordnet_probe(200)
    synsets = sample_order(load_synsets())[:200]
    assert len(probe.documents) == 200 and 0 < len(probe.queries) < 200
    for query, gold in zip(probe.queries, probe.gold):
        assert query == synsets[gold].examples[0]
        assert synsets[gold].gloss in probe.documents[gold]
    assert probe.texts == probe.documents + probe.queries


def test_fidelity_is_perfect_for_equal_vectors_and_sees_a_lost_document():
    rng = np.random.default_rng(0)
    documents = rng.normal(size=(40, 16))
    probe = Probe([f"d{i}" for i in range(40)], ["q0", "q1"], np.array([3, 7]))
    queries = documents[[3, 7]] + 0.01  # each query sits on its own document
    reference = np.vstack([documents, queries])
    same = fidelity(probe, reference, reference * 2.0)  # scale does not matter: cosines
    assert same["worst cosine"] > 1 - 1e-12 and same["neighbour overlap@10"] == 1.0
    assert same["recall@10"] == 1.0 and same["recall@10 change"] == 0.0
    moved = reference.copy()
    moved[3] = -moved[3]  # document 3 now points away from its query
    worse = fidelity(probe, reference, moved)
    assert worse["recall@10"] == 0.5 and worse["recall@10 change"] == -0.5
    assert worse["worst cosine"] < -0.99 and worse["neighbour overlap@10"] < 1.0


def test_bench_encode_backends_times_and_compares_onnx_with_torch(tmp_path):
    args = ["bench", "encode", "--backends", "torch-fp32,onnx-fp32,onnx-int8", "--texts", "64"]
    result = runner.invoke(app, [*args, "--batch-size", "16", "--repeats", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {
        row["backend"]: row for row in json.loads((tmp_path / "encode-backends.json").read_text())["rows"]
    }
    assert list(rows) == ["torch-fp32", "onnx-fp32", "onnx-int8"]
    assert rows["onnx-fp32"]["worst cosine"] > 0.9999 and rows["onnx-fp32"]["recall@10 change"] == 0
    assert 0.9 < rows["onnx-int8"]["worst cosine"] < 1 and rows["onnx-int8"]["texts/s"] > 0
    assert "neighbour overlap@10" in (tmp_path / "encode-backends.md").read_text()


@pytest.mark.slow  # a minute: two backends, each through its fault round; the GPU dry run serves one
def test_bench_serve_backends_serves_each_backend_and_checks_what_it_serves(tmp_path):
    args = ["bench", "serve", "--models", "neobert", "--backends", "torch-fp32,onnx-fp32", "--texts", "32"]
    args += ["--repeats", "1", "--health-requests", "8", "--direct-batch-sizes", "32", "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "serve.json").read_text())
    figures = report["results"][0]["backends"]
    assert list(figures) == ["torch-fp32", "onnx-fp32"]
    assert figures["onnx-fp32"]["vs_fp32_server"] > 0
    for backend in figures.values():
        assert backend["worst cosine"] > 0.9999 and backend["health_probes"] > 0
        assert backend["best_batch"] == 32 and backend["openai_ratio"] > 0  # through the official client
        # the fault round: 2 deaths and a hang, each followed by a new process answering ready
        faults = backend["faults"]
        assert len(faults["restart_s"]) == 2 and 0 < faults["hang_unready_s"] < faults["hang_ready_s"]
    assert "best backend" in result.output and "killed -> ready in at most" in result.output
    assert "through the openai client / encode at its best batch (32)" in result.output


def test_bench_serve_says_when_no_backend_can_run_here(tmp_path):
    from neoembed.precision import resolve_precision

    if resolve_precision("auto", "cpu").bf16_supported:
        pytest.skip("bf16 runs on this CPU: nothing is skipped")
    result = runner.invoke(app, ["bench", "serve", "--backends", "torch-bf16", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "no backend can run here" in result.output and "bf16" in result.output


def test_each_backend_is_served_with_its_own_options_and_torch_beside_onnx_runs_on_the_cpu(tmp_path):
    from neoembed.bench.serve import server_arguments

    assert server_arguments("torch-fp32", "minilm", None, "cpu") == [
        "--model", "minilm", "--dtype", "float32", "--device", "cpu"
    ]  # fmt: skip
    assert server_arguments("torch-bf16", "minilm", None, "cuda")[3:] == ["bfloat16", "--device", "cuda"]
    onnx = server_arguments("onnx-int8", "minilm", tmp_path, "cpu")
    assert onnx == ["--model", str(tmp_path), "--backend", "onnx", "--onnx-file", "model_qint8.onnx"]


def test_a_backend_given_twice_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["bench", "serve", "--backends", "onnx-int8,torch-fp32,onnx-int8"])
    assert result.exit_code != 0 and "onnx-int8 given more than once" in result.output
