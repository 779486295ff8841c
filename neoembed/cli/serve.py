"""`neoembed serve`: serve an embedder (and optionally an index) over HTTP."""

from __future__ import annotations

from neoembed.cli.options import Flag, options_from
from neoembed.serve import ServeSettings


@options_from(
    ServeSettings,
    flags=[Flag("model", ("--model", "-m")), Flag("api_key", envvar="NEOEMBED_API_KEY")],
)
def serve(settings: ServeSettings) -> None:
    """Serve embeddings: OpenAI-compatible /v1/embeddings, /embed, /search, /tokenize, /info, /health, /metrics."""
    from neoembed.serve import run_server

    run_server(settings)
