"""The store contract (`contextwright.testing.StoreContract`), run for every backend here.

SQLite runs on a real file in a temporary directory; the in-memory backend is the
public test double. A PostgreSQL backend adds one subclass.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from contextwright.stores import Backend, SQLiteBackend
from contextwright.testing import MemoryBackend, StoreContract


class TestSQLiteBackend(StoreContract):
    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        return SQLiteBackend(directory / "contract.db", clock=clock).backend()


class TestMemoryBackend(StoreContract):
    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        return MemoryBackend(clock=clock).backend()
