"""What the PostgreSQL memory and knowledge stores share: the pool, the schema, the lifetime.

The twin of ``sqlite/_worker.py``. A store is given a ``postgresql://…`` URL (it
opens a sync `psycopg_pool.ConnectionPool` of its own, `open_sync_pool`, and
closes it) or an open pool to share (left open). On open it applies the pending
migrations (`migrate`, under the advisory lock) or, with ``migrate=False``,
refuses a database that is behind with a `SchemaError`.

Sync calls borrow a pooled connection per call (autocommit; a write opens
``conn.transaction()``), so a store object is safe to share between threads.
The async methods (``search``, ``top``) run the sync ones on a thread pool owned
by the store, as wide as the connection pool: a search is a few short statements
plus numpy, not worth a second, async code path, and the event loop never waits
on the network or the embedding model. psycopg errors leave as `StoreError` /
`StoreUnavailableError` (`translated`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

from ..._errors import ConfigError, SchemaError, StoreError
from ._connect import open_sync_pool, redact, translated
from ._migrations import check_schema, migrate

__all__ = ["PgWorkerStore"]

R = TypeVar("R")
W = TypeVar("W", bound="PgWorkerStore")


class PgWorkerStore:
    """Base of `PostgresMemoryStore` and `PostgresKnowledgeStore`; see the module docstring."""

    thread_name = "contextwright-pg-store"
    where = "PostgreSQL"

    def _open(self, url_or_pool: Any, *, apply_migrations: bool, max_size: int) -> None:
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._owns_pool = isinstance(url_or_pool, str)
        # the URL a job queue for this store's writers opens (None: given a pool)
        self.url: str | None = url_or_pool if self._owns_pool else None
        if self._owns_pool:
            self.where = redact(url_or_pool)
            self._pool = open_sync_pool(url_or_pool, max_size=max_size)
        elif hasattr(url_or_pool, "connection") and hasattr(url_or_pool, "max_size"):
            self._pool = url_or_pool
        else:
            raise ConfigError(
                f"db: expected a postgresql://… URL or a psycopg_pool.ConnectionPool, "
                f"got {type(url_or_pool).__name__}"
            )
        try:
            with translated(f"opening {self.where}"), self._pool.connection() as conn:
                if apply_migrations:
                    migrate(conn)
                elif pending := check_schema(conn):
                    raise SchemaError(
                        f"the database at {self.where} lacks migrations {', '.join(pending)}: "
                        "run `contextwright migrate --db URL` or open with migrate=True"
                    )
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Undo `_open` when the constructor fails after it."""
        self._closed = True
        if self._owns_pool:
            self._pool.close()

    @contextmanager
    def _conn(self, write: bool = False) -> Iterator[Any]:
        """A pooled connection, in a transaction for a write; psycopg errors translated."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        with translated(self.where), self._pool.connection() as conn:
            if write:
                with conn.transaction():
                    yield conn
            else:
                yield conn

    async def _run(self, call: Callable[[], R]) -> R:
        """``call()`` on this store's threads."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        if self._executor is None:
            width = max(1, int(getattr(self._pool, "max_size", 4)))
            self._executor = ThreadPoolExecutor(width, thread_name_prefix=self.thread_name)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def close(self) -> None:
        """Stop the threads; close the pool if this store opened it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._owns_pool:
            self._pool.close()

    def __enter__(self: W) -> W:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
