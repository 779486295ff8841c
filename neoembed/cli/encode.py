"""`neoembed encode`: embed texts with any embedder and show their cosine similarities."""

from pathlib import Path

import typer


def encode(
    texts: list[str] = typer.Argument(None, help="Texts to embed (or use --file)."),
    model: str = typer.Option(
        "minilm", help="Embedder: a sentence-transformers directory, hub id, or minilm."
    ),
    file: Path = typer.Option(None, exists=True, dir_okay=False, help="A text file, one text per line."),
    output: Path = typer.Option(None, help="Write the embeddings here (.npy, or .jsonl with the texts)."),
    batch_size: int = typer.Option(32, min=1),
    normalize: bool = typer.Option(True, help="L2-normalise the embeddings."),
):
    """Embed texts and print their cosine-similarity matrix; optionally save the embeddings."""
    from neoembed.cli.encode_files import load_texts, save_embeddings, similarity_table
    from neoembed.embedder import load_embedder
    from neoembed.errors import InputError

    if output is not None and output.suffix not in (".npy", ".jsonl"):
        raise InputError(f"--output {output}: use a .npy or .jsonl file", param="--output")
    try:
        items = load_texts(texts or [], file)
    except UnicodeDecodeError as err:
        raise InputError(f"--file {file} is not UTF-8 text ({err.reason})", param="--file") from err
    if not items:
        raise InputError("give texts as arguments or a non-empty --file", param="--file")
    embedder = load_embedder(model)
    embeddings = embedder.encode(items, batch_size=batch_size, normalize_embeddings=normalize)
    typer.echo(f"{model}: {len(items)} texts -> {embeddings.shape[1]}-dim embeddings")
    if len(items) <= 12:
        typer.echo(similarity_table(items, embeddings))
    if output is not None:
        save_embeddings(output, items, embeddings)
        typer.echo(f"wrote {output}")
