"""`neoembed export onnx`: an embedder as an ONNX export directory (`neoembed.onnx_backend`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Export an embedder for other runtimes.", no_args_is_help=True)


@app.command("onnx")
def onnx(
    model: Annotated[str, typer.Argument(help="Embedder: a sentence-transformers directory or 'minilm'.")],
    out_dir: Annotated[Path, typer.Argument(help="New directory for the export.")],
    quantize: Annotated[
        str | None, typer.Option(help="int8: also write onnx/model_qint8.onnx (dynamic int8 quantisation).")
    ] = None,
):
    """Write MODEL to OUT_DIR with onnx/model.onnx; serve it with `neoembed serve --backend onnx`."""
    from neoembed.errors import InputError
    from neoembed.onnx_backend import export_onnx

    if quantize not in (None, "int8"):
        raise InputError(f"--quantize {quantize!r}: the only quantisation is int8", param="--quantize")
    export = export_onnx(model, out_dir, quantize="int8" if quantize else None)
    for name, deviation in export.files.items():
        typer.echo(
            f"{out_dir / 'onnx' / name}: max |diff| to torch {deviation.max_abs:.2e}, "
            f"worst cosine {deviation.worst_cosine:.6f}"
        )
