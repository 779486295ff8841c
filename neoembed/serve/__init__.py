"""HTTP embedding server: OpenAI-compatible and text-embeddings-inference-style routes over any embedder.

The server is router + queue + backend, as in text-embeddings-inference. The router (`routes`, over the
state built in `state`) checks each request and tokenizes it once (`tokenization`); the queue (`batcher`)
carries token ids and cuts them into batches by token budget; the backend is a separate inference process
(`backend` is its handle, `worker` its code) that owns the model and embeds the ids.
"""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .app import create_app as create_app
    from .server import (
        run_server as run_server,
        serve_in_thread as serve_in_thread,
    )
    from .settings import ServeSettings as ServeSettings

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
