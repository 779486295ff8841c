"""HTTP embedding server: OpenAI-compatible and text-embeddings-inference-style routes over any embedder.

The server is router + queue + backend, as in text-embeddings-inference. The router (`routes`, over the
state built in `state`) checks each request and tokenizes it once (`tokenization`); the queue (`batcher`)
carries token ids and cuts them into batches by token budget; the backend is a separate inference process
(`backend` is its handle, `worker` its code) that owns the model and embeds the ids.
"""

from neoembed.serve.app import create_app
from neoembed.serve.server import run_server, serve_in_thread
from neoembed.serve.settings import ServeSettings

__all__ = ["ServeSettings", "create_app", "run_server", "serve_in_thread"]
