"""The inference process: it loads the embedder, then turns batches of token ids into embeddings.

It runs apart from the HTTP process, as text-embeddings-inference keeps its backend apart from its router:
the model's Python-level work (for a small NeoBERT, most of a forward pass is Python dispatching small
tensor ops) and torch's CPU threads then never compete with the event loop for the interpreter lock, so
/health and /metrics answer promptly whatever the model is. This module is the child's side; `backend.py`
is the HTTP process's handle on it.

Batches arrive already tokenized (one flat int32 array plus each sequence's length). A NeoBERT runs them
packed, with `cu_seqlens` (no padding is built at all); other encoders get the padded batch their forward
expects. Either way the token embeddings go through the model's own sentence-transformers modules
(pooling, normalisation, ...), so a served vector equals `SentenceTransformer.encode` of the same text.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from neoembed.errors import InputError
from neoembed.serve.settings import ServeSettings, default_threads

HEARTBEAT_SECONDS = 0.5  # how often this process tells the HTTP process it is alive (`backend` watches)


@dataclass(frozen=True)
class ModelInfo:
    """What the HTTP process needs to know about the loaded model (sent once, after loading)."""

    tokenizer: Any  # the model's transformers tokenizer, as sentence-transformers configured it
    max_length: int  # the longest input, in tokens, that the model takes
    dimension: int
    device: str
    dtype: str
    prompt: str | None  # the model's default prompt, which `encode` prepends to every text
    fingerprint: str | None  # of the weights as stored (before a dtype change); only when asked for
    compiled: bool  # torch.compile runs the encoder: its first batches compile (the server warms it up)


def load_model(settings: ServeSettings):
    """The embedder named by the settings, on its device, in fp32 as stored (see `to_serving_backend`)."""
    from neoembed.embedder import load_embedder

    return load_embedder(settings.model, device=settings.device, max_seq_length=settings.max_input_length)


def to_serving_backend(model, settings: ServeSettings):
    """(model, dtype name): the model on the settings' backend, in its checked dtype: torch in the dtype
    `neoembed.probe` picks and checks, or ONNX Runtime on the export's graph."""
    if settings.backend == "onnx":
        from neoembed.onnx_backend import use_onnx

        return use_onnx(model, settings.model, file_name=settings.onnx_file, threads=settings.threads)
    from neoembed.probe import to_inference_dtype

    return to_inference_dtype(model, settings.dtype)


def default_prompt(model) -> str | None:
    prompt = model.prompts.get(model.default_prompt_name) if model.default_prompt_name else None
    if prompt and any(getattr(module, "include_prompt", True) is False for module in model):
        # encode would also tell the pooling where the prompt ends; the server embeds prompt and text alike.
        raise InputError(
            f"{model.default_prompt_name!r} is a default prompt excluded from pooling (include_prompt=False), "
            "which the server does not support; serve a copy of the model without a default_prompt_name"
        )
    return prompt or None


