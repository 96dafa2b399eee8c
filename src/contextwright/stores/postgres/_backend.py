"""`PostgresBackend`: every role of the async store contract on PostgreSQL.

The same semantics as the SQLite backend (``sqlite/_store.py`` and its modules),
for many worker processes on one server; the methods live by concern in
``_log.py`` (conversations, messages), ``_history.py`` (outlines, summaries,
compactions, working memory, pins), ``_search.py`` (full-text search) and
``_service.py`` (deleting a conversation, build receipts, API keys), and are
listed in the class body, one line each.

- **Connections.** psycopg 3, async, from one pool per event loop, opened on
  that loop at its first call (``_pools.py`` says why and how they close). The
  first call also migrates the database (``_migrations.py``: under an advisory
  lock, refusing a schema newer than this code), on a thread, once.
- **One transaction per write**, which locks the conversation's row first and
  moves its version by one; reads are single statements or bounded by the
  ``last_seq`` they read first. Input is checked before anything is sent.
- **Errors.** Bad input raises what SQLite raises (the same ``sqlite/_rows.py``
  checks), named before anything is written; a string PostgreSQL cannot hold (a
  lone surrogate, a NUL character) is an `InvalidMessageError` too. Server errors
  become `StoreError`, an unreachable server `StoreUnavailableError`
  (``_connect.translated_async``); no URL in a message carries its password.
- **Retries.** A call that is safe to repeat — every read, an append (its
  message ids make a repeat store nothing twice), a recount, working memory —
  is retried with backoff for up to ``retry_for`` seconds (default 15) while the
  server is unreachable (restarting, a failover, a dropped connection); then
  `StoreUnavailableError`. Summaries, compaction entries, pins, receipts, keys
  and deletions are not repeated (the caller re-reads).
- **Time** is the injected ``clock`` (timestamps, working-memory expiry), never
  the server's, so tests move it as on SQLite.
- **Jobs.** `backend` comes with a `PostgresJobs` on the same database (its
  own pools, and its LISTEN connection once a runner waits), closed with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..._errors import ConfigError, InvalidMessageError, StoreUnavailableError
from .._contract import Backend
from ..sqlite import _rows
from . import _history, _log, _search, _service
from ._connect import check_url, redact, translated_async
from ._jobs import PostgresJobs
from ._migrations import migrate_url
from ._pools import Pools

__all__ = ["PostgresBackend"]

T = TypeVar("T")
P = ParamSpec("P")
S = TypeVar("S", bound="PostgresBackend")


def _bad_text(exc: BaseException) -> InvalidMessageError | None:
    """The `InvalidMessageError` for a string the server cannot store, else None."""
    if isinstance(exc, UnicodeEncodeError):
        return InvalidMessageError("text", f"holds a character UTF-8 cannot encode ({exc.reason})")
    if type(exc).__name__ == "DataError" and "NUL" in str(exc):
        return InvalidMessageError("text", "holds a NUL character, which PostgreSQL cannot store")
    return None


def _retrying(
    fn: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """``fn`` repeated while the server is unreachable, up to the backend's ``retry_for``."""

    @functools.wraps(fn)
    async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        deadline, delay = time.monotonic() + self.retry_for, 0.05
        while True:
            try:
                return await fn(self, *args, **kwargs)
            except StoreUnavailableError:
                if time.monotonic() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    return call


