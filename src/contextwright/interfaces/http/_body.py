"""Request bodies are standard JSON: a NaN or an infinity is a 422 naming the field.

Python's `json`, which parses every request body, accepts ``NaN``, ``Infinity``
and ``-Infinity`` (not JSON: RFC 8259 has no such numbers) and reads ``1e400``
as infinity. Such a value would be stored, then answered as ``null`` (pydantic's
responses have no other way to write it) or refused by any other reader. The API
routers use `StandardJSONRoute`, whose request parses the body with
`finite_loads` and answers such a body with `NotStandardJSON` (422, titled
``RequestValidationError`` like every other malformed body, its ``field`` the
path to the number, e.g. ``messages[0].metadata.score``) before the route runs,
so nothing is written. A body that is not JSON at all is FastAPI's own 422, as
before. (The library refuses such numbers too, wherever they would be stored;
this answers first, and for every field the same way.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ...model._checks import NotFinite, finite_loads

__all__ = ["NotStandardJSON", "StandardJSONRoute", "refuse_non_finite"]


class NotStandardJSON(HTTPException):
    """422: the body holds a number standard JSON does not have; ``field`` is where."""

    title = "RequestValidationError"

    def __init__(self, field: str | None, detail: str) -> None:
        super().__init__(422, detail)
        self.field = field


def refuse_non_finite(body: bytes) -> NotStandardJSON:
    """The error for a ``body`` `finite_loads` refused, naming the first such number."""
    stack: list[tuple[tuple[object, ...], Any]] = [((), json.loads(body))]
    while stack:  # depth first, in document order; no recursion (bodies nest deep)
        path, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            field = _field(path)
            return NotStandardJSON(
                field or None,
                f"{field or 'body'}: is {value!r}, which standard JSON cannot hold "
                "(it has no NaN or infinity); send a finite number",
            )
        if isinstance(value, dict):
            stack.extend(((*path, k), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(value))))
    return NotStandardJSON(None, "body: holds a number standard JSON cannot hold")


def _field(path: tuple[object, ...]) -> str:
    """A path as the service names fields (as pydantic's errors): ``messages[0].metadata.score``."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


class _StandardJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = finite_loads(body)
            except NotFinite:
                raise refuse_non_finite(body) from None
        return self._json


class StandardJSONRoute(APIRoute):
    """An API route whose JSON body must be standard JSON (see the module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def standard(request: Request) -> Response:
            return await handler(_StandardJSONRequest(request.scope, request.receive))

        return standard
