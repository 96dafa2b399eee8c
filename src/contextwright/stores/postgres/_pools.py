"""One connection pool per event loop, opened lazily: how `PostgresBackend` connects.

An ``AsyncConnectionPool`` belongs to the event loop it was opened on (its
locks, its worker tasks, its connections' waits). A backend is used from
several loops: the caller's own, the private loop of `Conversations`' sync
facade, the job runner's thread. So the rule is: **each event loop that calls
the backend gets its own pool, opened on that loop at its first call** (the
database is migrated once, before the first pool opens). ``min_size`` and
``max_size`` are per pool.

Closing (`Pools.close`, the backend's ``aclose``): the pool of the running loop
is closed on it; a pool of another loop that is still running is closed on that
loop (waited for a few seconds); a pool whose loop has stopped or closed (a
job runner's thread that ended) cannot run its coroutines any more, so its idle
connections are closed directly. Pools of closed loops are also swept whenever
a new pool opens, so a process that starts many short loops holds no dead ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..._errors import StoreError
from ._connect import open_async_pool, redact

__all__ = ["Pools"]


def _failed(f: asyncio.Future[Any]) -> bool:
    return f.done() and (f.cancelled() or f.exception() is not None)


def _finish(pool: Any) -> None:
    """Close the idle connections of a pool whose loop cannot run it any more."""
    for conn in list(getattr(pool, "_pool", ())):
        with contextlib.suppress(Exception):
            conn.pgconn.finish()
    with contextlib.suppress(Exception):
        pool._closed = True  # nothing may take a connection from it now


class Pools:
    """The pools of one backend, one per event loop (see the module docstring)."""

    def __init__(
        self, url: str, *, min_size: int, max_size: int, prepare: Callable[[], Awaitable[None]]
    ) -> None:
        self.url = url
        self.min_size = min_size
        self.max_size = max_size
        self._prepare = prepare  # run once, before the first pool opens (migrations)
        self._prepared = False
        self._lock = threading.Lock()
        self._pools: dict[asyncio.AbstractEventLoop, asyncio.Future[Any]] = {}
        self.closed = False

    def __repr__(self) -> str:
        return f"Pools({redact(self.url)!r}, {len(self._pools)} open)"

    async def _open(self) -> Any:
        if not self._prepared:
            await self._prepare()
            self._prepared = True
        return await open_async_pool(self.url, min_size=self.min_size, max_size=self.max_size)

    async def pool(self) -> Any:
        """The running loop's pool, opened now if it has none."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.closed:
                raise StoreError(f"the PostgreSQL backend at {redact(self.url)} is closed")
            opening = self._pools.get(loop)
            if opening is None or _failed(opening):
                stale = [(lp, f) for lp, f in self._pools.items() if lp.is_closed()]
                for lp, _ in stale:
                    del self._pools[lp]
                opening = self._pools[loop] = loop.create_task(self._open())
            else:
                stale = []
        for _, f in stale:
            if f.done() and not _failed(f):
                _finish(f.result())
        return await asyncio.shield(opening)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A connection of the running loop's pool, for one call."""
        pool = await self.pool()
        async with pool.connection() as conn:
            yield conn

    async def release_loop(self, timeout: float = 5.0) -> None:
        """Close the running loop's pool, if it has one (a later call here opens another).

        For a loop about to stop (a job runner's thread): its pool's tasks would
        otherwise be left pending on a loop that never runs again.
        """
        with self._lock:
            opening = self._pools.pop(asyncio.get_running_loop(), None)
        if opening is not None:
            with contextlib.suppress(Exception):
                await (await opening).close(timeout)

    async def close(self, timeout: float = 5.0) -> None:
        """Close every pool (idempotent); later calls raise `StoreError`."""
        with self._lock:
            self.closed = True
            pools, self._pools = list(self._pools.items()), {}
        here = asyncio.get_running_loop()
        for loop, opening in pools:
            if loop is here:
                with contextlib.suppress(Exception):
                    pool = await opening
                    await pool.close(timeout)
                continue
            if not opening.done() or _failed(opening):
                continue  # never opened (its loop stopped first): nothing to close
            pool = opening.result()
            if loop.is_running() and not loop.is_closed():
                with contextlib.suppress(Exception):
                    done = asyncio.run_coroutine_threadsafe(pool.close(timeout), loop)
                    await asyncio.wait_for(asyncio.wrap_future(done), timeout + 1)
                    continue
            _finish(pool)
