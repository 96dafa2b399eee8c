"""Durable background jobs: the `Job` record, the async `Jobs` role a backend provides, and an in-memory one.

A job is work done later, by whichever worker gets to it: a conversation's
summary, a memory write. It has a ``kind`` (which handler runs it), a ``key``
(what it is about) and a JSON ``payload``. At most one job per ``(tenant, kind,
key)`` is pending or running: enqueueing it again returns the one there.

Workers ``claim`` jobs with a lease (seconds). A worker renews the lease while it
works; one that dies stops renewing, and when the lease has run out another
worker's claim takes the job over. Every claim bumps the job's ``claim`` number,
a fencing token: only the current holder can renew (`renew` returns False for
anyone else), complete or fail it (`LeaseLostError`, nothing written). A
completed job is removed. A failed one is retried after ``retry_in`` seconds
until it has been tried ``max_attempts`` times; then it stays, state
``failed``, with its last error, for `Jobs.jobs` to show: never lost silently.
A job whose lease ran out counts that claim as an attempt too, so a job that
kills its workers ends up ``failed`` rather than taking every worker down.
A pending job is claimed first by its ``owner`` (the worker that enqueued it,
whose caches are warm); another worker takes it only a lease after it fell
due, in case the owner died before claiming it.

`MemoryJobs` keeps jobs in process (a store without a queue of its own, tests);
`SQLiteJobs` (``_sqlite_jobs.py``) keeps them in the SQLite file, for every
process that opens it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError, LeaseLostError
from .sqlite import _rows

__all__ = ["ACTIVE", "STATES", "Job", "Jobs", "MemoryJobs", "check_claim", "check_enqueue"]

STATES = ("pending", "running", "failed")
ACTIVE = ("pending", "running")


@dataclass(frozen=True)
class Job:
    """One job as stored (times are seconds since the epoch)."""

    id: int
    tenant: str
    kind: str
    key: str
    payload: Mapping[str, Any]
    state: str  # pending, running or failed
    attempts: int  # claims so far
    max_attempts: int
    run_after: float  # not claimed before this
    owner: str | None  # the worker that enqueued it: first to claim it (others: a lease later)
    worker: str | None  # the holder while running
    lease_until: float | None  # while running: taken over after this
    claim: int  # bumped by every claim: the holder's fencing token
    error: str | None  # the last failure's
    created_at: float


@runtime_checkable
class Jobs(Protocol):
    """The job queue a backend provides (see the module docstring for the rules)."""

    async def enqueue(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5, owner: str | None = None,
    ) -> Job:  # fmt: skip
        """Add a job due ``run_after`` seconds from now, or return the pending/running one of (tenant, kind, key)."""
        ...

    async def claim(self, kinds: Sequence[str], *, worker: str, lease: float) -> Job | None:
        """Take the oldest due job of ``kinds``, atomically: pending (another owner's only
        ``lease`` seconds after it fell due), or running with its lease run out."""
        ...

    async def renew(self, job: Job, lease: float) -> bool:
        """Extend the holder's lease by ``lease`` seconds from now; False if ``job`` is no longer held by it."""
        ...

    async def complete(self, job: Job) -> None:
        """Finish (remove) the job; `LeaseLostError` if its holder has changed."""
        ...

    async def fail(self, job: Job, error: str, *, retry_in: float) -> Job:
        """Record a failure: pending again after ``retry_in`` s, or ``failed`` after the last attempt."""
        ...

    async def jobs(
        self, *, tenant: str | None = None, state: str | None = None, kind: str | None = None
    ) -> list[Job]:
        """The stored jobs (all tenants unless ``tenant``), oldest first."""
        ...

    async def next_due(self, kinds: Sequence[str], *, worker: str, lease: float) -> float | None:
        """When the next job of ``kinds`` becomes claimable by ``worker`` (a time, perhaps
        past; see `claim`); None if none is pending or running."""
        ...

    async def active(self, ids: Iterable[int]) -> set[int]:
        """Which of ``ids`` are still pending or running."""
        ...


def check_enqueue(
    kind: object, key: object, payload: object, tenant: object, run_after: object,
    max_attempts: object,
) -> str:  # fmt: skip
    """Validate `Jobs.enqueue`'s arguments (typed errors naming the field); the payload as JSON."""
    _rows.name(kind, "kind")
    _rows.name(key, "key")
    _rows.name(tenant, "tenant")
    if not isinstance(payload, Mapping):
        raise ConfigError(f"payload must be a mapping, got {type(payload).__name__}")
    _seconds(run_after, "run_after")
    _rows.count(max_attempts, "max_attempts", minimum=1)
    return _rows.dumps(dict(payload), "payload")


def check_claim(kinds: object, worker: object, lease: object) -> tuple[str, ...]:
    """Validate `Jobs.claim`'s arguments; the kinds as a tuple."""
    if isinstance(kinds, str) or not isinstance(kinds, Iterable):
        raise ConfigError(f"kinds must be a sequence of kind names, got {kinds!r}")
    names = tuple(kinds)
    for k in names:
        _rows.name(k, "kinds[]")
    _rows.name(worker, "worker")
    _lease(lease)
    return names


