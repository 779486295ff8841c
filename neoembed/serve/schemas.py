"""Request and response bodies. The `input`/`inputs` fields are typed Any here and checked in `inputs.py`,
which names the offending item; the other fields are strict so that e.g. "dimensions": "64" is an error, not
a guess."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

_INPUT_DOC = "A string, a list of strings, a list of token ids, or a list of token-id lists."


class EmbeddingsRequest(BaseModel):
    """POST /v1/embeddings, as OpenAI defines it (unknown fields are ignored, as OpenAI does)."""

    model_config = ConfigDict(extra="ignore")

    input: Any = Field(description=_INPUT_DOC)
    model: StrictStr
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = Field(default=None, ge=1)
    user: StrictStr | None = None


class EmbedRequest(BaseModel):
    """POST /embed, as text-embeddings-inference defines it."""

    model_config = ConfigDict(extra="ignore")

    inputs: Any = Field(description="A string or a list of strings.")
    normalize: StrictBool = True
    truncate: StrictBool | None = Field(default=None, description="Defaults to the server's --truncate.")
    dimensions: StrictInt | None = Field(default=None, ge=1)


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    inputs: Any = Field(description="A string or a list of strings.")
    add_special_tokens: StrictBool = True


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    query: Any = Field(description="A string or a list of strings.")
    k: StrictInt = Field(default=10, ge=1, le=1000)


class IndexInfo(BaseModel):
    """The served index, in GET /info."""

    directory: str
    documents: int
    metric: str
    factory: str  # the FAISS factory string
    search_params: dict[str, int]  # the tuned search parameters, e.g. {"nprobe": 8}; {} for exact search


class InfoBody(BaseModel):
    """GET /info: the served model, the server's limits, and the index, if one is loaded."""

    model_config = ConfigDict(protected_namespaces=())  # `model_path`: pydantic < 2.10 reserves `model_`

    model: str
    model_path: str
    dimension: int
    max_input_length: int
    truncate: bool
    max_batch_tokens: int
    max_client_batch_size: int
    max_queue_items: int
    device: str
    dtype: str
    compiled: bool  # torch.compile runs the encoder (--compile)
    index: IndexInfo | None
    version: str


class HealthBody(BaseModel):
    """GET /health."""

    status: Literal["ok"]
    queue_depth: int
