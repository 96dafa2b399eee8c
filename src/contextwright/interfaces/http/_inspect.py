"""The inspector page: ``GET /inspect`` and its script and style sheet (``/inspect/static/``).

The page is plain HTML with one JavaScript file and one style sheet, shipped as
package data in ``static/`` (no front-end build step, nothing from a CDN: it
works offline). It reads everything through the same ``/v1`` API and keys as any
client: it asks for a key (kept in the tab's ``sessionStorage``, sent as
``Authorization: Bearer``, never put in a URL), or asks nothing when the server
runs ``--insecure-single-tenant``. The page itself holds no data, so it needs no
key; its routes stay out of the OpenAPI document.

Every answer carries a strict Content-Security-Policy: scripts and styles from
this origin only (no inline script or style, no ``eval``), requests to this
origin only, no frames, no form submission (the key form is handled by the
script, so a key can never land in a URL). The script builds the DOM with
``textContent``; text from users, tools and memories is never parsed as HTML.
"""

from __future__ import annotations

import functools
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from .._host_parts import NotFoundError

__all__ = ["CSP", "router"]

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
ASSETS = {
    "inspect.js": "text/javascript; charset=utf-8",
    "inspect.css": "text/css; charset=utf-8",
}

router = APIRouter(include_in_schema=False)


@functools.cache
def _asset(name: str) -> bytes:
    return (
        resources.files(__name__.rpartition(".")[0]).joinpath("static").joinpath(name).read_bytes()
    )


@router.get("/inspect")
async def inspect_page() -> Response:
    """The inspector (HTML; the data comes from the ``/v1`` API with the user's key)."""
    return Response(_asset("inspect.html"), media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/inspect/static/{name}")
async def inspect_asset(name: str) -> Response:
    """The page's script or style sheet (404 for any other name)."""
    media = ASSETS.get(name)
    if media is None:
        raise NotFoundError("asset", name)
    return Response(_asset(name), media_type=media, headers=HEADERS)
