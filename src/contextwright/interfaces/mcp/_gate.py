"""The key gate of the MCP server over HTTP: no valid key, no MCP.

`KeyGate` is plain ASGI around the SDK's streamable-HTTP app. Every HTTP request
must carry ``Authorization: Bearer KEY``; ``verify`` maps a key to its tenant
(None: unknown, malformed or revoked). A request without one is answered 401
(``WWW-Authenticate: Bearer``, an RFC 9457 problem body) before the MCP app sees
a byte of it, so it can neither read nor write anything. A request with one
carries its tenant to the tools in the ASGI scope (`TENANT`), where
`tenant_of` reads it; the tenant comes from the key alone, never from the body,
the path or an MCP session. A store that cannot be reached to check the key
answers 503 with ``Retry-After``. Lifespan events pass through; anything else
(a websocket) is refused. The key is never logged or echoed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..._errors import StoreUnavailableError

__all__ = ["TENANT", "KeyGate", "bearer_key"]

TENANT = "contextwright.tenant"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
Verify = Callable[[str], Awaitable[str | None]]


def bearer_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key of the first ``Authorization: Bearer KEY`` header, None without one."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, key = value.decode("latin-1").strip().partition(" ")
            key = key.strip()
            return key if scheme.lower() == "bearer" and key else None
    return None


class KeyGate:
    """``app`` behind API keys: 401 without a key ``verify`` accepts, the tenant in the scope with one."""

    def __init__(self, app: App, verify: Verify) -> None:
        self.app = app
        self.verify = verify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await _refuse(send, scope["type"])
            return
        key = bearer_key(scope.get("headers", []))
        try:
            tenant = await self.verify(key) if key is not None else None
        except StoreUnavailableError:
            await _problem(send, 503, "Service Unavailable", "the store is unavailable; retry")
            return
        if tenant is None:
            detail = (
                "the key is not valid (unknown or revoked)"
                if key is not None
                else "a key is required: Authorization: Bearer KEY"
            )
            await _problem(send, 401, "Unauthorized", detail)
            return
        scope[TENANT] = tenant
        await self.app(scope, receive, send)


async def _problem(send: Send, status: int, title: str, detail: str) -> None:
    """An RFC 9457 problem response: 401 asks for a bearer key, 503 to retry shortly."""
    body = json.dumps(
        {"type": "about:blank", "title": title, "status": status, "detail": detail}
    ).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="contextwright"'))
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, kind: str) -> None:
    if kind == "websocket":
        await send({"type": "websocket.close", "code": 1008})
