"""Opening PostgreSQL: URL checks, connection pools, and errors translated at the boundary.

Every connection is in autocommit mode with ``search_path`` set to
``contextwright, public`` (our tables, then the extensions'); a write that must be
atomic opens ``conn.transaction()``. psycopg's exceptions become ours here:
an unreachable server is a `StoreUnavailableError` (retry later), a malformed
URL a `ConfigError`, anything else a `StoreError`, the original chained. A
password never appears in a message (`redact`).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..._errors import ConfigError, MissingDependencyError, StoreError, StoreUnavailableError

__all__ = [
    "SCHEMA",
    "is_postgres_url",
    "open_async_pool",
    "open_sync_pool",
    "psycopg",
    "redact",
    "translated",
    "translated_async",
]

SCHEMA = "contextwright"
_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def psycopg() -> ModuleType:
    """The psycopg module, or a `MissingDependencyError` naming the ``postgres`` extra."""
    try:
        importlib.import_module("psycopg_pool")
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise MissingDependencyError("psycopg", "postgres", "a PostgreSQL database") from exc


def is_postgres_url(url: object) -> bool:
    """True for ``postgresql://…`` / ``postgres://…`` (what selects this backend)."""
    return isinstance(url, str) and url.lower().startswith(_SCHEMES)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


def check_url(url: object) -> str:
    """``url`` as psycopg takes it; `ConfigError` if it is not a PostgreSQL URL."""
    if not is_postgres_url(url):
        raise ConfigError(f"db: expected a postgresql://… URL, got {url!r:.80}")
    assert isinstance(url, str)
    if url.lower().startswith("postgresql+psycopg://"):
        url = "postgresql://" + url.split("://", 1)[1]
    pg = psycopg()
    try:
        pg.conninfo.conninfo_to_dict(url)
    except pg.ProgrammingError as exc:
        raise ConfigError(f"db: malformed PostgreSQL URL {redact(url)}: {exc}") from None
    return url


def _translate(exc: BaseException, where: str) -> BaseException:
    pg = psycopg()
    if isinstance(exc, (StoreError, ConfigError)):
        return exc
    name = type(exc).__name__
    if isinstance(exc, pg.OperationalError) or name in ("PoolTimeout", "TooManyRequests"):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
        hint = ""
        if "connection failed" in first or "connecting" in where:
            hint = "; is the server running, and are the host, port, user and password right?"
        return StoreUnavailableError(f"{where}: PostgreSQL is unavailable ({first}){hint}")
    if isinstance(exc, pg.Error):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
        return StoreError(f"{where}: PostgreSQL error {name}: {first}")
    return exc


@contextlib.contextmanager
def translated(where: str) -> Iterator[None]:
    """Re-raise psycopg errors inside the block as contextwright's (see the module docstring)."""
    try:
        yield
    except Exception as exc:
        new = _translate(exc, where)
        if new is exc:
            raise
        raise new from exc


@contextlib.asynccontextmanager
async def translated_async(where: str) -> AsyncIterator[None]:
    """`translated` for async blocks."""
    try:
        yield
    except Exception as exc:
        new = _translate(exc, where)
        if new is exc:
            raise
        raise new from exc


def _configure_sync(conn: Any) -> None:
    conn.execute(f"SET search_path TO {SCHEMA}, public")


async def _configure_async(conn: Any) -> None:
    await conn.execute(f"SET search_path TO {SCHEMA}, public")


def _probe(url: str, timeout: float) -> None:
    """Connect once, to turn a pool timeout into the server's own refusal message."""
    pg = psycopg()
    with translated(f"connecting to {redact(url)}"):
        pg.connect(url, connect_timeout=max(1, int(timeout))).close()


def _pool_options(
    min_size: int, max_size: int, timeout: float, configure: Callable[..., Any]
) -> dict[str, Any]:
    """What both pools are opened with: autocommit, our search path, opened by the caller."""
    return {
        "min_size": min_size, "max_size": max_size, "open": False, "timeout": timeout,
        "kwargs": {"autocommit": True}, "configure": configure,
    }  # fmt: skip


def _refused(url: str, timeout: float, exc: Exception) -> BaseException:
    """The error for a pool that would not open: the server's own refusal if it gives one."""
    _probe(url, timeout)
    return _translate(exc, f"connecting to {redact(url)}")


async def open_async_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 10.0
) -> Any:
    """An open `psycopg_pool.AsyncConnectionPool` on ``url`` (autocommit, our search path)."""
    url = check_url(url)
    psycopg()
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(url, **_pool_options(min_size, max_size, timeout, _configure_async))
    try:
        await pool.open(wait=True, timeout=timeout)
    except Exception as exc:
        await pool.close()
        raise _refused(url, timeout, exc) from exc
    return pool


def open_sync_pool(url: str, *, min_size: int = 1, max_size: int = 4, timeout: float = 10.0) -> Any:
    """An open `psycopg_pool.ConnectionPool` on ``url`` (autocommit, our search path)."""
    url = check_url(url)
    psycopg()
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(url, **_pool_options(min_size, max_size, timeout, _configure_sync))
    try:
        pool.open(wait=True, timeout=timeout)
    except Exception as exc:
        pool.close()
        raise _refused(url, timeout, exc) from exc
    return pool
