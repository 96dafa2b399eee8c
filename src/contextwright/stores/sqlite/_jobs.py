"""`SQLiteJobs`: the `Jobs` queue in an `SQLiteStore`'s file, shared by every process that opens it.

The ``jobs`` table (migration ``m007_jobs``) holds pending, running and failed
jobs; a completed job is deleted. Every call is one transaction on the store's
connection (`SQLiteStore._tx`): ``BEGIN IMMEDIATE`` for the writes, so a claim's
"find the oldest due job, mark it mine" cannot interleave with another
process's claim — two workers never hold one job. The rules (dedup, leases,
the ``claim`` fencing token, retries, failed jobs kept) are `Jobs`' (``_jobs.py``).

The queue uses wall-clock time (``clock``, `time.time`): leases are compared
across processes. Calls run through ``run`` (default: a thread of the default
executor), so that a claim waiting for the write lock never blocks an event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ..._errors import ConfigError, LeaseLostError
from .._jobs import STATES, Job, check_claim, check_enqueue, check_fail, check_renew
from . import _rows
from ._store import SQLiteStore

__all__ = ["SQLiteJobs"]

T = TypeVar("T")
_COLUMNS = (
    "id, tenant, kind, key, payload, state, attempts, max_attempts, run_after, owner, "
    "worker, lease_until, claim, error, created_at"
)


def _job(row: Sequence[Any]) -> Job:
    return Job(
        row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], row[6], row[7], row[8],
        row[9], row[10], row[11], row[12], row[13], row[14],
    )  # fmt: skip


def _placeholders(n: int) -> str:
    return ", ".join("?" * n)


class SQLiteJobs:
    """`Jobs` over ``store``'s file (see the module docstring)."""

    def __init__(
        self,
        store: SQLiteStore,
        *,
        clock: Callable[[], float] = time.time,
        run: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    ) -> None:
        if not isinstance(store, SQLiteStore):
            raise ConfigError(f"store must be an SQLiteStore, got {type(store).__name__}")
        self.store = store
        self.clock = clock
        self._runner = run

    def __repr__(self) -> str:
        return f"SQLiteJobs({self.store.path!r})"

    async def _run(self, call: Callable[[], T]) -> T:
        if self._runner is not None:
            result: T = await self._runner(call)
            return result
        return await asyncio.to_thread(call)

    def _tx(self, write: bool) -> Any:
        return self.store._tx(write, _rows.EVERY_TENANT)

    # -- the sync bodies (one transaction each) --------------------------------------

    def enqueue_now(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5, owner: str | None = None,
    ) -> Job:  # fmt: skip
        """`enqueue` on the calling thread."""
        body = check_enqueue(kind, key, payload, tenant, run_after, max_attempts)
        if owner is not None:
            _rows.name(owner, "owner")
        with self._tx(True) as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM jobs WHERE tenant = ? AND kind = ? AND key = ? "
                "AND state IN ('pending', 'running')",
                (tenant, kind, key),
            ).fetchone()
            if row is None:
                now = self.clock()
                row = conn.execute(
                    "INSERT INTO jobs (tenant, kind, key, payload, state, max_attempts, run_after, "
                    "owner, created_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?) "
                    f"RETURNING {_COLUMNS}",
                    (tenant, kind, key, body, max_attempts, now + run_after, owner, now),
                ).fetchone()
        return _job(row)

    def _claim(self, kinds: tuple[str, ...], worker: str, lease: float) -> Job | None:
        marks = _placeholders(len(kinds))
        with self._tx(True) as conn:
            while True:
                now = self.clock()
                row = conn.execute(
                    f"SELECT id, state, attempts, max_attempts, worker FROM jobs "
                    f"WHERE kind IN ({marks}) AND ((state = 'pending' AND run_after <= ? AND "
                    "(owner IS NULL OR owner = ? OR run_after <= ?)) "
                    "OR (state = 'running' AND lease_until <= ?)) ORDER BY run_after, id LIMIT 1",
                    (*kinds, now, worker, now - lease, now),
                ).fetchone()
                if row is None:
                    return None
                job_id, state, attempts, most, holder = row
                if state == "running" and attempts >= most:
                    # taken over as often as it may be tried: its workers die on it
                    conn.execute(
                        "UPDATE jobs SET state = 'failed', worker = NULL, lease_until = NULL, "
                        "error = coalesce(error, ?) WHERE id = ?",
                        (f"lease of worker {holder!r} ran out {attempts} time(s)", job_id),
                    )
                    continue
                taken = conn.execute(
                    "UPDATE jobs SET state = 'running', attempts = attempts + 1, worker = ?, "
                    f"lease_until = ?, claim = claim + 1 WHERE id = ? RETURNING {_COLUMNS}",
                    (worker, now + lease, job_id),
                ).fetchone()
                return _job(taken)

    def _renew(self, job: Job, lease: float) -> bool:
        with self._tx(True) as conn:
            done = conn.execute(
                "UPDATE jobs SET lease_until = ? WHERE id = ? AND claim = ? AND state = 'running'",
                (self.clock() + lease, job.id, job.claim),
            )
            return bool(done.rowcount == 1)

    def _complete(self, job: Job) -> None:
        with self._tx(True) as conn:
            done = conn.execute(
                "DELETE FROM jobs WHERE id = ? AND claim = ? AND state = 'running'",
                (job.id, job.claim),
            )
            if done.rowcount != 1:
                raise LeaseLostError(job.id, job.worker or "")

    def _fail(self, job: Job, error: str, retry_in: float) -> Job:
        with self._tx(True) as conn:
            row = conn.execute(
                "UPDATE jobs SET state = CASE WHEN attempts >= max_attempts THEN 'failed' "
                "ELSE 'pending' END, run_after = CASE WHEN attempts >= max_attempts "
                "THEN run_after ELSE ? END, worker = NULL, lease_until = NULL, error = ? "
                f"WHERE id = ? AND claim = ? AND state = 'running' RETURNING {_COLUMNS}",
                (self.clock() + retry_in, error, job.id, job.claim),
            ).fetchone()
            if row is None:
                raise LeaseLostError(job.id, job.worker or "")
        return _job(row)

    def _jobs(self, tenant: str | None, state: str | None, kind: str | None) -> list[Job]:
        where, params = [], []
        for column, value in (("tenant", tenant), ("state", state), ("kind", kind)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._tx(False) as conn:
            return [_job(r) for r in conn.execute(sql + " ORDER BY id", params).fetchall()]

    def _next_due(self, kinds: tuple[str, ...], worker: str, lease: float) -> float | None:
        marks = _placeholders(len(kinds))
        with self._tx(False) as conn:
            (due,) = conn.execute(
                "SELECT min(CASE WHEN state = 'running' THEN lease_until "
                "WHEN owner IS NULL OR owner = ? THEN run_after ELSE run_after + ? END) "
                f"FROM jobs WHERE kind IN ({marks}) AND state IN ('pending', 'running')",
                (worker, lease, *kinds),
            ).fetchone()
        return None if due is None else float(due)

    def _active(self, ids: list[int]) -> set[int]:
        found: set[int] = set()
        with self._tx(False) as conn:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                found.update(
                    i
                    for (i,) in conn.execute(
                        f"SELECT id FROM jobs WHERE id IN ({_placeholders(len(chunk))}) "
                        "AND state IN ('pending', 'running')",
                        chunk,
                    )
                )
        return found

    # -- the `Jobs` role ---------------------------------------------------------------

    async def enqueue(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5, owner: str | None = None,
    ) -> Job:  # fmt: skip
        check_enqueue(kind, key, payload, tenant, run_after, max_attempts)
        return await self._run(
            lambda: self.enqueue_now(
                kind, key, payload, tenant=tenant, run_after=run_after,
                max_attempts=max_attempts, owner=owner,
            )
        )  # fmt: skip

    async def claim(self, kinds: Sequence[str], *, worker: str, lease: float) -> Job | None:
        names = check_claim(kinds, worker, lease)
        if not names:
            return None
        return await self._run(lambda: self._claim(names, worker, float(lease)))

    async def renew(self, job: Job, lease: float) -> bool:
        seconds = check_renew(job, lease)
        return await self._run(lambda: self._renew(job, seconds))

    async def complete(self, job: Job) -> None:
        check_renew(job, 1.0)
        await self._run(lambda: self._complete(job))

    async def fail(self, job: Job, error: str, *, retry_in: float) -> Job:
        delay = check_fail(job, error, retry_in)
        return await self._run(lambda: self._fail(job, error, delay))

    async def jobs(
        self, *, tenant: str | None = None, state: str | None = None, kind: str | None = None
    ) -> list[Job]:
        if state is not None and state not in STATES:
            raise ConfigError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        return await self._run(lambda: self._jobs(tenant, state, kind))

    async def next_due(self, kinds: Sequence[str], *, worker: str, lease: float) -> float | None:
        names = check_claim(kinds, worker, lease)
        if not names:
            return None
        return await self._run(lambda: self._next_due(names, worker, float(lease)))

    async def active(self, ids: Iterable[int]) -> set[int]:
        wanted = sorted(set(ids))
        if not wanted:
            return set()
        return await self._run(lambda: self._active(wanted))
