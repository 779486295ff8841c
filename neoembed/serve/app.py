"""The routes: OpenAI's /v1/embeddings, TEI-style /embed and /tokenize, /search, /info, /health, /metrics.

Each embedding route checks its input (inputs.py), tokenizes and applies the length rule on a request
thread (backend.py), queues the texts on the batcher and awaits its future, then builds the body on a
request thread. The event loop itself only parses, routes and awaits, so /health never waits on a model.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from neoembed import __version__
from neoembed.errors import InputError
from neoembed.serve.backend import Backend, Prepared, load_model, to_serving_dtype
from neoembed.serve.batcher import Batcher, QueueFullError, ShuttingDownError
from neoembed.serve.errors import APIError, InvalidInput, install_error_handlers
from neoembed.serve.inputs import Inputs, parse_openai_input, parse_texts
from neoembed.serve.metrics import Metrics
from neoembed.serve.middleware import ApiKeyMiddleware, BodyLimitMiddleware, RequestMetricsMiddleware
from neoembed.serve.responses import openai_body, rows_body, shape
from neoembed.serve.schemas import EmbeddingsRequest, EmbedRequest, SearchRequest, TokenizeRequest
from neoembed.serve.search import ServedIndex
from neoembed.serve.settings import DEFAULT_BATCH_TOKENS, ServeSettings

ROUTES = frozenset({"/v1/embeddings", "/embed", "/search", "/tokenize", "/info", "/health", "/metrics"})


def served_name(settings: ServeSettings) -> str:
    """The `model` reported to clients: --served-model-name, else a directory's name, else the name given."""
    if settings.served_model_name:
        return settings.served_model_name
    path = Path(settings.model)
    return path.resolve().name if path.exists() else settings.model


def create_app(settings: ServeSettings, model=None) -> FastAPI:
    """Build the server for `settings`; `model` (a loaded SentenceTransformer) skips loading settings.model.

    Everything that can fail on bad settings (the model, the index, the batch budget) fails here, before
    a port is bound.
    """
    model = model if model is not None else load_model(settings)
    # The index is checked against the model as stored: the fingerprint hashes the weights' bytes, which a
    # bf16/fp16 conversion for serving changes.
    index = ServedIndex(Path(settings.index), model, threads=settings.threads) if settings.index else None
    model = to_serving_dtype(model, settings)
    backend = Backend(model)
    name = served_name(settings)
    budget = settings.max_batch_tokens or max(DEFAULT_BATCH_TOKENS, backend.max_length)
    if budget < backend.max_length:
        raise InputError(
            f"--max-batch-tokens ({budget}) must be at least the max input length ({backend.max_length} "
            "tokens), or a full-length input would fit no batch; raise it or lower --max-input-length",
            param="--max-batch-tokens",
        )
    metrics = Metrics()
    batcher = Batcher(
        backend.embed, max_batch_tokens=budget, max_queue_items=settings.max_queue_items, metrics=metrics
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        try:
            yield
        finally:
            # Uvicorn has already waited for in-flight requests; this drains anything still queued.
            await run_in_threadpool(batcher.close)
            if index is not None:
                index.close()

    app = FastAPI(
        title="neoembed",
        version=__version__,
        summary=f"Embeddings of {name}",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    # Added innermost first: a request meets metrics, then the key check, then the body limit.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics, routes=ROUTES)  # outermost: sees 401s too

    async def embed(inputs: Inputs, *, truncate: bool, field: str) -> tuple[np.ndarray, Prepared]:
        prepared = await run_in_threadpool(backend.prepare, inputs, truncate=truncate, field=field)
        try:
            future = batcher.submit(prepared.texts, prepared.tokens)
        except QueueFullError as err:
            raise APIError(
                429,
                f"The server is busy: {err}. Retry shortly.",
                code="queue_full",
                headers={"Retry-After": "1"},
            ) from err
        except ShuttingDownError as err:
            raise APIError(503, "The server is shutting down.", code="shutting_down") from err
        vectors = await future
        metrics.input_tokens.inc(sum(prepared.tokens))
        metrics.truncations.inc(len(prepared.truncated))
        return vectors, prepared

    def check_dimensions(dimensions: int | None) -> None:
        if dimensions is not None and dimensions > backend.dimension:
            raise InvalidInput(
                f"'dimensions' is {dimensions}, but {name} makes {backend.dimension}-dimensional embeddings.",
                param="dimensions",
                code="invalid_dimensions",
            )

    @app.post("/v1/embeddings")
    async def openai_embeddings(request: EmbeddingsRequest) -> Response:
        inputs = parse_openai_input(request.input, settings.max_client_batch_size)
        check_dimensions(request.dimensions)
        vectors, prepared = await embed(inputs, truncate=settings.truncate, field="input")
        # OpenAI's embeddings are unit vectors, also after `dimensions` truncation.
        body = await run_in_threadpool(
            lambda: openai_body(
                shape(vectors, dimensions=request.dimensions, normalize=True),
                encoding_format=request.encoding_format,
                model=name,
                prompt_tokens=sum(prepared.tokens),
                truncated=prepared.truncated,
            )
        )
        return Response(body, media_type="application/json")

    @app.post("/embed")
    async def tei_embed(request: EmbedRequest) -> Response:
        texts = parse_texts(request.inputs, settings.max_client_batch_size)
        check_dimensions(request.dimensions)
        truncate = settings.truncate if request.truncate is None else request.truncate
        vectors, prepared = await embed(Inputs(texts=texts), truncate=truncate, field="inputs")
        body = await run_in_threadpool(
            lambda: rows_body(shape(vectors, dimensions=request.dimensions, normalize=request.normalize))
        )
        headers = (
            {"X-Truncated-Inputs": ",".join(map(str, prepared.truncated))} if prepared.truncated else None
        )
        return Response(body, media_type="application/json", headers=headers)

    @app.post("/search")
    async def search(request: SearchRequest) -> JSONResponse:
        if index is None:
            raise APIError(
                404, "No index is loaded: start the server with --index DIR to search.", code="no_index"
            )
        queries = parse_texts(request.query, settings.max_client_batch_size, field="query")
        vectors, _ = await embed(Inputs(texts=queries), truncate=settings.truncate, field="query")
        hits = await run_in_threadpool(index.search, vectors, request.k)
        return JSONResponse(
            {"model": name, "results": [{"query": q, "hits": h} for q, h in zip(queries, hits)]}
        )

    @app.post("/tokenize")
    async def tokenize(request: TokenizeRequest) -> JSONResponse:
        texts = parse_texts(request.inputs, settings.max_client_batch_size)
        tokens = await run_in_threadpool(
            backend.tokenize, texts, add_special_tokens=request.add_special_tokens
        )
        return JSONResponse(tokens)

    @app.get("/info")
    async def info() -> dict:
        return {
            "model": name,
            "model_path": settings.model,
            "dimension": backend.dimension,
            "max_input_length": backend.max_length,
            "truncate": settings.truncate,
            "max_batch_tokens": budget,
            "max_client_batch_size": settings.max_client_batch_size,
            "max_queue_items": settings.max_queue_items,
            "device": str(model.device),
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "index": index.info if index is not None else None,
            "version": __version__,
        }

    @app.get("/health")
    async def health() -> dict:
        if not batcher.alive:
            raise APIError(503, "The inference worker is not running.", code="unhealthy")
        return {"status": "ok", "queue_depth": batcher.depth}

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.queue_depth.set(batcher.depth)
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app
