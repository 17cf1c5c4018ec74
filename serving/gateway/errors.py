"""One JSON error shape for every failure: ``{"error": {"code", "message", "retriable"}}``.

User input never produces a 500: malformed JSON is a 400, a body that does not fit its model is a
422 naming each bad field by path, and ``WonderError`` subclasses map to their status here (an
actor's ``NotFound`` is still a 404: the ports hand it back as raised; a dead actor is a
retriable 503).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from core.errors import (
    ErrorCode,
    InvalidInput,
    NonRetryableError,
    QuotaExceeded,
    RetryableError,
    Timeout,
    Unavailable,
    WonderError,
)

logger = logging.getLogger("wonder.gateway")

_STATUS_BY_CODE: dict[str, int] = {
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.INVALID_INPUT: 400,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.CONFLICT: 409,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.AGENT_DECLINED: 409,
}

_CODE_BY_STATUS: dict[int, str] = {
    400: ErrorCode.INVALID_INPUT,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.PERMISSION_DENIED,
    404: ErrorCode.NOT_FOUND,
    405: "METHOD_NOT_ALLOWED",
    409: ErrorCode.CONFLICT,
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: ErrorCode.QUOTA_EXCEEDED,
    422: ErrorCode.INVALID_INPUT,
    503: ErrorCode.UNAVAILABLE,
}


def status_for(error: WonderError) -> int:
    """The HTTP status of a ``WonderError``: retryable → 503, business errors by code."""
    if error.code == ErrorCode.QUOTA_EXCEEDED:
        return 429
    if error.retriable:
        return 503
    if error.code in _STATUS_BY_CODE:
        return _STATUS_BY_CODE[error.code]
    return 400 if isinstance(error, NonRetryableError) else 500


def as_wonder_error(exc: BaseException) -> WonderError | None:
    """``exc`` as a ``WonderError``; None for an unexpected error (a bug: a 500).

    The ports the gateway calls turn infrastructure failures (a dead actor, Ray's own errors)
    into retryable ``WonderError``s, so nothing Ray-specific is unwrapped here."""
    if isinstance(exc, WonderError):
        return exc
    if isinstance(exc, TimeoutError):
        return Timeout("the conversation did not answer in time; try again")
    return None


def error_body(error: WonderError, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = error.to_dict()
    if details:
        body["details"] = details
    return {"error": body}


def field_problems(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Pydantic error entries as ``{"path": "body.persona.id", "message": ...}``."""
    return [
        {"path": ".".join(str(part) for part in err.get("loc", ())), "message": err.get("msg", "")}
        for err in errors
    ]


def validation_error(errors: Sequence[Any]) -> tuple[int, dict[str, Any]]:
    """Status and body for rejected input: 400 for unparsable JSON, else 422 with field paths."""
    problems = field_problems(errors)
    if any(err.get("type") == "json_invalid" for err in errors):
        detail: dict[str, Any] = next((e for e in errors if e.get("type") == "json_invalid"), {})
        reason = (detail.get("ctx") or {}).get("error", "invalid JSON")
        return 400, error_body(InvalidInput(f"request body is not valid JSON: {reason}"))
    summary = "; ".join(f"{p['path']}: {p['message']}" for p in problems) or "invalid request"
    return 422, error_body(InvalidInput(summary), problems)


def _json(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(status_code=status, content=body)


async def _on_wonder_error(request: Request, exc: Exception) -> JSONResponse:
    error = as_wonder_error(exc)
    if error is None:
        return await _on_unexpected(request, exc)
    status = status_for(error)
    headers = None
    if isinstance(error, QuotaExceeded):
        headers = {"Retry-After": retry_after(error.retry_after_s)}
    elif status == 503:  # retriable: say when (a burst of new conversations, a restarting actor)
        later = error.retry_after_s if isinstance(error, Unavailable) else None
        headers = {"Retry-After": retry_after(later or 1)}
    return JSONResponse(status_code=status, content=error_body(error), headers=headers)


def retry_after(seconds: float) -> str:
    """``Retry-After`` in whole seconds, rounded up (at least 1)."""
    return str(max(1, math.ceil(seconds)))


async def _on_request_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _json(*validation_error(exc.errors()))


async def _on_model_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ValidationError)
    errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors()]
    return _json(*validation_error(errors))


async def _on_http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _CODE_BY_STATUS.get(exc.status_code, ErrorCode.INTERNAL_ERROR)
    retriable = exc.status_code >= 500
    body = {"error": {"code": str(code), "message": str(exc.detail), "retriable": retriable}}
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = allowed_methods(request)
    return JSONResponse(status_code=exc.status_code, content=body, headers=headers or None)


def allowed_methods(request: Request) -> str:
    """``Allow`` for a 405: the methods of every route at this path (Starlette names only the
    first route it matched, while GET and PUT of one path are often separate routes)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _child = route.matches(request.scope)  # PARTIAL: the path, not the method
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    error = as_wonder_error(exc)
    if error is not None:
        return _json(status_for(error), error_body(error))
    logger.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    internal = RetryableError("internal error", code=ErrorCode.INTERNAL_ERROR)
    return _json(500, error_body(internal))


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure of ``app`` through the one JSON error shape."""
    app.add_exception_handler(WonderError, _on_wonder_error)
    app.add_exception_handler(RequestValidationError, _on_request_validation)
    app.add_exception_handler(ValidationError, _on_model_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(TimeoutError, _on_unexpected)
    app.add_exception_handler(Exception, _on_unexpected)
