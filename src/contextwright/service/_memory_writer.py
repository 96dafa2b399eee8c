"""Background memory writes: extract, merge with what is known, persist — as durable jobs.

Memory extraction runs in the background after every turn, merges duplicates and
persists, and the user-memory cache is invalidated (docs/design-notes.md, Memory
extraction and Block cache) as soon as a new memory is saved, so the next turn sees it.
`MemoryWriter` does both without ever making a build wait:

* `submit` stores a batch as a ``memory`` job in a durable queue (`Jobs`: by
  default the memory store's own SQLite file, so every process that opens it
  shares the queue) and returns at once. The job's payload is all it needs:
  tenant, user, namespace, the conversation and either the sequence numbers of
  the messages (when they are stored in the conversation log the writer reads)
  or the messages themselves; nothing lives only in this process's memory. When
  ``max_queue`` batches of this writer are waiting the batch is dropped and
  counted, never waited for.
* A `JobRunner` — one background thread, or ``inline`` on the caller's thread
  (the CLI, tests) — claims the jobs in order (so an update is normally written
  after the fact it updates), runs the extractor (rules by default, or an
  `LLMExtractor`) and merges, cheaply and before any further model call
  (``_memory_merge.py``): exact duplicates in the batch are folded, a keyed fact
  with a new value supersedes the old one, and what the store knows already (the
  same statement, or a near duplicate by ``dedupe_threshold``) is not written
  again (its importance may be raised). So a job run twice (its worker died after
  writing, before the job was marked done) writes nothing twice. Each batch that
  changed the store calls ``on_write(scope)`` once.
* `flush` has the `MemoryFlush` signature of `Conversations` (``memory_flush=``):
  compaction calls it with the messages about to be summarised away, it jumps the
  queue, and the caller awaits the number of memories written. It is not a job
  of its own: the compaction that awaits it is, and runs it again if it dies.

A failing extraction or store call never stops the worker: the attempt is counted
in ``stats.failed`` with the error in ``stats.last_error`` (and logged), the job is
retried with exponential backoff (``retry_base``), and after ``max_attempts`` it
stays in the queue, state ``failed``, with its error: `jobs` lists it and
``stats.given_up`` counts it. A `flush` caller gets the exception.

Lifetime: the thread starts with the writer and first takes over what is due,
jobs of writers that died included (after their lease). `close` (or leaving
``with MemoryWriter(...) as writer:``, or ``async with``) writes what this writer
queued, then stops the thread. At interpreter shutdown every open writer is
closed with a bounded wait, ``exit_timeout`` seconds; what is not written by then
stays in the queue (a warning says how many) for the next writer on the store.

Wiring, so that a memory written after turn N is in turn N+1's context::

    store = SQLiteMemoryStore("chat.db")
    engine = ContextEngine(sources=[UserMemorySource(store=store)], ...)
    writer = MemoryWriter(store, on_write=invalidate_user_memory(engine))  # writer.close() at the end
    # i.e. on_write=lambda s: engine.invalidate(user_memory_tag(s.tenant, s.user))
    conversations = Conversations(engine, "chat.db", memory_flush=writer.flush)
    ...
    built = await conversations.build(cid, text, user=uid)     # never waits for memory
    writer.submit(Scope(tenant, uid), [user_message, reply], conversation=cid)  # after the turn
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError, InvalidMessageError, StoreError, UserError
from ..llm import describe_error
from ..memory._extract import Extractor, RuleExtractor
from ..model._messages import Message
from ..stores._cache import user_memory_tag
from ..stores._jobs import Job, Jobs, MemoryJobs
from ..stores._memory import Scope
from ..stores._runner import JobRunner, block_on
from ..stores._shutdown import at_shutdown
from ..stores.postgres._connect import is_postgres_url
from ..stores.sqlite._jobs import SQLiteJobs
from ..stores.sqlite._store import SQLiteStore
from ._memory_merge import MemoryWriterStore, merge

__all__ = [
    "MEMORY",
    "MemoryWriter",
    "MemoryWriterStore",
    "MessageLog",
    "WriterStats",
    "invalidate_user_memory",
]

MEMORY = "memory"  # the job kind
log = logging.getLogger(__name__)


# The writers not yet closed, closed when the interpreter shuts down (see the module
# docstring). Weak: a writer is kept alive by its runner's thread, not by this.
_open_writers: weakref.WeakSet[MemoryWriter] = weakref.WeakSet()


def _close_open_writers() -> None:
    for writer in list(_open_writers):
        writer._close_at_exit()


@runtime_checkable
class MessageLog(Protocol):
    """Where a job finds the stored messages it names by sequence number (`SQLiteStore`)."""

    def read(
        self, conversation: str, *, tenant: str, after_seq: int = 0, upto_seq: int | None = None
    ) -> list[Message]: ...


class _Invalidates(Protocol):
    def invalidate(self, *tags: str, namespace: str | None = None) -> int: ...


def invalidate_user_memory(engine: _Invalidates) -> Callable[[Scope], None]:
    """An ``on_write`` that drops ``engine``'s cached user-memory block of the scope's user.

    The tag is the one `UserMemorySource` caches under, `user_memory_tag`.
    """

    def on_write(scope: Scope) -> None:
        engine.invalidate(user_memory_tag(scope.tenant, scope.user))

    return on_write


@dataclass(frozen=True)
class WriterStats:
    """This writer's counters since it was made. Batches: submitted, processed (done:
    written, or failed for good), failed (attempts that raised; each is retried until
    its last), given_up (failed for good: kept in the queue, see `MemoryWriter.jobs`),
    dropped (queue full). Items: extracted, written, deduplicated (not written: already
    known), superseded (written over an older value of the key)."""

    submitted: int = 0
    processed: int = 0
    failed: int = 0
    dropped: int = 0
    extracted: int = 0
    written: int = 0
    deduplicated: int = 0
    superseded: int = 0
    last_error: str | None = None
    given_up: int = 0


class MemoryWriter:
    """Extraction and merging as durable background jobs; see the module docstring.

    ``store`` is a `MemoryWriterStore`; ``extractor`` defaults to `RuleExtractor`;
    ``on_write(scope)`` runs after every batch that changed the store (see
    `invalidate_user_memory`); ``dedupe_threshold`` is the near-duplicate similarity
    (0..1); ``max_queue`` bounds this writer's batches waiting; ``locale`` is given to
    the extractor; ``exit_timeout`` bounds, in seconds, how long an interpreter
    shutting down waits for a writer that was not closed.

    ``jobs`` is the queue (default: `SQLiteJobs` in the store's SQLite file, else
    `MemoryJobs`); ``log`` is where messages named by sequence number are read
    (default: the store's `SQLiteStore`); ``inline`` runs jobs on the caller's
    thread instead of a background one; ``lease``, ``retry_base``,
    ``max_attempts`` and ``worker`` are the `JobRunner`'s.
    """

    def __init__(
        self,
        store: MemoryWriterStore,
        extractor: Extractor | None = None,
        *,
        on_write: Callable[[Scope], None] | None = None,
        dedupe_threshold: float = 0.85,
        max_queue: int = 1000,
        locale: str = "auto",
        exit_timeout: float = 10.0,
        jobs: Jobs | None = None,
        log: MessageLog | None = None,
        inline: bool = False,
        lease: float = 30.0,
        retry_base: float = 1.0,
        max_attempts: int = 5,
        worker: str | None = None,
    ) -> None:
        if not 0.0 < dedupe_threshold <= 1.0:
            raise ConfigError(f"dedupe_threshold must be in (0, 1], got {dedupe_threshold}")
        if max_queue < 1:
            raise ConfigError(f"max_queue must be >= 1, got {max_queue}")
        if not exit_timeout >= 0.0:  # also refuses NaN
            raise ConfigError(f"exit_timeout must be >= 0, got {exit_timeout}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        self.exit_timeout = exit_timeout
        self.store = store
        self.extractor: Extractor = extractor or RuleExtractor()
        self.on_write = on_write
        self.dedupe_threshold = dedupe_threshold
        self.max_queue = max_queue
        self.locale = locale
        self.max_attempts = max_attempts
        db, url = getattr(store, "db", None), getattr(store, "url", None)
        owns_jobs = jobs is None and isinstance(url, str) and is_postgres_url(url)
        if jobs is None:
            if owns_jobs:  # the store's database holds the queue, shared by every worker
                from ..stores.postgres._jobs import PostgresJobs

                jobs = PostgresJobs(url)
            else:
                jobs = SQLiteJobs(db) if isinstance(db, SQLiteStore) else MemoryJobs()
        if log is None and isinstance(db, SQLiteStore):
            log = db
        self.log = log
        self._lock = threading.Lock()
        self._closing = self._closed = False
        self._stats = WriterStats()
        # inline: one loop for the writer's life (an LLM client's connections stay on one loop)
        self._loop = asyncio.new_event_loop() if inline else None
        self._runner = JobRunner(
            jobs, {MEMORY: self._run_job}, inline=inline, worker=worker, lease=lease,
            retry_base=retry_base, exit_timeout=exit_timeout,
            thread_name="contextwright-memory-writer",
            wakeup=getattr(jobs, "wakeup", None), owns_jobs=owns_jobs,
        )  # fmt: skip
        self._runner.start()  # thread mode: takes over what dead writers left
        _open_writers.add(self)
        at_shutdown(_close_open_writers)  # after the runner's own: runs before it

    def __repr__(self) -> str:
        return f"MemoryWriter({self.store!r}, extractor={self.extractor.name!r}, {self._runner!r})"

    # -- the caller's side -----------------------------------------------------------------

    @property
    def stats(self) -> WriterStats:
        with self._lock:
            return self._stats

    @property
    def jobs_queue(self) -> Jobs:
        """The queue this writer's jobs are in."""
        return self._runner.jobs

    def submit(
        self, scope: Scope, messages: Sequence[Message], *, conversation: str | None = None
    ) -> None:
        """Store a job to extract ``messages`` of ``scope``; returns at once, never waits
        for the extraction (inline: runs it before returning).

        With ``conversation`` and messages stored in the writer's ``log`` (they carry
        their sequence numbers), the job names them by number; else it carries them.
        A full queue drops the batch (``stats.dropped``) rather than make the caller wait.
        Bad input raises a typed error naming the field, with nothing queued.
        """
        payload, key = self._payload(scope, messages, conversation)
        with self._lock:
            if self._closing:
                raise UserError("MemoryWriter is closed")
            self._count(submitted=1)
            if self._runner.pending() >= self.max_queue:
                self._count(dropped=1)
                log.warning("memory writer queue full (%d): batch dropped", self.max_queue)
                return
        self._runner.enqueue_now(
            MEMORY, key, payload, tenant=scope.tenant, max_attempts=self.max_attempts
        )
        if self._loop is not None:
            block_on(self._runner.run_due(), self._loop)

    def _payload(
        self, scope: object, messages: object, conversation: object
    ) -> tuple[dict[str, Any], str]:
        if not isinstance(scope, Scope):
            raise ConfigError(f"scope must be a Scope, got {type(scope).__name__}")
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise InvalidMessageError("messages", "must be a sequence of Message")
        for i, m in enumerate(messages):
            if not isinstance(m, Message):
                raise InvalidMessageError(
                    f"messages[{i}]", f"must be a Message, got {type(m).__name__}"
                )
        if conversation is not None and (not isinstance(conversation, str) or not conversation):
            raise ConfigError(f"conversation must be a non-empty string, got {conversation!r}")
        batch: Sequence[Message] = messages
        payload: dict[str, Any] = {
            "user": scope.user, "namespace": scope.namespace, "conversation": conversation,
        }  # fmt: skip
        if (
            conversation is not None
            and self.log is not None
            and batch
            and all(m.seq is not None for m in batch)
        ):
            payload["seqs"] = [m.seq for m in batch]
        else:
            payload["messages"] = [m.to_dict() for m in batch]
        what = json.dumps([scope.user, scope.namespace, conversation, [m.id for m in batch]])
        return payload, "batch-" + hashlib.sha256(what.encode()).hexdigest()[:32]

    async def flush(
        self, tenant: str, user: str, conversation: str, messages: Sequence[Message]
    ) -> int:
        """Extract and write ``messages`` now (ahead of queued batches); the number written.

        The `MemoryFlush` hook of `Conversations`: compaction awaits it before summarising
        the messages away. The work runs on the writer's thread (inline: on this loop).
        """
        scope = Scope(tenant, user)
        with self._lock:
            if self._closing:
                raise UserError("MemoryWriter is closed")
            self._count(submitted=1)
        if self._loop is not None:
            return await self._write(scope, tuple(messages))
        return await asyncio.wrap_future(self._runner.submit(self._write(scope, tuple(messages))))

    def wait_idle(self, timeout: float | None = 30.0, *, all_jobs: bool = False) -> bool:
        """Block until every batch this writer queued has run (anywhere); False if
        ``timeout`` passed first. ``all_jobs``: until no memory job is pending or running
        in the queue at all (other writers', dead writers' ones too).

        From async code: ``await writer.wait_idle_async()`` (this would block the loop).
        """
        runner = self._runner
        wait = runner.wait_all(timeout) if all_jobs else runner.wait_idle(timeout)
        return block_on(wait, self._loop)

    async def wait_idle_async(
        self, timeout: float | None = 30.0, *, all_jobs: bool = False
    ) -> bool:
        if all_jobs:
            return await self._runner.wait_all(timeout)
        return await self._runner.wait_idle(timeout)

    async def jobs(self, *, tenant: str | None = None, state: str | None = None) -> list[Job]:
        """The memory jobs in the queue (every writer's): pending, running, and ``failed``
        ones with their last error."""
        return await self._runner.jobs.jobs(tenant=tenant, state=state, kind=MEMORY)

    def jobs_sync(self, *, tenant: str | None = None, state: str | None = None) -> list[Job]:
        return block_on(self.jobs(tenant=tenant, state=state))

    def close(self, timeout: float | None = 10.0, *, drain: bool = True, warn: bool = True) -> None:
        """Run this writer's queued batches (``drain``, up to ``timeout`` seconds; None:
        until done), then stop the thread. Idempotent.

        What is not written then (``drain=False``: everything not yet running) stays in
        the queue for the next writer on the store, and (``warn``) a warning says so.
        """
        with self._lock:
            if self._closed:
                return
            self._closing = self._closed = True
        if drain:
            self.wait_idle(timeout)
        left = self._runner.pending()
        self._runner.close(0.0)
        if self._loop is not None and not self._loop.is_closed():
            closer = getattr(self._runner.jobs, "aclose", None) if self._runner.owns_jobs else None
            if closer is not None:  # inline: the queue's connections are on our loop
                block_on(closer(), self._loop)
            self._loop.close()
        _open_writers.discard(self)
        if warn and left:
            log.warning(
                "memory writer closed after %s s with %d batch(es) not yet written; "
                "they stay in the queue for the next writer on this store",
                timeout if drain else 0, left,
            )  # fmt: skip

    def _close_at_exit(self) -> None:
        """`close` at interpreter shutdown: drain for ``exit_timeout`` seconds, then
        leave what is still queued to the next writer, with a warning."""
        if self._closing:
            return
        self.close(self.exit_timeout, warn=False)
        left = self._runner.pending()
        if left:
            log.warning(
                "memory writer: the process is exiting after waiting %s s (exit_timeout): "
                "%d queued batch(es) not written; they stay in the queue, and the next "
                "writer on this store takes them over",
                self.exit_timeout, left,
            )  # fmt: skip

    def __enter__(self) -> MemoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MemoryWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # -- the worker --------------------------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        """Add to the counters (the caller holds ``_lock``)."""
        s = self._stats
        self._stats = replace(s, **{k: getattr(s, k) + v for k, v in deltas.items()})

    def _failed(self, exc: BaseException, scope: Scope | None, last: bool | None) -> None:
        """Count a failed attempt: of a job (``last``: its last one) or of a flush (None)."""
        error = describe_error(exc)
        with self._lock:
            self._count(failed=1, processed=int(last is not False), given_up=int(bool(last)))
            self._stats = replace(self._stats, last_error=error)
        log.warning("memory extraction failed for %s: %s", scope.key if scope else "?", error)

    async def _run_job(self, job: Job) -> None:
        """The ``memory`` job handler: read the batch from the payload (or the log) and write it."""
        last = job.attempts >= job.max_attempts
        scope: Scope | None = None
        try:
            scope, messages = self._batch(job)
        except Exception as exc:
            self._failed(exc, scope, last)
            raise
        await self._write(scope, messages, last)

    def _batch(self, job: Job) -> tuple[Scope, tuple[Message, ...]]:
        p = job.payload
        scope = Scope(job.tenant, p["user"], p.get("namespace") or "")
        if "messages" in p:
            return scope, tuple(
                Message.from_dict(m, f"payload.messages[{i}]") for i, m in enumerate(p["messages"])
            )
        seqs, conversation = [int(s) for s in p["seqs"]], p["conversation"]
        if self.log is None:
            raise StoreError(f"job {job.id} names messages of {conversation!r}, and no log to read")
        stored = self.log.read(
            conversation, tenant=job.tenant, after_seq=min(seqs) - 1, upto_seq=max(seqs)
        )
        by_seq = {m.seq: m for m in stored}
        missing = [s for s in seqs if s not in by_seq]
        if missing:
            raise StoreError(f"conversation {conversation!r} has no messages {missing}")
        return scope, tuple(by_seq[s] for s in seqs)

    async def _write(
        self, scope: Scope, messages: Sequence[Message], last: bool | None = None
    ) -> int:
        """Extract and merge one batch (of a job whose ``last`` attempt this is, or a
        flush); the number written. A failure is counted and raised."""
        try:
            items = await self.extractor.extract(messages, locale=self.locale)
            done = merge(
                self.store, scope, items, threshold=self.dedupe_threshold,
                extractor=self.extractor.name,
            )  # fmt: skip
        except Exception as exc:
            self._failed(exc, scope, last)
            raise
        with self._lock:
            self._count(
                processed=1, extracted=len(items), written=done.written,
                superseded=done.superseded, deduplicated=done.deduplicated,
            )  # fmt: skip
        if done.changed and self.on_write is not None:
            try:
                self.on_write(scope)
            except Exception as exc:  # a failing callback must not lose the written memories
                with self._lock:
                    self._stats = replace(
                        self._stats, last_error=f"on_write: {describe_error(exc)}"
                    )
                log.warning("memory writer on_write failed: %s", describe_error(exc))
        return done.written
