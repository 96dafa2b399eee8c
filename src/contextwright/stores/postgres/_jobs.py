"""`PostgresJobs`: the `Jobs` queue in PostgreSQL, shared by every worker on the database.

The rules (dedup per (tenant, kind, key), leases, the ``claim`` fencing token,
retries, failed jobs kept, the owner's head start) are `Jobs`' (``stores/_jobs.py``)
and the same as `SQLiteJobs`'; the table is migration m003 (``_schema_jobs.py``).
Every call is one transaction. A claim selects the oldest claimable row ``FOR
UPDATE SKIP LOCKED``: claimers never wait for each other and never both get one
job (a row another claimer holds is skipped, and one it has just taken no longer
matches once re-read). An enqueue inserts ``ON CONFLICT DO NOTHING`` against the
partial unique index of active jobs and sends ``pg_notify`` in the same
transaction, so idle workers are woken when the job is committed (`wakeup`, a
`PostgresWakeup`).

Times come from the injected ``clock`` (wall-clock seconds, compared across
workers) and are passed to the server as parameters; the server's own clock is
never read.

Connections: given a pool, the queue uses it and leaves it open (its owner
migrated the database and closes it). Given a URL, it migrates the database
once (in a thread) and opens its own async pool lazily, one per event loop that
calls it (a psycopg async pool belongs to the loop that opened it; a job
runner's thread has its own loop), and `aclose` closes them. `enqueue_now`, the
synchronous enqueue a runner uses from sync code, takes a short connection of
its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from ..._errors import ConfigError, LeaseLostError
from .._jobs import STATES, Job, check_claim, check_enqueue, check_fail, check_renew
from ..sqlite import _rows
from ._connect import (
    SCHEMA,
    check_url,
    open_async_pool,
    psycopg,
    redact,
    translated,
    translated_async,
)
from ._migrations import migrate_url
from ._wakeup import CHANNEL, PostgresWakeup

__all__ = ["PostgresJobs"]

_COLUMNS = (
    "id, tenant, kind, key, payload, state, attempts, max_attempts, run_after, owner, "
    "worker, lease_until, claim, error, created_at"
)
_INSERT = (
    "INSERT INTO jobs (tenant, kind, key, payload, state, max_attempts, run_after, owner, "
    "created_at) VALUES (%s, %s, %s, %s, 'pending', %s, %s, %s, %s) "
    "ON CONFLICT (tenant, kind, key) WHERE state IN ('pending', 'running') DO NOTHING "
    f"RETURNING {_COLUMNS}"
)
_EXISTING = (
    f"SELECT {_COLUMNS} FROM jobs WHERE tenant = %s AND kind = %s AND key = %s "
    "AND state IN ('pending', 'running')"
)
_NOTIFY = "SELECT pg_notify(%s, %s)"
_CLAIMABLE = (
    "SELECT id, state, attempts, max_attempts, worker FROM jobs "
    "WHERE kind = ANY(%(kinds)s) AND ((state = 'pending' AND run_after <= %(now)s AND "
    "(owner IS NULL OR owner = %(worker)s OR run_after <= %(stale)s)) "
    "OR (state = 'running' AND lease_until <= %(now)s)) "
    "ORDER BY run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_GIVE_UP = (
    "UPDATE jobs SET state = 'failed', worker = NULL, lease_until = NULL, "
    "error = coalesce(error, %s) WHERE id = %s"
)
_TAKE = (
    "UPDATE jobs SET state = 'running', attempts = attempts + 1, worker = %s, "
    f"lease_until = %s, claim = claim + 1 WHERE id = %s RETURNING {_COLUMNS}"
)
_RENEW = "UPDATE jobs SET lease_until = %s WHERE id = %s AND claim = %s AND state = 'running'"
_COMPLETE = "DELETE FROM jobs WHERE id = %s AND claim = %s AND state = 'running'"
_FAIL = (
    "UPDATE jobs SET state = CASE WHEN attempts >= max_attempts THEN 'failed' "
    "ELSE 'pending' END, run_after = CASE WHEN attempts >= max_attempts "
    "THEN run_after ELSE %s END, worker = NULL, lease_until = NULL, error = %s "
    f"WHERE id = %s AND claim = %s AND state = 'running' RETURNING {_COLUMNS}"
)
_NEXT_DUE = (
    "SELECT min(CASE WHEN state = 'running' THEN lease_until "
    "WHEN owner IS NULL OR owner = %s THEN run_after ELSE run_after + %s END) "
    "FROM jobs WHERE kind = ANY(%s) AND state IN ('pending', 'running')"
)
_ACTIVE = "SELECT id FROM jobs WHERE id = ANY(%s) AND state IN ('pending', 'running')"


def _no_nul(values: Mapping[str, object]) -> None:
    """PostgreSQL text cannot hold NUL: refuse such a name up front, naming the field."""
    for label, value in values.items():
        if isinstance(value, str) and "\x00" in value:
            raise ConfigError(
                f"{label} must not contain NUL characters (PostgreSQL text cannot hold them)"
            )


def _storable(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The kinds a stored job can have (none holds a NUL: see `_no_nul`)."""
    return tuple(k for k in kinds if "\x00" not in k)