def _seconds(value: object, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{label} must be a finite number of seconds, got {value!r}")
    if value < 0:
        raise ConfigError(f"{label} must be >= 0, got {value!r}")
    return float(value)


def _lease(value: object) -> float:
    lease = _seconds(value, "lease")
    if lease <= 0:
        raise ConfigError(f"lease must be > 0 seconds, got {value!r}")
    return lease


def check_renew(job: object, lease: object) -> float:
    if not isinstance(job, Job):
        raise ConfigError(f"job must be a Job, got {type(job).__name__}")
    return _lease(lease)


def check_fail(job: object, error: object, retry_in: object) -> float:
    if not isinstance(job, Job):
        raise ConfigError(f"job must be a Job, got {type(job).__name__}")
    if not isinstance(error, str):
        raise ConfigError(f"error must be a string, got {type(error).__name__}")
    return _seconds(retry_in, "retry_in")


class MemoryJobs:
    """`Jobs` in this process only (gone with it): for stores without a queue, and tests."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._jobs: dict[int, Job] = {}
        self._next = 1
        self._lock = threading.Lock()

    async def enqueue(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5, owner: str | None = None,
    ) -> Job:  # fmt: skip
        return self.enqueue_now(
            kind, key, payload, tenant=tenant, run_after=run_after,
            max_attempts=max_attempts, owner=owner,
        )  # fmt: skip

    def enqueue_now(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5, owner: str | None = None,
    ) -> Job:  # fmt: skip
        """`enqueue` on the calling thread."""
        check_enqueue(kind, key, payload, tenant, run_after, max_attempts)
        if owner is not None:
            _rows.name(owner, "owner")
        with self._lock:
            for job in self._jobs.values():
                if (job.tenant, job.kind, job.key) == (tenant, kind, key) and job.state in ACTIVE:
                    return job
            now = self.clock()
            job = Job(
                self._next, tenant, kind, key, dict(payload), "pending", 0, max_attempts,
                now + run_after, owner, None, None, 0, None, now,
            )  # fmt: skip
            self._jobs[job.id] = job
            self._next += 1
            return job

    @staticmethod
    def _due_at(job: Job, worker: str, lease: float) -> float:
        """When ``worker`` may claim the active ``job`` (see `Jobs.claim`)."""
        if job.state == "running":
            return job.lease_until or 0.0
        if job.owner is None or job.owner == worker:
            return job.run_after
        return job.run_after + lease

    async def claim(self, kinds: Sequence[str], *, worker: str, lease: float) -> Job | None:
        names = check_claim(kinds, worker, lease)
        with self._lock:
            now = self.clock()
            for job in sorted(self._jobs.values(), key=lambda j: (j.run_after, j.id)):
                if job.kind not in names or job.state not in ACTIVE:
                    continue
                if self._due_at(job, worker, lease) > now:
                    continue
                if job.state == "running" and job.attempts >= job.max_attempts:
                    self._jobs[job.id] = replace(
                        job, state="failed", worker=None, lease_until=None,
                        error=job.error or f"lease of worker {job.worker!r} ran out {job.attempts} time(s)",
                    )  # fmt: skip
                    continue
                taken = replace(
                    job, state="running", attempts=job.attempts + 1, worker=worker,
                    lease_until=now + lease, claim=job.claim + 1,
                )  # fmt: skip
                self._jobs[job.id] = taken
                return taken
            return None

    def _held(self, job: Job) -> Job | None:
        now = self._jobs.get(job.id)
        if now is None or now.state != "running" or now.claim != job.claim:
            return None
        return now

    async def renew(self, job: Job, lease: float) -> bool:
        seconds = check_renew(job, lease)
        with self._lock:
            held = self._held(job)
            if held is None:
                return False
            self._jobs[job.id] = replace(held, lease_until=self.clock() + seconds)
            return True

    async def complete(self, job: Job) -> None:
        check_renew(job, 1.0)
        with self._lock:
            if self._held(job) is None:
                raise LeaseLostError(job.id, job.worker or "")
            del self._jobs[job.id]

    async def fail(self, job: Job, error: str, *, retry_in: float) -> Job:
        delay = check_fail(job, error, retry_in)
        with self._lock:
            held = self._held(job)
            if held is None:
                raise LeaseLostError(job.id, job.worker or "")
            last = held.attempts >= held.max_attempts
            after = held.run_after if last else self.clock() + delay
            failed = replace(
                held, state="failed" if last else "pending", worker=None, lease_until=None,
                run_after=after, error=error,
            )  # fmt: skip
            self._jobs[job.id] = failed
            return failed

    async def jobs(
        self, *, tenant: str | None = None, state: str | None = None, kind: str | None = None
    ) -> list[Job]:
        if state is not None and state not in STATES:
            raise ConfigError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        with self._lock:
            return [
                j
                for j in sorted(self._jobs.values(), key=lambda j: j.id)
                if (tenant is None or j.tenant == tenant)
                and (state is None or j.state == state)
                and (kind is None or j.kind == kind)
            ]

    async def next_due(self, kinds: Sequence[str], *, worker: str, lease: float) -> float | None:
        names = set(kinds)
        with self._lock:
            times = [
                self._due_at(j, worker, lease)
                for j in self._jobs.values()
                if j.kind in names and j.state in ACTIVE
            ]
        return min(times, default=None)

    async def active(self, ids: Iterable[int]) -> set[int]:
        with self._lock:
            return {i for i in ids if (j := self._jobs.get(i)) is not None and j.state in ACTIVE}
