"""The contract suites (`contextwright.testing`), run for every backend here.

`StoreContract` and `ServiceContract` for the store backends, `JobsContract` for the job queues. SQLite
runs on a real file in a temporary directory; the in-memory ones are the public
test doubles. A PostgreSQL backend adds one subclass of each.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from contextwright.stores import Backend, Jobs, MemoryJobs, SQLiteBackend, SQLiteJobs, SQLiteStore
from contextwright.testing import JobsContract, MemoryBackend, ServiceContract, StoreContract


class TestSQLiteBackend(StoreContract):
    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        return SQLiteBackend(directory / "contract.db", clock=clock).backend()


class TestMemoryBackend(StoreContract):
    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        return MemoryBackend(clock=clock).backend()


class TestSQLiteService(ServiceContract):
    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        return SQLiteBackend(directory / "service.db", clock=clock).backend()


class TestMemoryService(ServiceContract):
    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        return MemoryBackend(clock=clock).backend()


class TestSQLiteJobs(JobsContract):
    def open_jobs(self, directory: Path, clock: Callable[[], float]) -> Jobs:
        return SQLiteJobs(SQLiteStore(directory / "jobs.db"), clock=clock)

    async def close_jobs(self, jobs: Jobs) -> None:
        assert isinstance(jobs, SQLiteJobs)
        jobs.store.close()


class TestMemoryJobs(JobsContract):
    def open_jobs(self, directory: Path, clock: Callable[[], float]) -> Jobs:
        return MemoryJobs(clock=clock)


class TestPostgresJobs(JobsContract):
    """The queue on a fresh database of the test PostgreSQL (tests/pg.py), dropped after."""

    def open_jobs(self, directory: Path, clock: Callable[[], float]) -> Jobs:
        from contextwright.stores.postgres._jobs import PostgresJobs
        from tests import pg

        return PostgresJobs(pg.create_database("cwjobs"), clock=clock)

    async def close_jobs(self, jobs: Jobs) -> None:
        from contextwright.stores.postgres._jobs import PostgresJobs
        from tests import pg

        assert isinstance(jobs, PostgresJobs)
        await jobs.aclose()
        pg.drop_database(jobs._url)


# -- PostgreSQL (a fresh database per test, dropped when the backend closes) -----------------


class _OnPostgres:
    """Opens a `PostgresBackend` on a new database of the test server (tests/pg.py)."""

    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        from contextwright.stores.postgres import PostgresBackend
        from tests import pg

        url = pg.fresh_database()
        self._dropping = url
        return PostgresBackend(url, clock=clock, max_size=4).backend()

    async def close(self, subject: Backend) -> None:
        from tests import pg

        try:
            await subject.aclose()
        finally:
            pg.recycle_database(self._dropping)


class TestPostgresBackend(_OnPostgres, StoreContract):
    pass


class TestPostgresService(_OnPostgres, ServiceContract):
    pass
