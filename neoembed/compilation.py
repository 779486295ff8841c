"""When and how an encoder runs through torch.compile: one switch and one decision for training and inference.

Trainers read `train.compile`; the commands that embed (`encode`, `serve`, `index build`, `search`, `mteb-eval`,
`bench encode`) read `--compile/--no-compile`. Both are a `CompileSetting` decided by `compile_wanted`: auto
compiles on CUDA only. NeoBERT compiles each block's work around attention (`compile_layers`); any other
encoder is compiled whole. Either way shapes are dynamic, so a new batch length or size reuses the graphs
already compiled: tests/test_compilation.py counts dynamo's compilations over many batch shapes.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field

CompileSetting = bool | Literal["auto"]
# The field of every command that embeds: its help written once. On the command line a `--compile/--no-compile`
# flag, left out for auto (`cli.options`).
InferenceCompile = Annotated[
    CompileSetting,
    Field(
        description="torch.compile the encoder (NeoBERT: each block's work around attention; any other whole; "
        "dynamic shapes, so batch shapes do not recompile). Default auto: on CUDA, off on CPU, where it does "
        "not pay."
    ),
]

# The torch.compile backend; tests set "aot_eager", which traces and guards (so recompiles) exactly as inductor
# does without generating code, so a compiled server starts in seconds on a CPU.
BACKEND_VARIABLE = "NEOEMBED_COMPILE_BACKEND"


def compile_wanted(setting: CompileSetting, device_type: str) -> bool:
    """A compile setting on a device type. auto compiles on CUDA: on an H200 (docs/benchmarks/gpu.md, 2026-11-28)
    `neoembed pretrain` by default trains at 1.5x the eager figure of 2026-11-26 (197k against 132k tokens/s)
    and the forward runs at 2.2x eager (1.03M against 460k tokens/s at 128 x 512). Not on CPU: the quickstart's pretraining took longer compiled than eager on both CPU
    kinds, compilation included (docs/benchmarks/quickstart.md); true/false force it."""
    return device_type == "cuda" if setting == "auto" else setting


def compile_backend() -> str:
    """torch.compile's backend: inductor, or $NEOEMBED_COMPILE_BACKEND."""
    return os.environ.get(BACKEND_VARIABLE) or "inductor"


def torch_encoder(model):
    """The transformers encoder in `model` (itself, a sentence-transformers model or a classifier holding it);
    None where there is none to compile (an ONNX Runtime graph standing in for it, static embeddings)."""
    from transformers import PreTrainedModel

    return next((m for m in model.modules() if isinstance(m, PreTrainedModel)), None)


def compile_encoder(model) -> None:
    """Compile `model`'s encoder: one that knows how to compile itself (NeoBERT's `compile_layers`: each block's
    work around attention, attention staying a fused kernel call) does so; any other is compiled whole. Shapes
    are dynamic, since batch lengths and sizes vary; the compilation itself waits for the first forward."""
    import torch

    encoder = torch_encoder(model)
    compile_layers = getattr(encoder, "compile_layers", None)
    if compile_layers is not None:
        compile_layers(backend=compile_backend())
    else:
        # `forward` itself, not `Module.compile`: sentence-transformers 6 calls the encoder's `forward` method
        # directly, past the compiled `__call__` that `Module.compile` installs.
        encoder.forward = torch.compile(encoder.forward, dynamic=True, backend=compile_backend())


def compile_for_inference(model, setting: CompileSetting) -> bool:
    """Compile the encoder of `model` (a sentence-transformers model or a bare encoder, in its inference dtype)
    where `setting` wants it on the device it sits on; whether it did. An encoder that is not a torch model
    (ONNX Runtime's) runs as it is."""
    encoder = torch_encoder(model)
    if encoder is None or not compile_wanted(setting, encoder.device.type):
        return False
    compile_encoder(model)
    return True
