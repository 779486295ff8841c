"""ONNX export of any embedder, and loading an export as a `SentenceTransformer` that runs on ONNX Runtime.

An export directory is the embedder's sentence-transformers directory plus `onnx/model.onnx` (and, with int8,
`onnx/model_qint8.onnx`), the layout sentence-transformers' own ONNX backend reads
(`SentenceTransformer(dir, backend="onnx", model_kwargs={"file_name": ...})`).

Why not sentence-transformers' exporter: it exports through optimum-onnx, whose only release (0.1.0) requires
transformers < 4.58 and fails to import against the transformers 5 that neoembed needs. So the encoder is
exported here with `torch.onnx.export` (the TorchScript exporter; the dynamo one needs onnxscript) and int8 is
ONNX Runtime's dynamic quantisation, the same call optimum's `ORTQuantizer` makes. Loading swaps the encoder of
the sentence-transformers model for an ONNX Runtime session and keeps every other module (pooling,
normalisation, ...) as saved, so `encode`, the server's runner and the benchmarks use an export unchanged.
A NeoBERT exports unpadded where that traces (`pretrain.attention.RepaddedBatch`): its linear layers run on the
real tokens only and attention as one padded SDPA per layer.
"""

from __future__ import annotations

import inspect
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from neoembed.errors import InputError
from neoembed.run_files import is_lock_file, one_writer, write_json

log = logging.getLogger(__name__)

UNFINISHED = ".export-unfinished"  # present while an export is being written
ONNX_DIR = "onnx"
FILES = {None: "model.onnx", "int8": "model_qint8.onnx"}
OPSET = 17
# Encoder inputs a tokenizer may produce, in the order the graph takes them.
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
Quantize = Literal["int8"]


class _Encoder(torch.nn.Module):
    """The transformer's encoder as a function of positional tensors, the form `torch.onnx.export` traces."""

    def __init__(self, encoder: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.encoder, self.names = encoder, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.encoder(**dict(zip(self.names, inputs)), return_dict=True).last_hidden_state


def _rms_norm(g, x, normalized_shape, weight, eps):
    """aten::rms_norm in ONNX ops: the TorchScript exporter knows no rms_norm (ONNX has one only from opset 23,
    beyond that exporter), and NeoBERT's norms are RMSNorm. Normalises over the last dimension, as NeoBERT's do."""
    from torch.onnx import symbolic_helper

    eps = symbolic_helper._maybe_get_const(eps, "f")
    eps = torch.tensor(torch.finfo(torch.float32).eps if eps is None else eps, dtype=torch.float32)
    mean_square = g.op("ReduceMean", g.op("Mul", x, x), axes_i=[-1], keepdims_i=1)
    scale = g.op("Sqrt", g.op("Add", mean_square, g.op("Constant", value_t=eps)))
    return g.op("Mul", g.op("Div", x, scale), weight)


def encoder_inputs(model) -> tuple[str, ...]:
    """The tokenizer outputs the model's encoder takes (`token_type_ids` only where its forward has it)."""
    accepted = inspect.signature(model[0].auto_model.forward).parameters
    produced = model.tokenizer("probe")
    return tuple(name for name in INPUT_NAMES if name in accepted and name in produced)


@dataclass
class Deviation:
    """How far an exported graph's embeddings of the probe texts are from the torch model's."""

    max_abs: float
    worst_cosine: float


@dataclass
class OnnxExport:
    """What `export_onnx` wrote (also onnx/export.json): the graphs, each with its deviation from torch."""

    model: str
    inputs: list[str]
    opset: int
    files: dict[str, Deviation]  # file name under onnx/ -> its deviation


def export_onnx(model_name: str, out_dir: Path, *, quantize: Quantize | None = None) -> OnnxExport:
    """Write `model_name` (any name `load_embedder` takes) to `out_dir` as an export directory; return what was
    written and the export's largest deviation from the torch model on the probe texts."""
    out_dir = Path(out_dir)
    with one_writer(out_dir, "export", param="OUT_DIR"):
        unfinished = out_dir / UNFINISHED
        leftovers = [entry for entry in out_dir.iterdir() if not is_lock_file(entry)]
        if leftovers and not unfinished.exists():
            raise InputError(f"{out_dir} is not empty; export into a new directory", param="OUT_DIR")
        for entry in leftovers:  # an export that was stopped part-way: start it again
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        unfinished.touch()
        export = _export(model_name, out_dir, quantize)
        unfinished.unlink()
        return export


def _export(model_name: str, out_dir: Path, quantize: Quantize | None) -> OnnxExport:
    from neoembed.embedder import TOKENIZER_RECORD, load_embedder, require_finite_weights, tokenizer_record
    from neoembed.finite import require_finite
    from neoembed.probe import PROBE_TEXTS, worst_cosine

    model = load_embedder(model_name, device="cpu").eval()
    require_finite_weights(model, what=f"export of {model_name}")
    model.save(str(out_dir))
    write_json(out_dir / TOKENIZER_RECORD, tokenizer_record(out_dir))  # checked by every load
    names = encoder_inputs(model)
    features = model.preprocess(["an example", "a longer example sentence, so that the batch has padding"])
    path = out_dir / ONNX_DIR / FILES[None]
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.register_custom_op_symbolic("aten::rms_norm", _rms_norm, OPSET)
    with torch.inference_mode(False), torch.no_grad():
        torch.onnx.export(
            # eval(): the exporter restores the wrapper's training flag on everything below it afterwards
            _Encoder(model[0].auto_model, names).eval(),
            tuple(features[name] for name in names),
            str(path),
            dynamo=False,
            input_names=list(names),
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "sequence"} for name in (*names, "last_hidden_state")},
            opset_version=OPSET,
        )
    files = [path]
    if quantize == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        files.append(path.with_name(FILES["int8"]))
        quantize_dynamic(path, files[-1], weight_type=QuantType.QInt8, per_channel=True)
    expected = model.encode(PROBE_TEXTS, convert_to_numpy=True)
    deviation = {}
    for file in files:
        vectors = load_onnx_embedder(out_dir, file_name=file.name).encode(PROBE_TEXTS, convert_to_numpy=True)
        require_finite(vectors, what=f"{file.name} on the probe texts")  # the graph itself, int8 included
        deviation[file.name] = Deviation(
            float(np.abs(vectors - expected).max()), worst_cosine(expected, vectors)
        )
    export = OnnxExport(model_name, list(names), OPSET, deviation)
    write_json(path.parent / "export.json", asdict(export))
    return export


