"""Every error leaves the server as JSON in OpenAI's envelope: {"error": {"message", "type", "param", "code"}}.

`InvalidInput` is what the request-checking code raises (a 400 naming the field); `APIError` carries any
other status. The handlers installed here also re-shape FastAPI's validation errors and Starlette's HTTP
errors (404, 405, 413), so no route can answer in another format.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("neoembed.serve")

# OpenAI's error types per status, so clients that switch on `type` behave as they do against OpenAI.
_TYPES = {401: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "server_error"}
# What Starlette says when it cannot decode a body it was told is JSON (it is not UTF-8, say).
_UNPARSABLE_BODY = "There was an error parsing the body"


class APIError(Exception):
    """An error response: HTTP status plus the envelope's fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers


class InvalidInput(APIError):
    """A request the server cannot serve as sent (400); `param` names the offending field."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(400, message, param=param, code=code)


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    envelope = {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "invalid_request_error"),
            "param": param,
            "code": code,
        }
    }
    return JSONResponse(envelope, status_code=status, headers=headers)


def _location(loc: tuple) -> str:
    """('body', 'input', 3) -> 'input[3]'; the leading 'body' is FastAPI's, not the client's."""
    parts = [p for p in loc if p != "body"]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _validation_message(err: RequestValidationError) -> tuple[str, str | None, str | None]:
    first = err.errors()[0]
    kind = first.get("type")
    if kind == "json_invalid":
        detail = first.get("ctx", {}).get("error", "")
        return f"The request body is not valid JSON: {detail}".rstrip(": "), None, "invalid_json"
    param = _location(tuple(first.get("loc", ()))) or None
    if kind == "missing":
        return f"Missing required field '{param}'.", param, "missing_field"
    if param is None:
        if isinstance(first.get("input"), bytes):  # FastAPI leaves non-JSON content types unparsed
            return (
                "The request body must be JSON, sent with Content-Type: application/json.",
                None,
                "invalid_json",
            )
        return "The request body must be a JSON object.", None, "invalid_type"
    return f"Invalid value for '{param}': {first.get('msg', 'invalid')}.", param, "invalid_value"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param, code = _validation_message(exc)
        return error_response(400, message, param=param, code=code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        messages = {
            404: f"Unknown route: {request.method} {request.url.path}",
            405: f"Method {request.method} is not allowed on {request.url.path}",
        }
        codes = {
            404: "unknown_route",
            405: "method_not_allowed",
            408: "request_timeout",
            413: "request_too_large",
        }
        message = messages.get(exc.status_code, str(exc.detail))
        if exc.status_code == 400 and exc.detail == _UNPARSABLE_BODY:
            message, codes[400] = (
                "The request body is not valid JSON: it must be UTF-8 encoded JSON.",
                "invalid_json",
            )
        return error_response(
            exc.status_code, message, code=codes.get(exc.status_code), headers=getattr(exc, "headers", None)
        )
