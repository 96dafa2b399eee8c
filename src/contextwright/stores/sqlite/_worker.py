"""What the memory and the knowledge stores share: their database and their lifetime.

Both open an `SQLiteStore` (or borrow the caller's, which they then leave open),
answer async callers on one worker thread of their own — SQLite work is short
but must not run on the event loop — and close idempotently, also as context
managers. Subclasses call `_open` first in ``__init__`` and may override
`_release` to drop caches when closed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TypeVar

from ..._errors import StoreError
from .. import SQLiteStore

__all__ = ["WorkerStore"]

R = TypeVar("R")
W = TypeVar("W", bound="WorkerStore")


class WorkerStore:
    """Base of `SQLiteMemoryStore` and `SQLiteKnowledgeStore`; see the module docstring."""

    thread_name = "contextwright-store"
    db: SQLiteStore

    def _open(
        self, path_or_store: str | os.PathLike[str] | SQLiteStore, clock: Callable[[], float]
    ) -> None:
        if isinstance(path_or_store, SQLiteStore):
            self.db, self._owns_db = path_or_store, False
        else:
            self.db, self._owns_db = SQLiteStore(path_or_store, clock=clock), True
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    def _abandon(self) -> None:
        """Undo `_open` when the constructor fails after it."""
        if self._owns_db:
            self.db.close()

    async def _run(self, call: Callable[[], R]) -> R:
        """``call()`` on this store's worker thread."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=self.thread_name)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _release(self) -> None:
        """Drop what the subclass caches (called once, by `close`)."""

    def close(self) -> None:
        """Stop the worker; close the database if this store opened it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._owns_db:
            self.db.close()
        self._release()

    def __enter__(self: W) -> W:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