def onnx_file(model_dir: Path, file_name: str | None = None) -> Path:
    """The ONNX graph of an export directory: `file_name` under onnx/, default model.onnx."""
    path = Path(model_dir) / ONNX_DIR / (file_name or FILES[None])
    if not path.is_file():
        found = sorted(p.name for p in (Path(model_dir) / ONNX_DIR).glob("*.onnx"))
        hint = f"it has {found}" if found else "export it first: neoembed export onnx MODEL_DIR OUT_DIR"
        raise InputError(f"{model_dir}: no ONNX model {path.name} ({hint})", param="--model")
    return path


class OnnxEncoder(torch.nn.Module):
    """Stands in for a transformer's encoder: the same keyword inputs, `last_hidden_state` computed by ONNX
    Runtime (CPU) from the graph `export_onnx` wrote."""

    def __init__(self, path: Path, config, threads: int | None = None) -> None:
        import onnxruntime as ort

        super().__init__()
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.names = [node.name for node in self.session.get_inputs()]
        self.config = config  # read by the code that asks an encoder for its model type or positions
        self.dtype = torch.float32

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **_ignored):
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        if given["token_type_ids"] is None:
            given["token_type_ids"] = torch.zeros_like(input_ids)
        feeds = {name: given[name].detach().cpu().numpy().astype(np.int64) for name in self.names}
        (states,) = self.session.run(None, feeds)
        return {"last_hidden_state": torch.from_numpy(states).to(input_ids.device)}


def use_onnx(model, model_dir, *, file_name: str | None = None, threads: int | None = None):
    """Swap the encoder of `model` (loaded from the export directory `model_dir`) for the ONNX graph there; the
    other modules stay. Returns the model and the graph's weight dtype (int8 or float32)."""
    path = onnx_file(Path(model_dir), file_name)
    if model.device.type != "cpu":
        raise InputError(f"the ONNX backend runs on the CPU, not {model.device}", param="--device")
    transformer = model[0]
    transformer.model = OnnxEncoder(path, transformer.auto_model.config, threads)
    return model.eval(), "int8" if "qint8" in path.name else "float32"


def load_onnx_embedder(model_dir, *, file_name: str | None = None, threads: int | None = None):
    """The export directory as a CPU `SentenceTransformer` whose encoder runs on ONNX Runtime."""
    from neoembed.embedder import load_embedder

    onnx_file(Path(model_dir), file_name)  # a clear error before loading anything
    return use_onnx(
        load_embedder(str(model_dir), device="cpu"), model_dir, file_name=file_name, threads=threads
    )[0]
