"""HTTP embedding server: OpenAI-compatible and text-embeddings-inference-style routes over any embedder.

The server is router + batcher + backend, as in text-embeddings-inference: `app` holds the routes, `batcher`
the worker thread that owns the model and batches by token budget, `backend` the model-side checks and encode.
"""

from neoembed.serve.app import create_app
from neoembed.serve.server import run_server, serve_in_thread
from neoembed.serve.settings import ServeSettings

__all__ = ["ServeSettings", "create_app", "run_server", "serve_in_thread"]
