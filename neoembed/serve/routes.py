"""The routes: OpenAI's /v1/embeddings, TEI-style /embed and /tokenize, /search and its page at /, /info,
/health, /metrics.

Each handler receives the server's state (state.py) as a FastAPI dependency. An embedding route checks its
input (inputs.py), has it tokenized and checked on a request thread, awaits the batcher, and builds the
body on a request thread. The event loop itself only parses, routes and awaits, and the model runs in
another process, so /health and /metrics never wait behind inference.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from importlib.metadata import version
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from neoembed.serve.errors import APIError, InvalidInput
from neoembed.serve.inputs import Inputs, parse_openai_input, parse_texts
from neoembed.serve.responses import openai_body, rows_body, shape
from neoembed.serve.schemas import (
    EmbeddingsRequest,
    EmbedRequest,
    HealthBody,
    InfoBody,
    SearchRequest,
    TokenizeRequest,
)
from neoembed.serve.state import ServerState

router = APIRouter()


def route_paths() -> frozenset[str]:
    """Every path the router serves, read from the router itself: the labels request metrics are filed
    under (any other path counts as "other"), so a new route is counted under its own name."""
    return frozenset(route.path for route in router.routes if isinstance(route, Route))


def server_state(request: Request) -> ServerState:
    return request.app.state.server


State = Annotated[ServerState, Depends(server_state)]


def check_dimensions(state: ServerState, dimensions: int | None) -> None:
    if dimensions is not None and dimensions > state.model.dimension:
        raise InvalidInput(
            f"'dimensions' is {dimensions}, but {state.name} makes {state.model.dimension}-dimensional "
            "embeddings.",
            param="dimensions",
            code="invalid_dimensions",
        )


def check_model(state: ServerState, model: str) -> None:
    if state.settings.strict_model_name and model != state.name:
        raise APIError(
            404,
            f"The model '{model}' does not exist on this server; it serves '{state.name}'.",
            param="model",
            code="model_not_found",
        )


@router.post("/v1/embeddings")
async def openai_embeddings(request: EmbeddingsRequest, http: Request, state: State) -> Response:
    check_model(state, request.model)
    inputs = parse_openai_input(request.input, state.settings.max_client_batch_size)
    check_dimensions(state, request.dimensions)
    vectors, prepared = await state.embed(
        inputs, truncate=state.settings.truncate, field="input", disconnected=http.is_disconnected
    )
    # OpenAI's embeddings are unit vectors, also after `dimensions` truncation.
    body = await run_in_threadpool(
        lambda: openai_body(
            shape(vectors, dimensions=request.dimensions, normalize=True),
            encoding_format=request.encoding_format,
            model=state.name,
            prompt_tokens=prepared.tokens,
            truncated=prepared.truncated,
        )
    )
    return Response(body, media_type="application/json")


@router.post("/embed")
async def tei_embed(request: EmbedRequest, http: Request, state: State) -> Response:
    texts = parse_texts(request.inputs, state.settings.max_client_batch_size)
    check_dimensions(state, request.dimensions)
    truncate = state.settings.truncate if request.truncate is None else request.truncate
    vectors, prepared = await state.embed(
        Inputs(texts=texts), truncate=truncate, field="inputs", disconnected=http.is_disconnected
    )
    body = await run_in_threadpool(
        lambda: rows_body(shape(vectors, dimensions=request.dimensions, normalize=request.normalize))
    )
    headers = {"X-Truncated-Inputs": ",".join(map(str, prepared.truncated))} if prepared.truncated else None
    return Response(body, media_type="application/json", headers=headers)


@router.post("/search")
async def search(request: SearchRequest, http: Request, state: State) -> JSONResponse:
    if state.index is None:
        raise APIError(
            404, "No index is loaded: start the server with --index DIR to search.", code="no_index"
        )
    queries = parse_texts(request.query, state.settings.max_client_batch_size, field="query")
    vectors, _ = await state.embed(
        Inputs(texts=queries),
        truncate=state.settings.truncate,
        field="query",
        disconnected=http.is_disconnected,
    )
    hits = await run_in_threadpool(state.index.search, vectors, request.k)
    return JSONResponse(
        {"model": state.name, "results": [{"query": q, "hits": h} for q, h in zip(queries, hits)]}
    )


@cache
def search_page() -> str:
    """The static search page (package data): a query box calling /search, and /info's model and index."""
    return (resources.files(__package__) / "page" / "search.html").read_text(encoding="utf-8")


@router.get("/", response_class=HTMLResponse)
async def page() -> HTMLResponse:
    return HTMLResponse(search_page())


@router.post("/tokenize")
async def tokenize(request: TokenizeRequest, state: State) -> JSONResponse:
    texts = parse_texts(request.inputs, state.settings.max_client_batch_size)
    tokens = await run_in_threadpool(
        state.tokenizer.tokenize, texts, add_special_tokens=request.add_special_tokens, field="inputs"
    )
    return JSONResponse(tokens)


@router.get("/info")
async def info(state: State) -> InfoBody:
    settings = state.settings
    return InfoBody(
        model=state.name,
        model_path=settings.model,
        dimension=state.model.dimension,
        max_input_length=state.model.max_length,
        truncate=settings.truncate,
        max_batch_tokens=state.batcher.max_batch_tokens,
        max_client_batch_size=settings.max_client_batch_size,
        max_queue_items=settings.max_queue_items,
        device=state.model.device,
        dtype=state.model.dtype,
        compiled=state.model.compiled,
        index=state.index.info if state.index is not None else None,
        version=version("neoembed"),
    )


@router.get("/health")
async def health(state: State) -> HealthBody:
    warm = state.warm
    if not warm.finished and state.failure is None:
        raise APIError(
            503,
            f"Warming up ({warm.progress}); requests wait until it is ready.",
            code="warming",
            headers={"Retry-After": "5"},
        )
    if not state.healthy:
        raise APIError(503, "The inference worker is not running.", code="unhealthy")
    return HealthBody(status="ok", queue_depth=state.batcher.depth)


@router.get("/metrics")
async def prometheus(state: State) -> Response:
    state.metrics.queue_depth.set(state.batcher.depth)
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