class ModelRunner:
    """Embeddings of token-id batches, computed as `SentenceTransformer.encode` computes them."""

    def __init__(self, model) -> None:
        import torch

        from neoembed.onnx_backend import OnnxEncoder

        self.model = model.eval()
        transformer = model[0]
        self._encoder = transformer.auto_model
        tokenizer = transformer.tokenizer
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._left_padded = tokenizer.padding_side == "left"
        self._packed = (
            self._encoder.config.model_type == "neobert"
            and not isinstance(self._encoder, OnnxEncoder)  # a graph takes padded inputs and unpads inside
            and self._runs_packed_well(torch)
        )

    def _runs_packed_well(self, torch) -> bool:
        # NeoBERT's packed path uses exact per-sequence attention on CPU and a fused varlen kernel on CUDA
        # in half precision; CUDA in fp32 has no varlen kernel, where the padded SDPA path is faster.
        from neoembed.pretrain.neobert import importable_kernels, varlen_kernel_for

        device_type = self.model.device.type
        kernel = varlen_kernel_for(device_type, self._encoder.dtype, importable_kernels())
        return device_type == "cpu" or kernel != "sdpa_per_sequence"

    def embed(self, flat_ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """float32 rows, one per sequence: `flat_ids` holds the sequences back to back, `lengths` their sizes."""
        import torch

        with torch.inference_mode():
            device = self.model.device
            ids = torch.from_numpy(flat_ids).to(device=device, dtype=torch.long)
            sizes = torch.from_numpy(lengths).to(device=device, dtype=torch.long)
            positions = torch.arange(int(sizes.max()), device=device)
            if self._left_padded:
                mask = positions >= (sizes.max() - sizes)[:, None]
            else:
                mask = positions < sizes[:, None]  # (batch, longest): True at real tokens
            if self._packed:
                cu_seqlens = torch.nn.functional.pad(sizes.cumsum(0), (1, 0)).to(torch.int32)
                states = self._encoder(
                    input_ids=ids, cu_seqlens=cu_seqlens, max_seqlen=mask.shape[1], return_dict=True
                ).last_hidden_state
                # Cast up as `probe.lower_encoder`'s hook does: pooling and normalisation run in fp32.
                tokens = states.new_zeros(*mask.shape, states.shape[-1], dtype=torch.float32)
                tokens[mask] = states.float()
                features = {"token_embeddings": tokens, "attention_mask": mask.long()}
                modules = list(self.model)[1:]  # pooling, normalisation, ...: everything after the encoder
            else:
                padded = torch.full(mask.shape, self._pad_id, dtype=torch.long, device=device)
                padded[mask] = ids
                features = {"input_ids": padded, "attention_mask": mask.long()}
                modules = list(self.model)
            for module in modules:
                features = module(features)
            vectors = features["sentence_embedding"]
            if self.model.truncate_dim is not None:
                vectors = vectors[:, : self.model.truncate_dim]
            return vectors.float().cpu().numpy()


def load_runner(settings: ServeSettings, *, fingerprint: bool) -> tuple[ModelRunner, ModelInfo]:
    """Load the model for serving and describe it (the HTTP process warms it up: `serve.warmup`)."""
    from neoembed.compilation import compile_for_inference
    from neoembed.embedder import model_fingerprint

    model = load_model(settings)
    # The fingerprint hashes the weights' bytes as stored, which a bf16/fp16 conversion for serving changes.
    stored = model_fingerprint(model) if fingerprint else None
    model, dtype = to_serving_backend(model, settings)
    compiled = compile_for_inference(model, settings.compile)
    runner = ModelRunner(model)
    tokenizer = model.tokenizer
    dimension = model.get_embedding_dimension()
    if dimension is None:  # no module declares it: measure it (an eager model; a compiled one compiles here)
        probe = np.asarray(tokenizer("dimension")["input_ids"], dtype=np.int32)
        dimension = runner.embed(probe, np.array([len(probe)], dtype=np.int32)).shape[1]
    info = ModelInfo(
        tokenizer=tokenizer,
        max_length=int(model.max_seq_length),
        dimension=int(dimension),
        device=str(model.device),
        dtype=dtype,
        prompt=default_prompt(model),
        fingerprint=stored,
        compiled=compiled,
    )
    return runner, info


def beat(sock: socket.socket, every: float) -> None:
    """Send a byte every `every` seconds: a thread of its own, so a long batch does not silence it, while a
    stopped or stuck process (the interpreter lock held) falls silent. Once the HTTP process is gone (killed,
    or exited at its shutdown deadline) this process ends too, whether it is loading or mid-batch."""
    while True:
        try:
            sock.send(b".")
        except OSError:
            os._exit(0)
        time.sleep(every)


def main(fd: int, heartbeat_fd: int) -> None:
    """The child's main loop on the connection at file descriptor `fd`: receive the settings, load, report
    ("ready", ModelInfo) or ("error", exception), then serve batches until told to stop (None) or until the
    HTTP process is gone (the connection closes). Heartbeats go to `heartbeat_fd` from the start."""
    # Ctrl-C reaches the whole process group, and a service manager may signal every process of the unit;
    # the HTTP process decides when to stop, after draining its queue, and tells this one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    heartbeat = socket.socket(fileno=heartbeat_fd)
    threading.Thread(target=beat, args=(heartbeat, HEARTBEAT_SECONDS), name="heartbeat", daemon=True).start()
    import torch  # after the first beat: importing it takes seconds on a busy machine

    conn = Connection(fd)
    try:
        settings, fingerprint = conn.recv()
        torch.set_num_threads(settings.threads or default_threads())
        try:
            runner, info = load_runner(settings, fingerprint=fingerprint)
        except Exception as err:  # raised in the HTTP process, where the settings were given
            _send_error(conn, err)
            return
        conn.send(("ready", info))
        while (batch := conn.recv()) is not None:
            try:
                vectors = runner.embed(*batch)
            except Exception as err:  # a failed batch fails its requests, never the process
                _send_error(conn, err)
            else:
                conn.send(("ok", vectors))
    except (EOFError, OSError):  # the HTTP process is gone
        return


def _send_error(conn: Connection, err: Exception) -> None:
    try:
        conn.send(("error", err))
    except OSError:
        raise
    except Exception:  # not picklable (nothing was sent): keep its type's name and message
        conn.send(("error", RuntimeError(f"{type(err).__name__}: {err}")))
