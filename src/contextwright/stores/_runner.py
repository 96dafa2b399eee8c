"""`JobRunner`: claims durable jobs from a `Jobs` queue and runs them by kind.

Two modes. **Inline** (the CLI, tests): `enqueue` runs what is due at once, on
the caller's event loop, before it returns. **Thread** (embedded use): one
daemon thread with an event loop claims and runs jobs one at a time; an enqueue
(here, or elsewhere via a `Wakeup`) wakes it, else it sleeps until the queue's next
due time. Started, it first takes what is due, dead workers' expired leases too.

While a handler runs, its lease is renewed every third of the lease; if a
renewal finds the job taken over (the lease had run out), the handler is
cancelled and nothing more is written for it. A handler that raises fails the
job, which is retried with exponential backoff and ends ``failed`` (kept, with
its error) after its last attempt; errors of the queue itself are logged and
retried with backoff. `wait_idle` waits until every job this runner enqueued
has run (here or in another worker), and the process-local work given to
`submit`. `close` lets due work finish for a while, then stops the thread (none
outlives it; at exit, after ``exit_timeout`` s: ``_shutdown.py``); a job cut short
keeps its lease until it runs out, and another worker takes it over.

Across processes: given a ``wakeup`` (`Wakeup`: PostgreSQL LISTEN/NOTIFY, Redis
pub/sub), a serving runner listens on it and is woken by other workers'
enqueues, and its own enqueues notify it (unless the queue sends the signal
itself, as `PostgresJobs` does inside its enqueue transaction: its ``wakeup``
attribute is that wakeup). Without one, work from elsewhere is found at the
next due time, as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from .._errors import ConfigError, LeaseLostError
from . import Job, Jobs
from ._shutdown import at_shutdown
from ._wakeup import Wakeup

__all__ = ["Handler", "JobRunner", "block_on"]

T = TypeVar("T")
Handler = Callable[[Job], Awaitable[None]]
log = logging.getLogger(__name__)
_POLL = 0.1  # wait_idle re-asks the queue this often for jobs run by other workers
_MIN_WAIT = 0.01
_ids = itertools.count(1)


def _seconds(value: object, label: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"{label} must be a number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{label} must be {'>' if positive else '>='} 0, got {value!r}")
    return float(value)


class JobRunner:
    """Claims jobs of the ``handlers``' kinds from ``jobs`` and runs them (module docstring).

    ``worker`` names this runner in the queue (default: host, process id and a
    counter); ``lease`` is how long a claim holds without renewal; a failed
    attempt ``n`` is retried after ``retry_base * 2**(n-1)`` seconds, at most
    ``retry_cap``. ``owns_jobs``: `close` also closes the queue (its ``aclose``),
    on the runner's loop, where a queue's connections belong (else only what it
    holds for that loop: ``release_loop``); ``before_stop`` runs there last.
    """

    def __init__(
        self,
        jobs: Jobs,
        handlers: Mapping[str, Handler],
        *,
        inline: bool = False,
        worker: str | None = None,
        lease: float = 30.0,
        retry_base: float = 1.0,
        retry_cap: float = 300.0,
        exit_timeout: float = 5.0,
        thread_name: str = "contextwright-bg",
        wakeup: Wakeup | None = None,
        owns_jobs: bool = False,
        before_stop: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        if not handlers:
            raise ConfigError("handlers must name at least one job kind")
        self.jobs = jobs
        self.handlers = dict(handlers)
        self.kinds = tuple(self.handlers)
        self.inline = inline
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}:{next(_ids)}"
        self.lease = _seconds(lease, "lease")
        self.retry_base = _seconds(retry_base, "retry_base", positive=False)
        self.retry_cap = _seconds(retry_cap, "retry_cap", positive=False)
        self.exit_timeout = _seconds(exit_timeout, "exit_timeout", positive=False)
        self.thread_name = thread_name
        self.wakeup = wakeup
        self.owns_jobs = owns_jobs
        self.before_stop = before_stop
        self._unlisten: Callable[[], None] | None = None
        self.clock: Callable[[], float] = getattr(jobs, "clock", time.time)
        self.queue_errors = 0  # errors of the queue itself (claim, complete...) met so far
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._serving = False
        self._wake_event: asyncio.Event | None = None
        self._gen = 0  # bumped by every wake: an idle pass that saw none is idle
        self._idle = threading.Event()
        self._idle.set()
        # jobs this runner enqueued, until they have run (here or elsewhere)
        self._mine: dict[int, concurrent.futures.Future[None]] = {}
        self._local: set[concurrent.futures.Future[Any]] = set()

    def __repr__(self) -> str:
        mode = "inline" if self.inline else "thread"
        return f"JobRunner({self.jobs!r}, kinds={list(self.kinds)}, {mode}, worker={self.worker!r})"

    def retry_in(self, attempts: int) -> float:
        """Seconds before retrying a job that has failed ``attempts`` times."""
        return float(min(self.retry_cap, self.retry_base * 2.0 ** max(0, attempts - 1)))

    # -- enqueueing and running ----------------------------------------------------------

    async def enqueue(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5,
    ) -> tuple[Job, concurrent.futures.Future[None]]:  # fmt: skip
        """Enqueue (or find the pending one) and return it with a future done once it has run.

        Inline, what is due runs before this returns; in thread mode the thread is woken.
        """
        if kind not in self.handlers:
            raise ConfigError(f"kind must be one of {', '.join(self.kinds)}, got {kind!r}")
        job = await self.jobs.enqueue(
            kind, key, payload, tenant=tenant, run_after=run_after,
            max_attempts=max_attempts, owner=self.worker,
        )  # fmt: skip
        with self._lock:
            done = self._mine.get(job.id)
            if done is None:
                done = self._mine[job.id] = concurrent.futures.Future()
        if self._notifies():
            assert self.wakeup is not None
            with contextlib.suppress(Exception):  # a hint: the others poll anyway
                await self.wakeup.notify()
        if self.inline:
            await self.run_due()
        else:
            self.start()
            self._wake()
        return job, done

    def enqueue_now(
        self, kind: str, key: str, payload: Mapping[str, Any], *, tenant: str,
        run_after: float = 0.0, max_attempts: int = 5,
    ) -> tuple[Job, concurrent.futures.Future[None]]:  # fmt: skip
        """`enqueue` from synchronous code: the job is stored when this returns.

        Uses the queue's own ``enqueue_now`` (`SQLiteJobs`, `MemoryJobs`) on this
        thread, else runs its ``enqueue`` to the end on a private event loop. In
        thread mode the thread is woken; inline, nothing runs yet (`run_due` does).
        """
        if kind not in self.handlers:
            raise ConfigError(f"kind must be one of {', '.join(self.kinds)}, got {kind!r}")
        now = getattr(self.jobs, "enqueue_now", None)
        if callable(now):
            job: Job = now(
                kind, key, payload, tenant=tenant, run_after=run_after,
                max_attempts=max_attempts, owner=self.worker,
            )  # fmt: skip
        else:
            job = block_on(
                self.jobs.enqueue(
                    kind, key, payload, tenant=tenant, run_after=run_after,
                    max_attempts=max_attempts, owner=self.worker,
                )
            )  # fmt: skip
        with self._lock:
            done = self._mine.get(job.id)
            if done is None:
                done = self._mine[job.id] = concurrent.futures.Future()
        if self._notifies():
            assert self.wakeup is not None
            with contextlib.suppress(Exception):
                block_on(self.wakeup.notify())
        if not self.inline:
            self.start()
            self._wake()
        return job, done

    def _notifies(self) -> bool:
        """Whether an enqueue must signal ``wakeup`` (not when the queue signals it itself)."""
        return self.wakeup is not None and getattr(self.jobs, "wakeup", None) is not self.wakeup

    async def run_due(self) -> int:
        """Claim and run jobs until none is due now; how many ran."""
        ran = 0
        while True:
            job = await self.jobs.claim(self.kinds, worker=self.worker, lease=self.lease)
            if job is None:
                return ran
            await self._run(job)
            ran += 1

    async def _run(self, job: Job) -> None:
        """Run one claimed job under its lease; complete or fail it (see the module docstring)."""
        work = asyncio.ensure_future(self.handlers[job.kind](job))
        lost: list[bool] = []
        keeper = asyncio.ensure_future(self._keep(job, work, lost))
        try:
            await asyncio.wait([work])
        except asyncio.CancelledError:  # the runner is closing: the lease runs out
            work.cancel()
            raise
        finally:
            keeper.cancel()
        try:
            if lost:
                log.warning(
                    "job %d (%s %s): lease lost to another worker; stopped",
                    job.id,
                    job.kind,
                    job.key,
                )
                return
            exc = work.exception() if not work.cancelled() else asyncio.CancelledError()
            if exc is None:
                await self.jobs.complete(job)
                self._ran(job.id)
                return
            error = f"{type(exc).__name__}: {exc}"
            failed = await self.jobs.fail(job, error, retry_in=self.retry_in(job.attempts))
            if failed.state == "failed":
                log.error("job %d (%s %s) failed for good after %d attempt(s): %s",
                          job.id, job.kind, job.key, job.attempts, error)  # fmt: skip
                self._ran(job.id)
            else:
                log.warning("job %d (%s %s) failed (attempt %d of %d), retried in %.1f s: %s",
                            job.id, job.kind, job.key, job.attempts, job.max_attempts,
                            failed.run_after - self.clock(), error)  # fmt: skip
        except LeaseLostError:
            log.warning(
                "job %d (%s %s): taken over before it was recorded", job.id, job.kind, job.key
            )
        except Exception as exc:  # the queue failed: the lease runs out and the job is retried
            self.queue_errors += 1
            log.warning(
                "job %d (%s %s): could not record its end: %s", job.id, job.kind, job.key, exc
            )

    async def _keep(self, job: Job, work: asyncio.Future[None], lost: list[bool]) -> None:
        """Renew ``job``'s lease while ``work`` runs; cancel it if the job was taken over."""
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                held = await self.jobs.renew(job, self.lease)
            except Exception as exc:  # try again: the lease is good for two more rounds
                self.queue_errors += 1
                log.warning("job %d: could not renew its lease: %s", job.id, exc)
                continue
            if not held:
                lost.append(True)
                work.cancel()
                return

    def _ran(self, job_id: int) -> None:
        with self._lock:
            done = self._mine.pop(job_id, None)
        if done is not None and not done.done():
            done.set_result(None)

    async def _reap(self) -> None:
        """Mark done the jobs of this runner's that are no longer pending or running (run elsewhere)."""
        with self._lock:
            ids = list(self._mine)
        if not ids:
            return
        active = await self.jobs.active(ids)
        for job_id in ids:
            if job_id not in active:
                self._ran(job_id)

    def pending(self) -> int:
        """Jobs this runner enqueued that have not run yet, and process-local work under way."""
        with self._lock:
            mine = sum(1 for f in self._mine.values() if not f.done())
        return mine + sum(1 for f in list(self._local) if not f.done())

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every job this runner enqueued has run (anywhere) and its local work is done.

        False if ``timeout`` seconds passed first. A job failed for good has run.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.inline:
                await self.run_due()
            try:
                await self._reap()
            except Exception as exc:
                self.queue_errors += 1
                log.warning("job queue: %s", exc)
            with self._lock:
                waiting = [f for f in self._mine.values() if not f.done()]
            waiting += [f for f in list(self._local) if not f.done()]
            if not waiting:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            step = _POLL if left is None else min(_POLL, left)
            await asyncio.wait(
                [asyncio.wrap_future(f) for f in waiting], timeout=step,
                return_when=asyncio.FIRST_COMPLETED,
            )  # fmt: skip

    async def wait_all(self, timeout: float | None = None) -> bool:
        """Wait until the queue holds no pending or running job of this runner's kinds,
        whoever enqueued it (another process's, a dead worker's); False on ``timeout``.

        Jobs another worker holds or that wait for a retry are waited for too; the
        queue is asked again every 0.1 s.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.inline:
                await self.run_due()
            due = await self.jobs.next_due(self.kinds, worker=self.worker, lease=self.lease)
            if due is None:
                await self._reap()
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            await asyncio.sleep(_POLL if left is None else min(_POLL, left))

    # -- the thread ----------------------------------------------------------------------

    def _ensure_loop(self, serve: bool) -> asyncio.AbstractEventLoop:
        with self._lock:
            loop = self._loop
            if loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=loop.run_forever, name=self.thread_name, daemon=True
                )
                self._thread.start()
                self._loop = loop
                with _open_lock:
                    _open.add(self)
                at_shutdown(_finish_open)
            start = serve and not self._serving
            if start:
                self._serving = True
                self._gen += 1
                self._idle.clear()
        if start:
            self._listen()
            asyncio.run_coroutine_threadsafe(self._serve(), loop)
        return loop

    def _listen(self) -> None:
        """Serving: be woken by other workers' enqueues (``wakeup``); never raises."""
        if self.wakeup is None or self._unlisten is not None:
            return
        try:
            self._unlisten = self.wakeup.listen(self._wake)
        except Exception as exc:  # the queue is still polled at its next due time
            self.queue_errors += 1
            log.warning("job runner: could not listen for wake-ups: %s", exc)

    def _stop_listening(self) -> None:
        unlisten, self._unlisten = self._unlisten, None
        if unlisten is not None:
            try:
                unlisten()
            except Exception as exc:
                log.warning("job runner: could not stop listening for wake-ups: %s", exc)

    def start(self) -> None:
        """Thread mode: start the thread, which takes what is due now (dead workers' jobs too)."""
        if not self.inline:
            self._ensure_loop(serve=True)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run process-local work (not a durable job) on the runner's thread."""
        loop = self._ensure_loop(serve=False)
        fut = asyncio.run_coroutine_threadsafe(coro, loop)
        self._local.add(fut)
        fut.add_done_callback(self._local.discard)
        return fut

    def _wake(self) -> None:
        with self._lock:
            self._gen += 1
            self._idle.clear()
            loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self._set_wake)

    def _set_wake(self) -> None:
        if self._wake_event is not None:
            self._wake_event.set()

    async def _serve(self) -> None:
        """The thread's loop: run what is due, then sleep until the next due time or a wake."""
        self._wake_event = wake = asyncio.Event()
        failures = 0
        while True:
            with self._lock:
                gen = self._gen
            wake.clear()
            due: float | None
            try:
                ran = await self.run_due()
                await self._reap()
                due = None if ran else await self.jobs.next_due(
                    self.kinds, worker=self.worker, lease=self.lease
                )  # fmt: skip
                failures = 0
            except Exception as exc:
                self.queue_errors += 1
                failures += 1
                ran, due = 0, self.clock() + self.retry_in(failures)
                log.warning("job queue: %s (retrying in %.1f s)", exc, due - self.clock())
            if ran:
                continue
            with self._lock:
                if gen == self._gen:
                    self._idle.set()
            timeout = None if due is None else max(_MIN_WAIT, due - self.clock())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Let due jobs and local work finish (up to ``timeout`` s), then stop and join the thread.

        A job still running then is cancelled; its lease runs out and it is taken
        over later. Enqueueing again starts a new thread.
        """
        with _open_lock:
            _open.discard(self)
        self._stop_listening()
        deadline = time.monotonic() + timeout
        with self._lock:
            loop, thread = self._loop, self._thread
        if loop is None:
            return
        if self._serving:
            self._idle.wait(max(0.0, deadline - time.monotonic()))
        local = [f for f in list(self._local) if not f.done()]
        if local:
            concurrent.futures.wait(local, timeout=max(0.0, deadline - time.monotonic()))
        # connections opened on this loop must close on it, before it stops
        closer = getattr(self.jobs, "aclose" if self.owns_jobs else "release_loop", None)
        for close in (closer, self.before_stop):
            if close is not None and not loop.is_closed():
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(close(), loop).result(5.0)
        with self._lock:
            self._loop = self._thread = None
            self._serving = False
            self._wake_event = None
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(_stop(), loop)
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
            if not thread.is_alive():
                loop.close()


def block_on(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop | None = None) -> T:
    """Run ``coro`` to its end from synchronous code, on ``loop`` (default: a new one).

    From a thread whose own event loop is running (sync code called from async
    code), it runs on a helper thread while this one waits.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return loop.run_until_complete(coro) if loop is not None else asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="contextwright-block") as ex:
        if loop is not None:
            return ex.submit(loop.run_until_complete, coro).result()
        return ex.submit(asyncio.run, coro).result()


async def _stop() -> None:
    """Cancel every other task of this loop, let them unwind, and stop the loop."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=2.0)
    asyncio.get_running_loop().stop()


# Runners with a thread, closed at interpreter exit (given their ``exit_timeout``).
_open: set[JobRunner] = set()
_open_lock = threading.Lock()


def _finish_open() -> None:
    with _open_lock:
        running = list(_open)
    for runner in running:
        left = runner.pending()
        runner.close(runner.exit_timeout)
        if left:
            log.info("closed a job runner at exit with %d job(s) pending (taken over later)", left)
