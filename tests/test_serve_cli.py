"""`neoembed serve` as a user runs it: a subprocess on a loopback port, stopped with SIGTERM."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

NEOEMBED = str(Path(sys.executable).parent / "neoembed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(*args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "NEOEMBED_API_KEY": "from-env"}
    command = [NEOEMBED, "serve", "--port", str(port), "--threads", "1", "--log-level", "warning", *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, f"http://127.0.0.1:{port}"


def wait_healthy(process: subprocess.Popen, base: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        try:
            if httpx.get(f"{base}/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become healthy")


def test_an_api_key_from_a_non_utf8_environment_fails_before_serving(monkeypatch):
    from typer.testing import CliRunner

    from neoembed.cli import app

    # What Python makes of a NEOEMBED_API_KEY whose bytes are not UTF-8: a lone surrogate, which no header
    # can match (every route used to answer 500).
    monkeypatch.setenv("NEOEMBED_API_KEY", "k\udcffey")
    result = CliRunner().invoke(app, ["serve", "--port", "1"])
    assert result.exit_code == 2
    assert "NEOEMBED_API_KEY) must be printable ASCII" in result.output


@pytest.mark.faults
def test_serve_minilm_then_sigterm_finishes_the_request_in_flight():
    process, base = start("--model", "minilm", "--max-batch-tokens", "256")
    try:
        wait_healthy(process, base)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="from-env")  # the key came from the environment
        response = client.embeddings.create(input=["hello", "world"], model="minilm")
        vectors = np.array([d.embedding for d in response.data])
        assert response.model == "minilm" and vectors.shape == (2, 384)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

        texts = [f"sentence {i} still being embedded when the server is told to stop" for i in range(300)]
        result = {}

        def request():
            auth = {"Authorization": "Bearer from-env"}
            result["response"] = httpx.post(
                f"{base}/embed", json={"inputs": texts}, headers=auth, timeout=300
            )

        client_thread = threading.Thread(target=request)
        client_thread.start()
        while httpx.get(f"{base}/health").json()["queue_depth"] == 0:
            assert client_thread.is_alive()
            time.sleep(0.005)
        process.send_signal(signal.SIGTERM)
        client_thread.join()
        assert result["response"].status_code == 200
        assert np.array(result["response"].json()).shape == (300, 384)
        # uvicorn re-raises the signal once it has drained, so the exit status says "terminated by SIGTERM".
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent/model"], "cannot load embedder"),
        (
            ["--max-batch-tokens", "100"],
            "--max-batch-tokens (100) must be at least the max input length (256",
        ),
        (["--max-queue-items", "10"], "--max-queue-items (10) must be at least --max-client-batch-size"),
        (["--dtype", "int8"], "--dtype must be one of"),
        (["--index", "/nonexistent/index"], "--index /nonexistent/index: no such directory"),
        (["--model", ""], "the model name is empty"),
        (["--api-key", "a\tb"], "must be printable ASCII"),
    ],
)
def test_bad_settings_fail_before_serving_with_a_clear_message(args, message):
    from typer.testing import CliRunner

    from neoembed.cli import app

    result = CliRunner().invoke(app, ["serve", "--port", "1", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.faults
def test_a_port_in_use_is_reported_before_serving_is_announced(tmp_path):
    from sentence_transformers import SentenceTransformer

    from neoembed.pretrain.neobert import NeoBERTModel, load_tokenizer, tiny_config

    NeoBERTModel(tiny_config()).save_pretrained(tmp_path / "backbone")
    load_tokenizer(max_length=128).save_pretrained(tmp_path / "backbone")
    SentenceTransformer(str(tmp_path / "backbone"), device="cpu").save(str(tmp_path / "embedder"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [
            NEOEMBED,
            "serve",
            "--model",
            str(tmp_path / "embedder"),
            "--port",
            str(port),
            "--threads",
            "1",
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 2
    assert f"neoembed serve: cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "serving" not in result.stderr + result.stdout
