"""The FastAPI app: `create_app(settings)`, its lifespan, its middleware and its probes.

The lifespan opens the `Host` (the store named by ``settings.db``) and closes it
at shutdown; the app holds nothing else per conversation (docs/deploy.md:
servers are thin). `app_from_env` is the factory uvicorn imports in each worker when
there are several (``contextwright serve --workers N``).

The edge (`Edge`, pure ASGI, outermost but for the error middleware): refuses a
body over ``max_body`` (413: by its Content-Length before reading, or as it
streams in), counts every request by route template and status, and with
``--insecure-single-tenant`` marks every response with
``X-Contextwright-Insecure``. ``/healthz`` says the process is up, ``/readyz``
that the store answers (503 otherwise), ``/metrics`` is Prometheus' text format.
``/inspect`` is the inspector page (``_inspect.py``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._host import open_host
from ._inspect import router as inspect_router
from ._metrics import CONTENT_TYPE_LATEST, Metrics
from ._models import Status
from ._problems import BodyTooLarge, install, problem
from ._routes_context import router as context_router
from ._routes_conversations import router as conversations_router
from ._routes_memory import router as memory_router
from ._settings import Settings

__all__ = ["INSECURE_HEADER", "app_from_env", "create_app"]

log = logging.getLogger("contextwright.http")
INSECURE_HEADER = "X-Contextwright-Insecure"
WARNING = (
    "contextwright serve: WARNING: --insecure-single-tenant: NO AUTHENTICATION. Anyone who "
    "can reach this port reads and writes every conversation (tenant 'default'). "
    "Use it on your own machine only."
)


class Edge:
    """Body limit, request metrics and the insecure-mode header (see the module docstring)."""

    def __init__(self, app: ASGIApp, limit: int, metrics: Metrics, insecure: bool) -> None:
        self.app, self.limit, self.metrics, self.insecure = app, limit, metrics, insecure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500
        insecure = self.insecure

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if insecure:
                    headers = list(message.get("headers", []))
                    headers.append((INSECURE_HEADER.lower().encode(), b"single-tenant, no auth"))
                    message = {**message, "headers": headers}
            await send(message)

        try:
            length = _content_length(scope)
            if length is not None and length > self.limit:
                self.metrics.error("BodyTooLarge")
                await problem(413, "BodyTooLarge", BodyTooLarge(self.limit).detail)(
                    scope, receive, sending
                )
                return
            seen = 0

            async def receiving() -> Message:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > self.limit:
                        raise BodyTooLarge(self.limit)
                return message

            await self.app(scope, receiving, sending)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "(unmatched)"
            self.metrics.request(scope["method"], path, status, time.perf_counter() - t0)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _version() -> str:
    try:
        return metadata.version("contextwright")
    except metadata.PackageNotFoundError:  # a source tree never installed
        return "0.0.0+source"


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service's app over the store ``settings.db`` names (opened in the lifespan)."""
    settings = settings or Settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.insecure_single_tenant:
            print(WARNING, file=sys.stderr, flush=True)
        host = await open_host(
            settings.db, model=settings.model, budget=settings.budget,
            system_prompt=settings.system_prompt, cache=settings.cache,
        )  # fmt: skip
        app.state.host = host
        try:
            yield
        finally:
            await host.aclose()

    app = FastAPI(
        title="contextwright",
        version=_version(),
        summary="Decides what goes into an LLM prompt under a token budget, and shows its work.",
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    install(app, metrics.error)
    app.include_router(conversations_router)
    app.include_router(context_router)
    app.include_router(memory_router)
    app.include_router(inspect_router)

    @app.get("/healthz", response_model=Status, tags=["probes"])
    async def healthz() -> dict[str, Any]:
        """The process is up (it does not touch the store)."""
        return {"status": "ok"}

    @app.get("/readyz", response_model=Status, tags=["probes"])
    async def readyz(request: Request) -> Any:
        """The store answers; 503 (problem+json, Retry-After) while it does not."""
        await request.app.state.host.ping()
        return {"status": "ready"}

    @app.get(
        "/metrics", tags=["probes"], response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
    )  # fmt: skip
    async def prometheus() -> Response:
        """Prometheus metrics (text format); no label holds tenant data."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.add_middleware(
        Edge, limit=settings.max_body, metrics=metrics, insecure=settings.insecure_single_tenant
    )
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with problems under ``application/problem+json`` only."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        doc = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        for operation in (op for path in doc["paths"].values() for op in path.values()):
            for response in operation.get("responses", {}).values():
                content = response.get("content", {})
                if "application/problem+json" in content and "application/json" in content:
                    content["application/problem+json"] = content.pop("application/json")
        app.openapi_schema = doc
    return app.openapi_schema


def app_from_env() -> FastAPI:
    """The app of one worker of ``contextwright serve --workers N`` (settings: `Settings.from_env`)."""
    return create_app(Settings.from_env())
