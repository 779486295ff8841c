"""`neoembed encode`: embed texts with any embedder and show their cosine similarities."""

from __future__ import annotations

from typing import Annotated

import typer

from neoembed.cli.encode_files import EncodeSettings
from neoembed.cli.options import options_from


@options_from(EncodeSettings)
def encode(
    settings: EncodeSettings,
    texts: Annotated[list[str] | None, typer.Argument(help="Texts to embed (or use --file).")] = None,
):
    """Embed texts and print their cosine-similarity matrix; optionally save the embeddings."""
    from neoembed.cli.encode_files import load_texts, save_embeddings, similarity_table
    from neoembed.compilation import compile_for_inference
    from neoembed.embedder import load_embedder
    from neoembed.errors import InputError
    from neoembed.finite import require_finite
    from neoembed.probe import to_inference_dtype

    file, output = settings.file, settings.output
    try:
        items = load_texts(texts or [], file)
    except UnicodeDecodeError as err:
        raise InputError(f"--file {file} is not UTF-8 text ({err.reason})", param="--file") from err
    if not items:
        raise InputError("give texts as arguments or a non-empty --file", param="--file")
    embedder, dtype = to_inference_dtype(load_embedder(settings.model), settings.dtype)
    if compile_for_inference(embedder, settings.compile):
        dtype += ", compiled"
    embeddings = embedder.encode(
        items, batch_size=settings.batch_size, normalize_embeddings=settings.normalize
    )
    require_finite(embeddings, what="the texts (counted from 0)")
    typer.echo(f"{settings.model} ({dtype}): {len(items)} texts -> {embeddings.shape[1]}-dim embeddings")
    if len(items) <= 12:
        typer.echo(similarity_table(items, embeddings))
    if output is not None:
        save_embeddings(output, items, embeddings)
        typer.echo(f"wrote {output}")
