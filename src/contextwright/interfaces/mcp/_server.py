"""The MCP server's assembly: the SDK's `MCPServer`, its lifespan, its two transports.

`create_server` makes an `MCPServer` whose lifespan opens the shared `Host` (the
operations the HTTP service uses too) on ``settings.db`` and closes it at the
end; the tools and resources (`_tools`) find it through `Running`. Nothing of a
conversation is kept here: servers are thin (docs/architecture.md, Many
workers), so several can run on one PostgreSQL database behind a load balancer.

Transports: ``stdio`` serves one local client (Claude Desktop, Claude Code) as the
tenant ``settings.tenant``. ``http`` is the SDK's streamable HTTP in stateless
mode with JSON responses (every POST stands alone, so any worker can answer
it) behind `KeyGate`: each request's tenant comes from its key, and a request
without a valid key is answered 401 before the MCP app reads it. `http_app`
returns that ASGI app and `uvicorn_server` a uvicorn server of it (the tests
run one on a bound socket); `serve` runs either transport until it ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..._errors import MissingDependencyError
from ._gate import TENANT, KeyGate

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from .._host import Host

__all__ = [
    "Running", "Settings", "create_server", "http_app", "serve", "tenant_of", "uvicorn_server",
]  # fmt: skip

NAME = "contextwright"
INSTRUCTIONS = """\
contextwright keeps conversations in a store and builds, under a token budget, the
context a model should see for the next turn: system prompt, a rolling summary of
older turns, the recent turns, memories and knowledge that match the new message.
Typical loop: build_context(conversation, user message) -> call your model with the
returned request -> append_messages(conversation, [the assistant's reply]).
Use recall to quote exact old turns the summary replaced, add_memory/search_memory
for long-lived facts about a user, compact(preview=true) to see what compaction would
do. Resources: contextwright://conversations/{id}/summary and .../receipt (the last
build's receipt: what went into the prompt, what was dropped, and why)."""


@dataclass(frozen=True)
class Settings:
    """What ``contextwright mcp`` was given (`_cli`)."""

    db: str | None = None
    model: str | None = None
    budget: int | None = None
    tenant: str = "default"
    transport: Literal["stdio", "http"] = "stdio"
    host: str = "127.0.0.1"
    port: int = 8765


@dataclass
class Running:
    """The server's live state: the open `Host` (None outside the lifespan) and its settings."""

    settings: Settings
    host: Host | None = field(default=None)

    def require_host(self) -> Host:
        if self.host is None:
            raise RuntimeError(
                "the MCP server is not running (its lifespan has not opened the store)"
            )
        return self.host


def _mcpserver() -> type[MCPServer[Any]]:
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise MissingDependencyError("mcp", "mcp", "the MCP server") from exc
    return MCPServer


def tenant_of(running: Running, request: Any) -> str:
    """The tenant a tool call acts for: the key's over HTTP, ``--tenant`` over stdio.

    ``request`` is the HTTP request the call came in (the SDK's
    ``ctx.request_context.request``), None over stdio. Fails closed: an HTTP
    request that did not pass the key gate, or a stdio call on a server that
    serves HTTP, raises rather than fall back to a default tenant.
    """
    if request is not None:
        tenant = getattr(request, "scope", {}).get(TENANT)
        if not isinstance(tenant, str):
            raise PermissionError("this request carries no verified key")
        return tenant
    if running.settings.transport != "stdio":
        raise PermissionError("a call without an HTTP request on a server that serves HTTP")
    return running.settings.tenant


def create_server(settings: Settings, host: Host | None = None) -> tuple[MCPServer[Any], Running]:
    """The `MCPServer` with contextwright's tools and resources, and its `Running` state.

    Its lifespan opens a `Host` on ``settings.db`` and closes it at the end, unless
    ``host`` is given (then the caller closes it).
    """
    server_cls = _mcpserver()
    from ._tools import register

    running = Running(settings, host)

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[dict[str, Any]]:
        if host is not None:
            yield {}
            return
        running.host = await _open(settings)
        try:
            yield {}
        finally:
            opened, running.host = running.host, None
            await opened.aclose()

    server = server_cls(
        NAME,
        title="contextwright",
        instructions=INSTRUCTIONS,
        version=_version(),
        lifespan=lifespan,
        log_level="WARNING",
    )
    register(server, running)
    return server, running


def http_app(settings: Settings) -> Any:
    """The ASGI app of the HTTP transport: the SDK's stateless streamable HTTP behind `KeyGate`."""
    server, running = create_server(settings)
    inner = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        host=settings.host,
    )

    from .._keys import tenant_of as key_tenant  # the HTTP service checks keys the same way

    async def verify(key: str) -> str | None:
        return await key_tenant(running.require_host().keys, key)

    return KeyGate(inner, verify)


def uvicorn_server(settings: Settings) -> Any:
    """A `uvicorn.Server` of `http_app` (run it with ``.run(sockets=...)`` on a bound socket)."""
    import uvicorn

    config = uvicorn.Config(
        http_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        lifespan="on",
    )
    return uvicorn.Server(config)


async def _open(settings: Settings) -> Host:
    from .._host import open_host

    return await open_host(settings.db, model=settings.model, budget=settings.budget)


def serve(settings: Settings) -> None:
    """Run the server over ``settings.transport`` until it ends (stdio) or is stopped (http).

    The store is opened before the server starts, so a wrong ``--db`` (a missing
    folder, a PostgreSQL that is down) fails as one error, not in the SDK's or
    uvicorn's startup.
    """
    _mcpserver()  # without the SDK: one line naming the extra (anyio comes with it)
    import anyio

    if settings.transport == "stdio":

        async def stdio() -> None:
            host = await _open(settings)
            try:
                server, _ = create_server(settings, host)
                await server.run_stdio_async()
            finally:
                await host.aclose()

        anyio.run(stdio)
        return

    async def check() -> None:  # uvicorn's loop opens its own host in the lifespan
        await (await _open(settings)).aclose()

    anyio.run(check)
    uvicorn_server(settings).run()


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("contextwright")
    except metadata.PackageNotFoundError:  # a source tree never installed
        return "0"
