"""HTTP embedding server: OpenAI-compatible and text-embeddings-inference-style routes over any embedder.

The server is router + queue + backend, as in text-embeddings-inference. The router (`routes`, over the
state built in `state`) checks each request and tokenizes it once (`tokenization`); the queue (`batcher`)
carries token ids and cuts them into batches by token budget; the backend is a separate inference process
(`backend` is its handle, `worker` its code) that owns the model and embeds the ids.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "app": ["create_app"],
        "server": ["run_server", "serve_in_thread"],
        "settings": ["ServeSettings"],
    },
)
