"""Scale-out on the engines users run, on CPU: DeepSpeed ZeRO-2 (its CPU accelerator) against DDP, two torchrun
agents (c10d rendezvous on localhost) against one process, and an elastic resume on fewer ranks.

Every run here is a real `neoembed pretrain` or `neoembed contrastive` under torchrun or DeepSpeed's launcher
environment, over gloo. They take minutes, so they are marked slow (`pytest -m slow`); docs/scale.md holds
the figures they check.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from test_contrastive import records, tiny_encoder_dir, write_build
from test_pretrain_run import tiny_recipe

ROOT = Path(__file__).resolve().parents[1]
ZERO2 = "deepspeed-zero2.json"
STEPS = 20

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", **extra}


def torchrun(*args: str, nnodes: int = 1, nproc: int = 2, port: int | None = None) -> list[str]:
    """`torchrun` as a user types it: standalone for one node, c10d rendezvous on localhost for several."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if nnodes == 1:
        command.append("--standalone")
    else:
        command += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
        command += ["--rdzv-id=neoembed-test", "--max-restarts=0"]
    return [*command, "-m", "neoembed", *args]


def run(command: list[str], **kwargs) -> None:
    done = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def losses(run_dir: Path) -> dict[int, float]:
    """The last logged training loss of each step (a resumed run logs its steps after the checkpoint again)."""
    found = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "loss" in record:
            found[record["step"]] = record["loss"]
    return found


