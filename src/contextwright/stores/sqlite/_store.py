"""The embedded store: conversations in one SQLite file, on the stdlib `sqlite3`.

Storage design (the tables and why they look so: ``_migrations.py``; the full-text
index: ``_fts.py``):

- **One file, WAL.** Readers never block the writer nor each other; a commit is
  an append to the write-ahead log, and with ``synchronous=NORMAL`` it is not
  fsynced (a power cut may lose the last commits, never corrupt the file nor
  expose half a transaction). ``busy_timeout`` (5 s) makes a second writer, in
  this or another process, wait for the lock instead of failing at once. Foreign
  keys are on, so no row can outlive or precede its conversation.
- **One transaction per call.** The connection is in autocommit mode and every
  method runs exactly one transaction: ``BEGIN IMMEDIATE`` for writes — the write
  lock is taken before the first read, so the sequence numbers a writer computes
  cannot be taken by another process meanwhile, and no read lock ever needs
  upgrading (SQLite refuses that with SQLITE_BUSY, without waiting) — and plain
  ``BEGIN`` for reads, one consistent snapshot. Any exception rolls back; a
  process killed mid-transaction leaves nothing of it behind.
- **Tenant scoping.** Reads join ``conversations`` on ``tenant = ? AND id = ?``
  in the same statement; writes resolve ``(tenant, id)`` to the conversation's
  integer ``cid`` inside their transaction and use only that. A ``cid`` never
  leaves the store, so no row can be reached without naming its tenant.
- **Validation first.** Input is checked and serialised before the transaction
  opens (``_rows.py``), so bad input raises having written nothing.
- **Threads.** The connection is opened with ``check_same_thread=False`` and
  guarded by a lock, so one store may be shared by threads (calls are
  serialised); `AsyncStore` and `SQLiteBackend` give a store one worker thread.
- **Versions.** Every write to a conversation adds one to its ``version`` in
  the same transaction (m008); `version` reads it off the primary key.
- **One class, methods by concern.** This module opens the file and runs the
  transactions; the methods are written as functions of the store in
  ``_log.py`` (messages), ``_history.py`` (summaries, compactions,
  working memory, pins), ``_search.py`` (full-text search, indexed
  when searched) and ``_service.py`` (deleting a conversation, build
  receipts, API keys), and listed in the class body below, one line each.

Measured on the development machine (2 cores, SQLite 3.40, a file already
holding 50,000 messages): appending one message took 0.18 ms (median; p95
0.36 ms) when it was also indexed; WAL checkpoints run on a thread of their own (``_checkpoint.py``): run
inside commits, they made one append in twenty take 5-30 ms at 100,000 messages
(p99 5.8 ms, now 0.8-0.9 ms). Rarely (once in about a thousand appends at
100,000 messages) FTS5 merged index segments inside a commit: 20-200 ms, before
appends stopped indexing. The tail of 4,000 tokens of a 50,000-message
conversation reads in 2.6 ms. On ``bench/bench_history.py``'s thread, whose tool
results (1 message in 10, 1-8 KB of JSON) make 7.5 MB of text per 10,000
messages, appending one message at a time onto those 10,000 took 0.15 ms
(median) with indexing and 0.08-0.09 ms without (same run).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any

from ..._errors import InvalidMessageError, StoreError
from .._records import ConversationInfo, default_db_path
from . import _history, _log, _rows, _search, _service
from ._checkpoint import Checkpointer
from ._migrations import MIGRATIONS, Migration, apply_migrations
from ._rows import CONV_COLUMNS

__all__ = ["SQLiteStore"]


class SQLiteStore:
    """Conversations in one SQLite file; implements `Store` (see the module docstring).

    ``path`` is a file path, ``":memory:"`` (a private in-memory database), or None
    for `default_db_path` (its directory is created then). ``clock`` gives "now" in
    seconds since the epoch, for timestamps and working-memory expiry.
    ``migrations`` replaces the registered list (tests use it to add one);
    ``applied_migrations`` lists the names this open applied.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 5.0,
        migrations: Sequence[Migration] | None = None,
    ) -> None:
        if path is None:
            path = default_db_path()
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = os.fspath(path)
        self.clock = clock
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store at {self.path}: {exc}") from exc
        self._checkpointer: Checkpointer | None = None
        try:
            (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if str(mode).lower() == "wal":
                # checkpoints run on their own thread, not inside a commit (_checkpoint.py)
                conn.execute("PRAGMA wal_autocheckpoint=0")
                self._checkpointer = Checkpointer(self.path)
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")
            self.applied_migrations = apply_migrations(
                conn, MIGRATIONS if migrations is None else migrations
            )
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot prepare the store at {self.path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- plumbing -------------------------------------------------------------------

    @contextmanager
    def _tx(self, write: bool, tenant: object) -> Iterator[sqlite3.Connection]:
        """One transaction (see the module docstring); sqlite3 errors become `StoreError`."""
        if tenant is not _rows.EVERY_TENANT:
            _rows.name(tenant, "tenant")
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"the store at {self.path} is closed")
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield conn
                    conn.execute("COMMIT")
                    if write and self._checkpointer is not None:
                        self._checkpointer.committed()
                except BaseException:
                    # The original error says more than a failed rollback would.
                    with suppress(sqlite3.Error):
                        conn.rollback()
                    raise
            except sqlite3.Error as exc:
                action = "write to" if write else "read from"
                raise StoreError(f"could not {action} the store at {self.path}: {exc}") from exc
            except UnicodeEncodeError as exc:
                # A string argument SQLite cannot take (a lone surrogate) that no
                # check before the transaction named; it was rolled back above.
                raise InvalidMessageError(
                    "text", f"holds a character UTF-8 cannot encode ({exc.reason})"
                ) from None

    def version(self, conversation: str, *, tenant: str) -> int:
        """The conversation's version (0 if the tenant has no such conversation).

        One primary-key lookup, outside any explicit transaction: the cheap
        "has anything changed?" of a cache keyed by version, in any process.
        """
        _rows.name(tenant, "tenant")
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"the store at {self.path} is closed")
            try:
                row = conn.execute(
                    "SELECT version FROM conversations WHERE tenant = ? AND id = ?",
                    (tenant, conversation),
                ).fetchone()
            except sqlite3.Error as exc:
                raise StoreError(f"could not read from the store at {self.path}: {exc}") from exc
            except UnicodeEncodeError as exc:
                raise InvalidMessageError(
                    "conversation", f"holds a character UTF-8 cannot encode ({exc.reason})"
                ) from None
        return 0 if row is None else int(row[0])

    # -- conversations ----------------------------------------------------------------

    def ensure_conversation(
        self,
        conversation: str,
        *,
        tenant: str,
        user: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationInfo:
        """Get the conversation, creating it for ``user`` if new (``metadata`` is used then).

        A conversation belongs to one user: an existing one of another user raises
        `InvalidMessageError`.
        """
        _rows.name(conversation, "conversation")
        _rows.name(user, "user")
        meta = _rows.dumps(dict(metadata or {}), "metadata")
        with self._tx(True, tenant) as conn:
            cid, _, _, made = _log.ensure(self, conn, conversation, tenant, user, meta)
            if made:
                _rows.bump(conn, cid)
            row = conn.execute(
                f"SELECT {CONV_COLUMNS} FROM conversations WHERE tenant = ? AND id = ?",
                (tenant, conversation),
            ).fetchone()
        return _rows.conversation_info(row)

    def get_conversation(self, conversation: str, *, tenant: str) -> ConversationInfo | None:
        with self._tx(False, tenant) as conn:
            row = conn.execute(
                f"SELECT {CONV_COLUMNS} FROM conversations WHERE tenant = ? AND id = ?",
                (tenant, conversation),
            ).fetchone()
        return None if row is None else _rows.conversation_info(row)

    def list_conversations(self, *, tenant: str, user: str | None = None) -> list[ConversationInfo]:
        """The tenant's conversations (only ``user``'s if given), most recently updated first."""
        sql = f"SELECT {CONV_COLUMNS} FROM conversations WHERE tenant = ?"
        params: tuple[str, ...] = (tenant,)
        if user is not None:
            sql, params = sql + " AND user = ?", (tenant, user)
        with self._tx(False, tenant) as conn:
            found = conn.execute(sql + " ORDER BY updated_at DESC, id", params).fetchall()
        return [_rows.conversation_info(r) for r in found]

    # -- messages ---------------------------------------------------------------------

    # -- the message log (_log.py) ------------------------------------------

    append = _log.append
    append_versioned = _log.append_versioned
    read = _log.read
    read_tail = _log.read_tail
    token_total = _log.token_total
    count_messages = _log.count_messages
    message_tokens = _log.message_tokens
    set_message_tokens = _log.set_message_tokens

    # -- summaries, compactions, working memory, pins (_history.py) ---------------

    read_outline = _history.read_outline
    save_summary = _history.save_summary
    save_summary_versioned = _history.save_summary_versioned
    latest_summary = _history.latest_summary
    summaries = _history.summaries
    log_compaction = _history.log_compaction
    log_compaction_versioned = _history.log_compaction_versioned
    save_compaction = _history.save_compaction
    save_compaction_versioned = _history.save_compaction_versioned
    compactions = _history.compactions
    put_working = _history.put_working
    put_working_versioned = _history.put_working_versioned
    get_working = _history.get_working
    collect_working = _history.collect_working
    pin = _history.pin
    pin_versioned = _history.pin_versioned
    unpin = _history.unpin
    unpin_versioned = _history.unpin_versioned
    pinned = _history.pinned

    # -- search (_search.py) ---------------------------------------------------------

    search = _search.search
    search_seqs = _search.search_seqs
    search_outlines = _search.search_outlines
    speaker_names = _search.speaker_names
    optimize_search_index = _search.optimize_search_index
    _indexed = _search.indexed
    _index_pending = staticmethod(_search.index_pending)

    # -- deleting a conversation, receipts, API keys (_service.py) ---------------------------

    delete_conversation = _service.delete_conversation
    record_receipt = _service.record_receipt
    receipts = _service.receipts
    create_key = _service.create_key
    find_key = _service.find_key
    list_keys = _service.list_keys
    revoke_key = _service.revoke_key

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise `StoreError`."""
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
