"""Errors as RFC 9457 problem details (``application/problem+json``).

Every error the service answers is one shape: ``type`` (``urn:contextwright:error:<Name>``),
``title`` (the library's error class, e.g. ``InvalidMessageError``), ``status``,
``detail``, ``instance`` (the path) and ``field`` (the field at fault, when
one is: `InvalidMessageError.where`, or the body location pydantic reports).

=========================================  ======
error                                      status
=========================================  ======
`Unauthorized` (no, bad or revoked key)    401, ``WWW-Authenticate: Bearer``
`NotFoundError` (unknown, or another
tenant's)                                  404
`BodyTooLarge` (over ``--max-body``)       413
`UserError`, `BudgetError`,
`ProviderRuleError`, a malformed body      422 (nothing was written)
`StoreUnavailableError`                    503, ``Retry-After``
`SummaryConflictError`                     409 (retry)
anything else                              500, no detail
=========================================  ======

No detail ever holds a key: the auth errors say what was wrong, never what was sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from ..._errors import (
    BudgetError,
    ContextwrightError,
    InvalidMessageError,
    ProviderRuleError,
    StoreUnavailableError,
    SummaryConflictError,
    UserError,
)
from .._host_parts import NotFoundError

__all__ = ["BodyTooLarge", "Unauthorized", "install", "problem"]

log = logging.getLogger("contextwright.http")
RETRY_AFTER = "5"


class Unauthorized(HTTPException):
    """401: the request has no key, a malformed or unknown one, or a revoked one."""

    def __init__(self, detail: str) -> None:
        super().__init__(401, detail, headers={"WWW-Authenticate": "Bearer"})


class BodyTooLarge(HTTPException):
    """413: the body is over the limit (by its Content-Length, or as it streamed in)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over the limit of {limit} bytes")


def problem(
    status: int,
    title: str,
    detail: str,
    request: Request | None = None,
    *,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": f"urn:contextwright:error:{title}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path if request is not None else None,
    }
    if field is not None:
        body["field"] = field
    return JSONResponse(
        body, status_code=status, headers=headers, media_type="application/problem+json"
    )


def _status_of(exc: ContextwrightError) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, (UserError, BudgetError, ProviderRuleError)):
        return 422
    if isinstance(exc, StoreUnavailableError):
        return 503
    if isinstance(exc, SummaryConflictError):
        return 409
    return 500


def _loc(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body",)] if isinstance(loc, (list, tuple)) else []
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out


def install(app: FastAPI, count_error: Callable[[str], None]) -> None:
    """Answer every error of ``app`` as a problem; ``count_error(name)`` counts each."""

    @app.exception_handler(ContextwrightError)
    async def library_error(request: Request, exc: ContextwrightError) -> JSONResponse:
        status = _status_of(exc)
        name = type(exc).__name__
        count_error(name)
        if status == 500:
            log.error("%s %s failed: %s", request.method, request.url.path, name, exc_info=exc)
            return problem(500, name, "the server failed; see its log", request)
        headers = {"Retry-After": RETRY_AFTER} if status == 503 else None
        field = exc.where if isinstance(exc, (InvalidMessageError, ProviderRuleError)) else None
        return problem(status, name, str(exc), request, field=field or None, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        count_error("RequestValidationError")
        errors = exc.errors()
        first = errors[0] if errors else {}
        field = _loc(first.get("loc", ())) or None
        detail = "; ".join(
            f"{_loc(e.get('loc', ())) or 'body'}: {e.get('msg', '')}" for e in errors
        )
        return problem(
            422, "RequestValidationError", detail or "invalid request", request, field=field
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        status, headers = exc.status_code, dict(exc.headers or {})
        title = type(exc).__name__ if type(exc) is not HTTPException else _phrase(status)
        title = getattr(exc, "title", title)  # NotStandardJSON: a malformed body, as pydantic's
        if status == 400:  # FastAPI's "error parsing the body" (not JSON, not UTF-8)
            status, title = 422, "RequestValidationError"
        if status == 405:  # every method of the path, not only the first route's
            headers["Allow"] = ", ".join(_allowed(app, request.url.path))
        count_error(title)
        field = getattr(exc, "field", None)
        return problem(
            status, title, str(exc.detail), request, field=field, headers=headers or None
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        count_error(type(exc).__name__)
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return problem(500, "InternalError", "the server failed; see its log", request)


def _allowed(app: FastAPI, path: str) -> list[str]:
    """The methods some route of ``app`` answers at ``path`` (as routing itself matches)."""
    allowed = []
    for method in ("DELETE", "GET", "PATCH", "POST", "PUT"):
        scope: dict[str, Any] = {"type": "http", "path": path, "method": method, "headers": []}
        if any(route.matches(scope)[0] == Match.FULL for route in app.routes):
            allowed.append(method)
    return allowed


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.replace(" ", "")
    except ValueError:
        return "HTTPError"