def assert_same_curve(a: Path, b: Path, tolerance: float) -> None:
    curve_a, curve_b = losses(a), losses(b)
    assert sorted(curve_a) == sorted(curve_b) == list(range(1, STEPS + 1))
    worst = max(abs(curve_a[s] - curve_b[s]) for s in curve_a)
    assert worst <= tolerance, f"loss curves differ by up to {worst:.2e}"


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process below it (torchrun's workers run in sessions of their own)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, pending = [], [pid]
    while pending:
        tree.append(pending.pop())
        pending += parents.get(tree[-1], [])
    for member in tree:
        with contextlib.suppress(ProcessLookupError):  # gone already
            os.kill(member, signal.SIGKILL)


def kill_after_checkpoint(command: list[str], run_dir: Path, step: int) -> None:
    """Start `command` and SIGKILL it and all its processes once checkpoint `step` is complete."""
    process = subprocess.Popen(command, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = run_dir / f"checkpoint-{step}" / "trainer_state.json"
    deadline = time.monotonic() + 900
    while not state.exists():
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    kill_tree(process.pid)
    process.wait()
    assert not (run_dir / f"checkpoint-{STEPS}").exists(), "the run finished before the kill reached it"


# --- pretraining ----------------------------------------------------------------------------------------


def pretrain_recipe(tmp_path: Path, name: str, **train) -> Path:
    recipe = tiny_recipe(tmp_path, max_steps=STEPS, save_steps=10, log_steps=1, eval_steps=STEPS)
    recipe["train"].update(output_dir=str(tmp_path / name), precision="fp32", keep_checkpoints=3, **train)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_zero2_pretraining_follows_ddp_and_resumes_exactly_after_sigkill(tmp_path):
    pytest.importorskip("deepspeed", reason="DS_BUILD_OPS=0 pip install -c constraints.txt -e '.[deepspeed]'")
    ddp, zero = pretrain_recipe(tmp_path, "ddp"), pretrain_recipe(tmp_path, "zero", deepspeed=ZERO2)
    run(torchrun("pretrain", "--recipe", str(ddp)))
    run(torchrun("pretrain", "--recipe", str(zero)))
    assert (tmp_path / "zero" / f"checkpoint-{STEPS}" / f"global_step{STEPS}").is_dir()  # ZeRO's own format
    assert_same_curve(tmp_path / "ddp", tmp_path / "zero", 1e-3)
    final_ddp = load_file(tmp_path / "ddp" / "final" / "model.safetensors")
    final_zero = load_file(tmp_path / "zero" / "final" / "model.safetensors")
    for name, value in final_ddp.items():
        torch.testing.assert_close(final_zero[name], value, atol=1e-4, rtol=1e-3)

    killed = pretrain_recipe(tmp_path, "killed", deepspeed=ZERO2)
    kill_after_checkpoint(torchrun("pretrain", "--recipe", str(killed)), tmp_path / "killed", 10)
    run(torchrun("pretrain", "--recipe", str(killed)))
    assert losses(tmp_path / "killed") == losses(tmp_path / "zero")  # exactly, step by step
    resumed = load_file(tmp_path / "killed" / "final" / "model.safetensors")
    for name, value in final_zero.items():
        assert torch.equal(resumed[name], value), name


# --- contrastive ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def contrastive_inputs(tmp_path_factory, minilm_path):
    root = tmp_path_factory.mktemp("contrastive")
    build = write_build(root / "build", {"alpha": records("alpha", 96), "beta": records("beta", 48)})
    return build, tiny_encoder_dir(root, minilm_path)


def contrastive_recipe(tmp_path, inputs, name: str, batch_size: int, **train) -> Path:
    build, base = inputs
    recipe = {
        "data": {"path": str(build), "max_negatives": 2},
        "model": {"base": str(base), "max_length": 24},
        "optim": {"warmup_steps": 2, "lr": 1e-3},
        "train": {
            "output_dir": str(tmp_path / name),
            "max_steps": STEPS,
            "batch_size": batch_size,
            "log_steps": 1,
            "save_steps": 10,
            "threads": 1,
            "precision": "fp32",
            **train,
        },
        "eval": {"sets": []},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def exported(tmp_path: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(tmp_path / name / "neobert-embed" / "model.safetensors")


def test_zero2_contrastive_follows_ddp_and_exports_the_same_model(tmp_path, contrastive_inputs):
    pytest.importorskip("deepspeed", reason="DS_BUILD_OPS=0 pip install -c constraints.txt -e '.[deepspeed]'")
    ddp = contrastive_recipe(tmp_path, contrastive_inputs, "ddp", 4)
    zero = contrastive_recipe(tmp_path, contrastive_inputs, "zero", 4, deepspeed=ZERO2)
    run(torchrun("contrastive", "--recipe", str(ddp)))
    run(torchrun("contrastive", "--recipe", str(zero)))
    assert_same_curve(tmp_path / "ddp", tmp_path / "zero", 1e-3)
    for name, value in exported(tmp_path, "ddp").items():
        torch.testing.assert_close(exported(tmp_path, "zero")[name], value, atol=1e-4, rtol=1e-3)


def test_two_torchrun_nodes_train_like_one_process_and_one_node_carries_on_elastically(
    tmp_path, contrastive_inputs
):
    """Two agents of one rank each (cross-device negatives gathered) equal one process with their global
    batch; a node killed after step 10 and a restart on the other alone, with train.elastic, goes on with the
    same global batch (per-rank batch doubled, in GradCache chunks) to the same losses."""
    single = contrastive_recipe(tmp_path, contrastive_inputs, "single", 8)
    run([sys.executable, "-m", "neoembed", "contrastive", "--recipe", str(single)])

    def two_nodes(recipe: Path) -> list[subprocess.Popen]:
        port = free_port()
        return [
            subprocess.Popen(
                torchrun("contrastive", "--recipe", str(recipe), nnodes=2, nproc=1, port=port),
                env=env(),
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for _ in range(2)
        ]

    nodes = contrastive_recipe(tmp_path, contrastive_inputs, "nodes", 4)
    agents = two_nodes(nodes)
    assert [agent.wait(timeout=900) for agent in agents] == [0, 0], agents[0].stderr.read()[-3000:]
    assert_same_curve(tmp_path / "single", tmp_path / "nodes", 1e-4)

    elastic = contrastive_recipe(tmp_path, contrastive_inputs, "elastic", 4, elastic=True)
    agents = two_nodes(elastic)
    state = tmp_path / "elastic" / "checkpoint-10" / "trainer_state.json"
    while not state.exists():
        assert all(agent.poll() is None for agent in agents)
        time.sleep(0.05)
    kill_tree(agents[1].pid)  # one node is lost; the other fails with it
    for agent in agents:
        agent.wait(timeout=300)
    run([sys.executable, "-m", "neoembed", "contrastive", "--recipe", str(elastic)])
    assert_same_curve(tmp_path / "single", tmp_path / "elastic", 1e-4)
    events = [json.loads(line) for line in (tmp_path / "elastic" / "metrics.jsonl").read_text().splitlines()]
    (change,) = [e for e in events if e.get("event") == "elastic_resume"]
    assert change["from"] == {"world_size": 2, "batch_size": 4, "grad_accum": 1, "mini_batch_size": None}
    assert change["to"] == {"world_size": 1, "batch_size": 8, "grad_accum": 1, "mini_batch_size": 4}