def _job(row: Sequence[Any]) -> Job:
    return Job(
        int(row[0]), row[1], row[2], row[3], json.loads(row[4]), row[5], row[6], row[7], row[8],
        row[9], row[10], row[11], int(row[12]), row[13], row[14],
    )  # fmt: skip


class PostgresJobs:
    """`Jobs` on PostgreSQL (see the module docstring); ``url_or_pool`` is a URL or an open pool."""

    def __init__(self, url_or_pool: Any, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._given: Any = None
        if isinstance(url_or_pool, str):
            self._url: str = check_url(url_or_pool)
            conninfo = self._url
        elif callable(getattr(url_or_pool, "connection", None)):
            self._given = url_or_pool
            self._url = ""
            conninfo = str(getattr(url_or_pool, "conninfo", ""))
        else:
            raise ConfigError(
                f"url_or_pool must be a postgresql:// URL or a psycopg pool, "
                f"got {type(url_or_pool).__name__}"
            )
        self._conninfo = conninfo
        self.wakeup = PostgresWakeup(conninfo)
        self._pools: dict[asyncio.AbstractEventLoop, Any] = {}
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._lock = threading.Lock()
        self._migrated = False

    def __repr__(self) -> str:
        return f"PostgresJobs({redact(self._url) if self._url else self._given!r})"

    # -- connections --------------------------------------------------------------------

    def _migrate_once(self) -> None:
        with self._lock:
            if not self._migrated:
                migrate_url(self._url)
                self._migrated = True

    async def _pool(self) -> Any:
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        with self._lock:
            for old in [lp for lp in self._pools if lp.is_closed()]:
                del self._pools[old]  # its loop is gone, and its connections with it
                self._opening.pop(old, None)
            pool = self._pools.get(loop)
            if pool is not None:
                return pool
            opening = self._opening.setdefault(loop, asyncio.Lock())
        async with opening:
            with self._lock:
                pool = self._pools.get(loop)
            if pool is None:
                await asyncio.to_thread(self._migrate_once)
                pool = await open_async_pool(self._url, min_size=1, max_size=4)
                with self._lock:
                    self._pools[loop] = pool
            return pool

    @contextlib.asynccontextmanager
    async def _tx(self, where: str) -> AsyncIterator[Any]:
        """A connection inside one transaction, psycopg errors translated."""
        pool = await self._pool()
        async with (
            translated_async(f"jobs: {where}"),
            pool.connection() as conn,
            conn.transaction(),
        ):
            yield conn

    async def release_loop(self) -> None:
        """Close the running loop's pool (not a given one); see `Pools.release_loop`."""
        with self._lock:
            pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.close()

    async def aclose(self) -> None:
        """Stop the wake-up listener and close the pools this queue opened (not a given one)."""
        await asyncio.to_thread(self.wakeup.close)
        with self._lock:
            pools = list(self._pools.items())
            self._pools.clear()
            self._opening.clear()
        here = asyncio.get_running_loop()
        for loop, pool in pools:
            if loop is here:
                await pool.close()
            elif loop.is_running():
                with contextlib.suppress(Exception):
                    done = asyncio.run_coroutine_threadsafe(pool.close(), loop)
                    await asyncio.wait_for(asyncio.wrap_future(done), 5.0)

    # -- the `Jobs` role ----------------------------------------------------------------

    async def enqueue(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5, owner: str | None = None,
    ) -> Job:  # fmt: skip
        body = check_enqueue(kind, key, payload, tenant, run_after, max_attempts)
        if owner is not None:
            _rows.name(owner, "owner")
        _no_nul({"kind": kind, "key": key, "tenant": tenant, "owner": owner})
        async with self._tx("enqueue") as conn:
            while True:
                now = self.clock()
                cur = await conn.execute(
                    _INSERT,
                    (tenant, kind, key, body, max_attempts, now + run_after, owner, now),
                )
                row = await cur.fetchone()
                if row is not None:
                    await conn.execute(_NOTIFY, (CHANNEL, kind))  # sent on commit
                    return _job(row)
                cur = await conn.execute(_EXISTING, (tenant, kind, key))
                row = await cur.fetchone()
                if row is not None:  # else it ended between the two statements: insert again
                    return _job(row)

    def enqueue_now(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5, owner: str | None = None,
    ) -> Job:  # fmt: skip
        """`enqueue` on the calling thread, over a short connection of its own."""
        body = check_enqueue(kind, key, payload, tenant, run_after, max_attempts)
        if owner is not None:
            _rows.name(owner, "owner")
        _no_nul({"kind": kind, "key": key, "tenant": tenant, "owner": owner})
        if self._url:
            self._migrate_once()
        pg = psycopg()
        with (
            translated("jobs: enqueue"),
            pg.connect(self._conninfo, autocommit=True) as conn,
        ):
            conn.execute(f"SET search_path TO {SCHEMA}, public")
            with conn.transaction():
                while True:
                    now = self.clock()
                    row = conn.execute(
                        _INSERT,
                        (tenant, kind, key, body, max_attempts, now + run_after, owner, now),
                    ).fetchone()
                    if row is not None:
                        conn.execute(_NOTIFY, (CHANNEL, kind))
                        return _job(row)
                    row = conn.execute(_EXISTING, (tenant, kind, key)).fetchone()
                    if row is not None:
                        return _job(row)

    async def claim(self, kinds: Sequence[str], *, worker: str, lease: float) -> Job | None:
        names = _storable(check_claim(kinds, worker, lease))
        if not names:
            return None
        _no_nul({"worker": worker})
        seconds = float(lease)
        async with self._tx("claim") as conn:
            while True:
                now = self.clock()
                params = {
                    "kinds": list(names),
                    "now": now,
                    "worker": worker,
                    "stale": now - seconds,
                }
                cur = await conn.execute(_CLAIMABLE, params)
                row = await cur.fetchone()
                if row is None:
                    return None
                job_id, state, attempts, most, holder = row
                if state == "running" and attempts >= most:
                    # taken over as often as it may be tried: its workers die on it
                    message = f"lease of worker {holder!r} ran out {attempts} time(s)"
                    await conn.execute(_GIVE_UP, (message, job_id))
                    continue
                cur = await conn.execute(_TAKE, (worker, now + seconds, job_id))
                taken = await cur.fetchone()
                assert taken is not None
                return _job(taken)

    async def renew(self, job: Job, lease: float) -> bool:
        seconds = check_renew(job, lease)
        async with self._tx("renew") as conn:
            cur = await conn.execute(_RENEW, (self.clock() + seconds, job.id, job.claim))
            return bool(cur.rowcount == 1)

    async def complete(self, job: Job) -> None:
        check_renew(job, 1.0)
        async with self._tx("complete") as conn:
            cur = await conn.execute(_COMPLETE, (job.id, job.claim))
            if cur.rowcount != 1:
                raise LeaseLostError(job.id, job.worker or "")

    async def fail(self, job: Job, error: str, *, retry_in: float) -> Job:
        delay = check_fail(job, error, retry_in)
        async with self._tx("fail") as conn:
            # an error message is a diagnostic: a NUL in it (PostgreSQL text has none) is shown as U+FFFD
            text = error.replace("\x00", "\ufffd")
            cur = await conn.execute(_FAIL, (self.clock() + delay, text, job.id, job.claim))
            row = await cur.fetchone()
            if row is None:
                raise LeaseLostError(job.id, job.worker or "")
        return _job(row)

    async def jobs(
        self, *, tenant: str | None = None, state: str | None = None, kind: str | None = None
    ) -> list[Job]:
        if state is not None and state not in STATES:
            raise ConfigError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        if any("\x00" in v for v in (tenant, state, kind) if isinstance(v, str)):
            return []  # no stored name holds a NUL (see `_no_nul`)
        where, params = [], []
        for column, value in (("tenant", tenant), ("state", state), ("kind", kind)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        sql = f"SELECT {_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        async with self._tx("jobs") as conn:
            cur = await conn.execute(sql + " ORDER BY id", params)
            return [_job(r) for r in await cur.fetchall()]

    async def next_due(self, kinds: Sequence[str], *, worker: str, lease: float) -> float | None:
        names = _storable(check_claim(kinds, worker, lease))
        if not names:
            return None
        async with self._tx("next_due") as conn:
            cur = await conn.execute(_NEXT_DUE, (worker, float(lease), list(names)))
            row = await cur.fetchone()
        due = None if row is None else row[0]
        return None if due is None else float(due)

    async def active(self, ids: Iterable[int]) -> set[int]:
        wanted = sorted({int(i) for i in ids})
        if not wanted:
            return set()
        async with self._tx("active") as conn:
            cur = await conn.execute(_ACTIVE, (wanted,))
            return {int(i) for (i,) in await cur.fetchall()}