class PostgresBackend:
    """Every role of the store contract on one PostgreSQL database (see the module docstring).

    ``url`` is a ``postgresql://…`` URL; ``clock`` gives "now" in seconds since
    the epoch; ``min_size``/``max_size`` bound each event loop's pool. Nothing
    connects until the first call; ``retry_for`` bounds the retries of calls
    safe to repeat (module docstring; 0: none). `backend` gives it as a `Backend`.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        min_size: int = 1,
        max_size: int = 10,
        retry_for: float = 15.0,
    ) -> None:
        self.url = check_url(url)
        if (
            isinstance(retry_for, bool)
            or not isinstance(retry_for, (int, float))
            or not (retry_for >= 0)
        ):
            raise ConfigError(f"retry_for must be a number of seconds >= 0, got {retry_for!r}")
        self.retry_for = float(retry_for)
        for label, size in (("min_size", min_size), ("max_size", max_size)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ConfigError(f"{label} must be a positive integer, got {size!r}")
        if min_size > max_size:
            raise ConfigError(f"min_size ({min_size}) must not exceed max_size ({max_size})")
        self.clock = clock
        self.pools = Pools(self.url, min_size=min_size, max_size=max_size, prepare=self._migrate)
        self.jobs = PostgresJobs(self.url, clock=clock)

    def __repr__(self) -> str:
        return f"PostgresBackend({redact(self.url)!r})"

    def backend(self) -> Backend:
        """This object in every role of a `Backend` (receipts and keys too), with its `PostgresJobs`."""
        return Backend.of(self, self.jobs)

    async def _migrate(self) -> None:
        await asyncio.to_thread(migrate_url, self.url)

    def now(self) -> float:
        now = self.clock()
        if isinstance(now, bool) or not isinstance(now, (int, float)):
            raise ConfigError(f"the store's clock must return seconds, got {now!r}")
        return float(now)

    @contextlib.asynccontextmanager
    async def connection(self, tenant: object) -> AsyncIterator[Any]:
        """A connection for one call in autocommit mode, errors translated."""
        if tenant is not _rows.EVERY_TENANT:
            _rows.name(tenant, "tenant")
        try:
            async with (
                translated_async(f"PostgreSQL at {redact(self.url)}"),
                self.pools.connection() as conn,
            ):
                yield conn
        except (UnicodeEncodeError, Exception) as exc:
            bad = _bad_text(exc) or _bad_text(exc.__cause__ or exc)
            if bad is not None:
                raise bad from None
            raise

    @contextlib.asynccontextmanager
    async def transaction(self, tenant: object) -> AsyncIterator[Any]:
        """`connection` inside one transaction: committed at the end, rolled back on any error."""
        async with self.connection(tenant) as conn, conn.transaction():
            yield conn

    @contextlib.asynccontextmanager
    async def pipelined(self, tenant: object) -> AsyncIterator[Any]:
        """`transaction` in psycopg's pipeline mode: the same statements in fewer round trips.

        Statements executed in the block are queued, not waited for: they go
        to the server together when a result is first fetched (one round trip),
        and whatever follows goes with the ``COMMIT`` (one more). ``BEGIN`` and
        ``COMMIT`` are sent as statements because psycopg's ``transaction()``
        syncs the pipeline on entry and exit (two more round trips). A failed
        statement raises at the next fetch or at the end; an error rolls back.
        """
        async with self.connection(tenant) as conn:
            try:
                async with conn.pipeline():
                    await conn.execute("BEGIN")
                    yield conn
                    await conn.execute("COMMIT")
            except BaseException:
                if conn.info.transaction_status.name != "IDLE":  # the block or a statement failed
                    with contextlib.suppress(Exception):
                        await conn.rollback()
                raise

    # -- ConversationLog (_log.py) -----------------------------------------------------------

    ensure_conversation = _retrying(_log.ensure_conversation)
    get_conversation = _retrying(_log.get_conversation)
    list_conversations = _retrying(_log.list_conversations)
    version = _retrying(_log.version)
    append = _retrying(_log.append)
    read = _retrying(_log.read)
    read_tail = _retrying(_log.read_tail)
    token_total = _retrying(_log.token_total)
    count_messages = _retrying(_log.count_messages)
    message_tokens = _retrying(_log.message_tokens)
    set_message_tokens = _retrying(_log.set_message_tokens)

    # -- SummaryLog, CompactionLog, WorkingMemory, Pins (_history.py) ----------------------

    read_outline = _retrying(_history.read_outline)
    save_summary = _history.save_summary
    latest_summary = _retrying(_history.latest_summary)
    summaries = _retrying(_history.summaries)
    log_compaction = _history.log_compaction
    save_compaction = _history.save_compaction
    compactions = _retrying(_history.compactions)
    put_working = _retrying(_history.put_working)
    get_working = _retrying(_history.get_working)
    collect_working = _history.collect_working
    pin = _history.pin
    unpin = _history.unpin
    pinned = _retrying(_history.pinned)

    # -- MessageSearch (_search.py) ------------------------------------------------------------

    search = _retrying(_search.search)
    search_seqs = _retrying(_search.search_seqs)
    search_outlines = _retrying(_search.search_outlines)
    speaker_names = _retrying(_search.speaker_names)
    optimize_index = _search.optimize_index

    # -- deleting a conversation, Receipts, ApiKeys (_service.py) ------------------------------

    delete_conversation = _service.delete_conversation
    record_receipt = _service.record_receipt
    receipts = _retrying(_service.receipts)
    create_key = _service.create_key
    find_key = _retrying(_service.find_key)
    list_keys = _retrying(_service.list_keys)
    revoke_key = _service.revoke_key

    # -- lifetime -------------------------------------------------------------------------------

    async def release_loop(self) -> None:
        """Close the running loop's pools, the job queue's too (before that loop stops)."""
        await self.pools.release_loop()
        await self.jobs.release_loop()

    async def aclose(self) -> None:
        """Close every pool and the job queue (idempotent); later calls raise `StoreError`."""
        try:
            await self.pools.close()
        finally:
            await self.jobs.aclose()

    async def __aenter__(self) -> PostgresBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
