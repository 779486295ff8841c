"""`neoembed serve`: serve an embedder (and optionally an index) over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from neoembed.serve.settings import OPENAI_MAX_INPUTS


def serve(
    model: Annotated[
        str, typer.Option("--model", "-m", help="Embedder: directory, hub id, or 'minilm'.")
    ] = "minilm",
    index: Annotated[
        Path | None, typer.Option(help="Index directory to serve on POST /search (built with this model).")
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to bind; 0.0.0.0 to accept remote clients.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="NEOEMBED_API_KEY", help="Require 'Authorization: Bearer KEY' (all but /health, /metrics)."
        ),
    ] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Model name reported to clients.")] = None,
    truncate: Annotated[
        bool,
        typer.Option("--truncate/--no-truncate", help="Truncate over-long inputs instead of refusing them."),
    ] = False,
    max_input_length: Annotated[
        int | None, typer.Option(help="Max tokens per input (default: the model's max_seq_length).")
    ] = None,
    max_batch_tokens: Annotated[
        int | None, typer.Option(help="Padded tokens per batch (default: max(4096, max input length)).")
    ] = None,
    max_queue_items: Annotated[int, typer.Option(help="Queued inputs before requests get 429.")] = 16384,
    max_client_batch_size: Annotated[int, typer.Option(help="Inputs per request.")] = OPENAI_MAX_INPUTS,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body; larger gets 413.")] = 16
    * 1024
    * 1024,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: usable cores).")] = None,
    device: Annotated[
        str | None, typer.Option(help="torch device, e.g. cpu or cuda:0 (default: auto).")
    ] = None,
    dtype: Annotated[
        str, typer.Option(help="auto (fp32 on CPU, bf16/fp16 on GPU), float32, float16 or bfloat16.")
    ] = "auto",
    log_level: Annotated[str, typer.Option(help="uvicorn and server log level.")] = "info",
) -> None:
    """Serve embeddings: OpenAI-compatible /v1/embeddings, /embed, /search, /tokenize, /info, /health, /metrics."""
    from neoembed.embedder import EmbedderError
    from neoembed.serve import ServeSettings, run_server

    try:
        settings = ServeSettings(
            model=model,
            served_model_name=served_model_name,
            index=index,
            host=host,
            port=port,
            api_key=api_key,
            truncate=truncate,
            max_input_length=max_input_length,
            max_batch_tokens=max_batch_tokens,
            max_queue_items=max_queue_items,
            max_client_batch_size=max_client_batch_size,
            max_body_bytes=max_body_bytes,
            threads=threads,
            device=device,
            dtype=dtype,
            log_level=log_level,
        )
        run_server(settings)
    except (EmbedderError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
