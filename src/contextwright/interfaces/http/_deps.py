"""What every route depends on: the `Host` of the app, and the tenant of the request's key.

The tenant comes from the ``Authorization: Bearer KEY`` header alone (`tenant`),
never from a path or a body; with ``--insecure-single-tenant`` every request is
tenant ``"default"``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .._host import Host
from .._keys import tenant_of
from ._problems import Unauthorized

__all__ = ["HostDep", "TenantDep", "bearer", "get_host", "tenant"]

bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="cw_<id>_<secret>",
    description="A key made by `contextwright keys create --tenant T`; it names the tenant.",
)


async def get_host(request: Request) -> Host:
    """The app's `Host` (async: FastAPI would run a plain function on a worker thread)."""
    host: Host = request.app.state.host
    return host


async def tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> str:
    """The tenant of the request's key; 401 without a valid, unrevoked one."""
    if request.app.state.settings.insecure_single_tenant:
        return "default"
    if credentials is None:
        raise Unauthorized("an API key is required: Authorization: Bearer KEY")
    found = await tenant_of((await get_host(request)).keys, credentials.credentials)
    if found is None:
        raise Unauthorized("the API key is not valid (malformed, unknown or revoked)")
    return found


HostDep = Annotated[Host, Depends(get_host)]
TenantDep = Annotated[str, Depends(tenant)]
