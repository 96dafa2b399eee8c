"""Background memory writes: extract, merge with what is known, persist — off the chat path.

Memory extraction runs in the background after every turn, merges duplicates and
persists, and the user-memory cache is invalidated (docs/design-notes.md, Memory
extraction and Block cache) as soon as a new memory is saved, so the next turn sees it.
`MemoryWriter` does both
without ever making a build wait:

* `submit` puts a batch (a scope and the turn's messages) on a bounded queue and
  returns at once; when the queue is full the batch is dropped and counted, never
  waited for.
* One worker — a daemon thread with its own event loop, started on first use — takes
  batches in order (so an update is never written before the fact it updates), runs
  the extractor (rules by default, or an `LLMExtractor`) and then merges, cheaply and
  before any further model call:

  1. exact duplicates within the batch are folded together (`dedupe_key`: NFKC so
     full width equals half width, case, punctuation and whitespace ignored);
  2. a keyed item ("age", "employer", …) is compared with the live memory of that
     scope, category and key: the same statement again is a duplicate; a different
     one is written with the key, and the store *supersedes* the old memory in the
     same transaction (it stays in ``history``);
  3. an unkeyed item that the store's ``find_similar`` finds at or above
     ``dedupe_threshold`` is a duplicate.

  A duplicate is not written again; if it now comes with a higher importance, the
  stored memory's importance is raised to it (restating a fact never makes it less
  important). Each batch that changed the store calls ``on_write(scope)`` once.
* `flush` has the `MemoryFlush` signature of `Conversations` (``memory_flush=``):
  compaction calls it with the messages about to be summarised away, it jumps the
  queue, and the caller awaits the number of memories written — the work itself
  still runs on the worker, never on the caller's event loop.

A failing extraction or store call never stops the worker: the batch is counted in
``stats.failed`` with the error in ``stats.last_error`` (and logged), and a `flush`
caller gets the exception.

Lifetime: `close` (or leaving ``with MemoryWriter(...) as writer:``, or ``async
with``) writes what is queued, then stops the worker. A process that exits
without closing loses nothing either: when the interpreter begins to shut down
— before it joins its threads, while the worker and the store still run — every
open writer is closed with a bounded wait, ``exit_timeout`` seconds. Batches still
queued when that passes are not written, and a warning says how many.

Wiring, so that a memory written after turn N is in turn N+1's context::

    store = SQLiteMemoryStore("chat.db")
    engine = ContextEngine(sources=[UserMemorySource(store=store)], ...)
    writer = MemoryWriter(store, on_write=invalidate_user_memory(engine))  # writer.close() at the end
    # i.e. on_write=lambda s: engine.invalidate(user_memory_tag(s.tenant, s.user))
    conversations = Conversations(engine, "chat.db", memory_flush=writer.flush)
    ...
    built = await conversations.build(cid, text, user=uid)     # never waits for memory
    writer.submit(Scope(tenant, uid), [user_message, reply])   # after the turn
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError, UserError
from ..llm import describe_error
from ..memory._extract import Extracted, Extractor, RuleExtractor, dedupe_key
from ..model._messages import Message
from ..stores._cache import user_memory_tag
from ..stores._memory import Memory, MemoryHit, Scope
from ..stores._shutdown import at_shutdown

__all__ = ["MemoryWriter", "MemoryWriterStore", "WriterStats", "invalidate_user_memory"]

log = logging.getLogger(__name__)


# The writers whose worker runs, drained when the interpreter shuts down (see the
# module docstring). Weak: a writer is kept alive by its worker thread, not by this.
_open_writers: weakref.WeakSet[MemoryWriter] = weakref.WeakSet()


def _close_open_writers() -> None:
    for writer in list(_open_writers):
        writer._close_at_exit()


@runtime_checkable
class MemoryWriterStore(Protocol):
    """What the writer needs from a memory store (`SQLiteMemoryStore` has it all)."""

    def add(
        self,
        scope: Scope,
        content: str,
        *,
        category: str = "fact",
        importance: int = 50,
        key: str | None = None,
        source_message_ids: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        embedding: Any = None,
    ) -> Memory: ...

    def find_similar(
        self,
        scope: Scope,
        content: str,
        *,
        category: str | None = None,
        threshold: float = 0.85,
        limit: int = 5,
    ) -> Sequence[MemoryHit]: ...

    def history(
        self, scope: Scope, key: str | None = None, category: str | None = None
    ) -> Sequence[Memory]: ...

    def update_importance(self, scope: Scope, id: str, importance: int) -> Memory | None: ...


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
    """Counters since the writer was made. Batches: submitted, processed (done, with or
    without error), failed, dropped (queue full). Items: extracted, written, deduplicated
    (not written: already known), superseded (written over an older value of the key)."""

    submitted: int = 0
    processed: int = 0
    failed: int = 0
    dropped: int = 0
    extracted: int = 0
    written: int = 0
    deduplicated: int = 0
    superseded: int = 0
    last_error: str | None = None


@dataclass
class _Job:
    scope: Scope
    messages: tuple[Message, ...]
    future: concurrent.futures.Future[int] | None = None


class MemoryWriter:
    """Extraction and merging in the background; see the module docstring.

    ``store`` is a `MemoryWriterStore`; ``extractor`` defaults to `RuleExtractor`;
    ``on_write(scope)`` runs on the worker after every batch that changed the store
    (see `invalidate_user_memory`); ``dedupe_threshold`` is the near-duplicate
    similarity (0..1); ``max_queue`` bounds the batches waiting; ``locale`` is given to
    the extractor; ``exit_timeout`` bounds, in seconds, how long an interpreter
    shutting down waits for the queue of a writer that was not closed.

    Close it when done (`close`, or use it as a context manager, sync or async):
    that writes what is queued and stops the worker.
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
    ) -> None:
        if not 0.0 < dedupe_threshold <= 1.0:
            raise ConfigError(f"dedupe_threshold must be in (0, 1], got {dedupe_threshold}")
        if max_queue < 1:
            raise ConfigError(f"max_queue must be >= 1, got {max_queue}")
        if not exit_timeout >= 0.0:  # also refuses NaN
            raise ConfigError(f"exit_timeout must be >= 0, got {exit_timeout}")
        self.exit_timeout = exit_timeout
        self.store = store
        self.extractor: Extractor = extractor or RuleExtractor()
        self.on_write = on_write
        self.dedupe_threshold = dedupe_threshold
        self.max_queue = max_queue
        self.locale = locale
        self._queue: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self._stats = WriterStats()

    # -- the caller's side -----------------------------------------------------------------

    @property
    def stats(self) -> WriterStats:
        with self._cond:
            return self._stats

    def submit(self, scope: Scope, messages: Sequence[Message]) -> None:
        """Queue ``messages`` of ``scope`` for extraction; returns at once, never blocks.

        A full queue drops the batch (``stats.dropped``) rather than make the caller wait.
        """
        batch = tuple(messages)
        with self._cond:
            if self._closing:
                raise UserError("MemoryWriter is closed")
            self._count(submitted=1)
            if len(self._queue) >= self.max_queue:
                self._count(dropped=1)
                log.warning("memory writer queue full (%d): batch dropped", self.max_queue)
                return
            self._queue.append(_Job(scope, batch))
            self._start()
            self._cond.notify_all()

    async def flush(
        self, tenant: str, user: str, conversation: str, messages: Sequence[Message]
    ) -> int:
        """Extract and write ``messages`` now (ahead of queued batches); the number written.

        The `MemoryFlush` hook of `Conversations`: compaction awaits it before summarising
        the messages away. The work runs on the writer's worker, not on this event loop.
        """
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._cond:
            if self._closing:
                raise UserError("MemoryWriter is closed")
            self._count(submitted=1)
            self._queue.appendleft(_Job(Scope(tenant, user), tuple(messages), future))
            self._start()
            self._cond.notify_all()
        return await asyncio.wrap_future(future)

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Block until every queued batch is done; False if ``timeout`` passed first.

        From async code: ``await writer.wait_idle_async()`` (this would block the loop).
        """
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    async def wait_idle_async(self, timeout: float | None = 30.0) -> bool:
        return await asyncio.to_thread(self.wait_idle, timeout)

    def close(self, timeout: float | None = 10.0, *, drain: bool = True, warn: bool = True) -> None:
        """Stop the worker after the queued batches (``drain``) or at once (they are
        discarded, and waiting `flush` callers get an error). Idempotent.

        Waits at most ``timeout`` seconds (None: until done); what is still queued
        then is left to the worker while the process runs, and (``warn``) logged as
        a warning.
        """
        with self._cond:
            self._closing = True
            if not drain:
                while self._queue:
                    job = self._queue.popleft()
                    if job.future is not None:
                        job.future.set_exception(UserError("MemoryWriter closed"))
            self._cond.notify_all()
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        _open_writers.discard(self)
        if warn and thread.is_alive():
            with self._cond:
                left = len(self._queue) + self._busy
            if left:
                log.warning(
                    "memory writer closed after %s s with %d batch(es) not yet written; "
                    "they are lost if the process exits now",
                    timeout, left,
                )  # fmt: skip

    def _close_at_exit(self) -> None:
        """`close` at interpreter shutdown: drain for ``exit_timeout`` seconds, then
        give up on what is still queued (the process is ending), with a warning."""
        with self._cond:
            started = self._thread is not None
        if not started:
            return
        self.close(self.exit_timeout, warn=False)
        with self._cond:
            dropped = len(self._queue)
            while self._queue:
                job = self._queue.popleft()
                if job.future is not None:
                    job.future.set_exception(UserError("MemoryWriter closed at exit"))
            running = self._busy
            if dropped:
                self._count(dropped=dropped)
        if dropped or running:
            log.warning(
                "memory writer: the process is exiting after waiting %s s (exit_timeout): "
                "%d queued batch(es) not written%s",
                self.exit_timeout, dropped,
                ", and the one being written may not finish" if running else "",
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
        """Add to the counters (the caller holds ``_cond``)."""
        s = self._stats
        self._stats = replace(s, **{k: getattr(s, k) + v for k, v in deltas.items()})

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._work, name="contextwright-memory-writer", daemon=True
            )
            self._thread.start()
            _open_writers.add(self)
            at_shutdown(_close_open_writers)

    def _work(self) -> None:
        # One loop for the thread's life: an LLM client's connections stay on one loop.
        loop = asyncio.new_event_loop()
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: bool(self._queue) or self._closing)
                    if not self._queue:
                        return
                    job = self._queue.popleft()
                    self._busy = True
                try:
                    loop.run_until_complete(self._process(job))
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
        finally:
            loop.close()

    async def _process(self, job: _Job) -> None:
        try:
            items = await self.extractor.extract(job.messages, locale=self.locale)
            written, changed = self._merge(job.scope, items)
        except Exception as exc:  # never let one batch stop the worker
            error = describe_error(exc)
            with self._cond:
                self._count(processed=1, failed=1)
                self._stats = replace(self._stats, last_error=error)
            log.warning("memory extraction failed for %s: %s", job.scope.key, error)
            if job.future is not None and not job.future.cancelled():
                job.future.set_exception(exc)
            return
        with self._cond:
            self._count(processed=1)
        if changed and self.on_write is not None:
            try:
                self.on_write(job.scope)
            except Exception as exc:  # a failing callback must not lose the written memories
                with self._cond:
                    self._stats = replace(
                        self._stats, last_error=f"on_write: {describe_error(exc)}"
                    )
                log.warning("memory writer on_write failed: %s", describe_error(exc))
        if job.future is not None and not job.future.cancelled():
            job.future.set_result(written)

    def _merge(self, scope: Scope, items: Sequence[Extracted]) -> tuple[int, bool]:
        """Write what is new; returns (memories written, whether the store changed)."""
        batch: dict[str, Extracted] = {}
        folded_away = 0
        for item in items:
            fold = dedupe_key(item.content)
            if not fold:
                continue
            seen = batch.get(fold)
            if seen is None:
                batch[fold] = item
                continue
            folded_away += 1
            ids = (
                *seen.source_message_ids,
                *(i for i in item.source_message_ids if i not in seen.source_message_ids),
            )
            batch[fold] = replace(
                seen, importance=max(seen.importance, item.importance), source_message_ids=ids
            )
        written = superseded = duplicates = 0
        changed = False
        for fold, item in batch.items():
            live = self._live_keyed(scope, item) if item.key is not None else []
            known = self._known(scope, item, fold, live)
            if known is None:
                self.store.add(
                    scope, item.content, category=item.category, importance=item.importance,
                    key=item.key, source_message_ids=item.source_message_ids,
                    meta={"extractor": self.extractor.name, "confidence": item.confidence},
                )  # fmt: skip
                written += 1
                superseded += bool(live)  # the store superseded the live memory of the key
                changed = True
                continue
            duplicates += 1
            if item.importance > known.importance and known.id:
                self.store.update_importance(scope, known.id, item.importance)
                changed = True
        with self._cond:
            self._count(
                extracted=len(items), written=written, superseded=superseded,
                deduplicated=duplicates + folded_away,
            )  # fmt: skip
        return written, changed

    def _live_keyed(self, scope: Scope, item: Extracted) -> list[Memory]:
        return [
            m
            for m in self.store.history(scope, key=item.key, category=item.category)
            if m.superseded_by is None and m.active
        ]

    def _known(
        self, scope: Scope, item: Extracted, fold: str, live: Sequence[Memory]
    ) -> Memory | None:
        """The stored memory ``item`` duplicates, if any (see the module docstring)."""
        if item.key is not None:
            # Same key: only the same statement is a duplicate; "35" → "36" is an update,
            # however similar the two texts are.
            return next((m for m in live if dedupe_key(m.content) == fold), None)
        hits = self.store.find_similar(
            scope, item.content, category=item.category, threshold=self.dedupe_threshold, limit=3
        )
        for hit in hits:
            if hit.score >= self.dedupe_threshold or dedupe_key(hit.memory.content) == fold:
                return hit.memory
        return None
