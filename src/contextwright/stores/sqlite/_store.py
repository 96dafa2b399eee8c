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
  serialised); `AsyncStore` gives each store one worker thread of its own.

- **Indexed when searched.** Appending does not write the full-text index: a
  search first indexes the messages its conversation gained since the last one
  (``conversations.fts_seq``, m005; `_indexed`), in a write transaction of its
  own. Writing a message's FTS5 segment was about 40 % of appending it, while
  the index is needed only below a recall's window (`search_outlines` indexes in
  batches, once the window has moved past what is indexed).

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

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any

from ..._errors import ConfigError, InvalidMessageError, StoreError
from ...model._messages import ROLES, Message
from .._records import ConversationInfo, MessageOutline, SearchHit, default_db_path, not_owner
from . import _rows
from ._checkpoint import Checkpointer
from ._fts import (
    FTS_TABLES,
    SEQ_BITS,
    fts_range,
    fts_table,
    match_query,
    search_outlines,
    unit_expressions,
    write_index,
)
from ._history import HistoryTables
from ._migrations import MIGRATIONS, Migration, apply_migrations
from ._rows import CONV_COLUMNS, MSG_COLUMNS

__all__ = ["SQLiteStore"]

_IN_CONV = "JOIN conversations c ON c.cid = m.cid WHERE c.tenant = ? AND c.id = ?"


_STOP_LIST = """a an and are as at be been by can could did do does for from had has have he her him
    his how i if in into is it its just me my of on or our she so than that the their
    them then there these they this to up us was we were what when where which who whom
    why will with would you your"""
_STOP = frozenset(_STOP_LIST.split())
_WORD = re.compile(r"[A-Za-z]+")


# FTS5 keeps a transaction's new postings in a hash table and writes them out as a
# segment whenever it holds more than 'hashsize' bytes (1 MB by default), merging
# segments as they pile up. A 10,000-message import indexes 7.5 MB: at 16 MB it is
# written once, and its indexing took 0.15 s instead of 0.20 s. The setting is
# stored in the index's config table, so it is written once per file (by the first
# bulk append); it only bounds the memory a single large transaction may use.
_BULK_ROWS = 1000
_FTS_HASH_BYTES = 16 << 20


def _size_fts_hash(conn: sqlite3.Connection) -> None:
    for table in FTS_TABLES:
        row = conn.execute(f"SELECT v FROM {table}_config WHERE k = 'hashsize'").fetchone()
        if row is None or row[0] != _FTS_HASH_BYTES:
            with suppress(sqlite3.OperationalError):  # an SQLite without the option
                conn.execute(
                    f"INSERT INTO {table} ({table}, rank) VALUES ('hashsize', ?)",
                    (_FTS_HASH_BYTES,),
                )


def _focus(query: str) -> str:
    """``query`` without English function words (CJK and other text untouched)."""
    return _WORD.sub(lambda m: "" if m.group(0).lower() in _STOP else m.group(0), query)


class SQLiteStore(HistoryTables):
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
        self._writes = 0  # write transactions committed through this store (see change_token)
        self._last_write = threading.local()
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
    def _tx(
        self, write: bool, tenant: object, *, content: bool = True
    ) -> Iterator[sqlite3.Connection]:
        """One transaction (see the module docstring); sqlite3 errors become `StoreError`.

        ``content=False`` marks a write that changes no content (the full-text index
        catching up): it leaves this store's change token as it was.
        """
        if tenant is not _rows.EVERY_TENANT:
            _rows.name(tenant, "tenant")
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"the store at {self.path} is closed")
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                if write:
                    # Holding the write lock: no other connection can commit until we
                    # do, and our own commit leaves data_version as it is.
                    (version,) = conn.execute("PRAGMA data_version").fetchone()
                try:
                    yield conn
                    conn.execute("COMMIT")
                    if write and content:
                        self._writes += 1
                        self._last_write.tokens = (
                            (version, self._writes - 1), (version, self._writes)
                        )  # fmt: skip
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

    def change_token(self) -> tuple[int, int]:
        """A value that changes whenever anything is committed to the database.

        SQLite's ``data_version`` (which moves when another connection, in this
        process or another, commits) and the count of this store's own write
        transactions. Equal tokens mean nothing was written in between, so a
        cache of what was read before the first one is still current: it is how
        a `Conversations` tail skips asking for the conversation on every build.
        """
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"the store at {self.path} is closed")
            try:
                (version,) = conn.execute("PRAGMA data_version").fetchone()
            except sqlite3.Error as exc:
                raise StoreError(f"could not read from the store at {self.path}: {exc}") from exc
            return version, self._writes

    def last_write_tokens(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """``(before, after)`` change tokens of the last write this thread committed.

        ``before`` is the token just before that write (what any other write
        committed earlier left), ``after`` the token right after it. A cache that
        was current at ``before`` and takes in exactly that write is current at
        ``after``. None if this thread has committed nothing.
        """
        return getattr(self._last_write, "tokens", None)

    def _ensure(
        self, conn: sqlite3.Connection, conversation: str, tenant: str, user: str, metadata: str
    ) -> tuple[int, int]:
        """(cid, last_seq), creating the conversation for ``user``; another user's raises."""
        row = conn.execute(
            "SELECT cid, last_seq, user FROM conversations WHERE tenant = ? AND id = ?",
            (tenant, conversation),
        ).fetchone()
        if row is not None:
            if row[2] != user:
                raise not_owner(conversation, tenant, user)
            return row[0], row[1]
        (cid,) = conn.execute("SELECT coalesce(max(cid), 0) + 1 FROM conversations").fetchone()
        now = self.clock()
        conn.execute(
            "INSERT INTO conversations (tenant, id, cid, user, created_at, updated_at, metadata) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (tenant, conversation, cid, user, now, now, metadata),
        )
        return cid, 0

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
            self._ensure(conn, conversation, tenant, user, meta)
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

    def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        tenant: str,
        user: str = "anonymous",
        tokens: Sequence[int] | None = None,
        counter: str = "",
    ) -> list[Message]:
        """Store ``messages`` at the end of the conversation and return them with ``seq`` set.

        The conversation is created for ``user`` if needed (another user's raises).
        Sequence numbers continue from the conversation's last one, gapless, in one
        ``BEGIN IMMEDIATE`` transaction: concurrent appenders, in any process, are
        serialised. ``created_at`` defaults to now; an incoming ``seq`` is ignored.
        ``tokens`` are the messages' counts by the counter named ``counter`` (the
        key `count_message` caches under, i.e. ``TokenCounter.name``).

        A message whose id is already stored in this conversation with the same
        role, parts, name and metadata is not stored again: its stored copy is
        returned (safe retries). The same id with other content raises
        `InvalidMessageError` and nothing of the batch is written.
        """
        return self._append(conversation, messages, tenant, user, tokens, counter, ())

    def append_with_readback(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        tenant: str,
        user: str = "anonymous",
        tokens: Sequence[int] | None = None,
        counter: str = "",
        readback: Sequence[tuple[int, str, str, float]] = (),
    ) -> list[Message]:
        """`append`, and in the same transaction working-memory keys that read stored tool results.

        ``readback`` holds ``(i, call_id, key, ttl)``: ``get_working(key)`` returns,
        for ``ttl`` seconds, the result of call ``call_id`` in ``messages[i]`` (a
        tool message) as it is stored. This is how `Conversations` offloads a large
        tool result: the stored message already keeps the original verbatim, so
        working memory holds a reference to it instead of a second copy (4.5 MB
        less to write per 10,000 messages of the benchmark thread), and the
        pointer is written with the message or not at all.
        """
        return self._append(conversation, messages, tenant, user, tokens, counter, readback)

    def _append(
        self,
        conversation: str,
        messages: Sequence[Message],
        tenant: str,
        user: str,
        tokens: Sequence[int] | None,
        counter: str,
        readback: Sequence[tuple[int, str, str, float]],
    ) -> list[Message]:
        _rows.name(conversation, "conversation")
        _rows.name(user, "user")
        if not isinstance(counter, str):
            raise ConfigError(f"counter must be a string, got {counter!r}")
        batch = _rows.prepare_messages(messages, tokens)
        refs = _rows.readback_refs(readback, batch)
        with self._tx(True, tenant) as conn:
            cid, seq = self._ensure(conn, conversation, tenant, user, "{}")
            # Rows already stored under the batch's ids (retries), then the batch's own.
            known: dict[str, Sequence[Any]] = {}
            if seq and batch:
                # one id (a turn) is looked up directly; json_each spares a batch
                # a statement with thousands of placeholders
                if len(batch) == 1:
                    where, arg = "m.id = ?", batch[0].message.id
                else:
                    where = "m.id IN (SELECT value FROM json_each(?))"
                    arg = json.dumps([p.message.id for p in batch])
                for row in conn.execute(
                    f"SELECT {MSG_COLUMNS} FROM messages m WHERE m.cid = ? AND {where}", (cid, arg)
                ):
                    known[row[3]] = row
            now = self.clock()
            if isinstance(now, bool) or not isinstance(now, (int, float)):
                raise ConfigError(f"the store's clock must return seconds, got {now!r}")
            new: list[tuple[Any, ...]] = []
            saved: dict[str, Message] = {}
            out: list[Message] = []
            total = 0
            for i, p in enumerate(batch):
                m = p.message
                mid = m.id
                if mid in known:
                    row = known[mid]
                    if not p.same_content(row):
                        raise InvalidMessageError(
                            f"messages[{i}].id",
                            f"message id {mid!r} is already stored in conversation "
                            f"{conversation!r} (seq {row[0]}) with different content",
                        )
                    out.append(saved.get(mid) or _rows.message(row))
                    continue
                seq += 1
                created = now if m.created_at is None else m.created_at
                n = p.tokens
                row = (seq, n, counter if n is not None else "", mid, m.role, created, m.name, p.meta, p.parts)  # fmt: skip
                new.append((cid, p.size, *row))
                known[mid] = row
                # validated when built; only seq and created_at are new (checked above)
                saved[mid] = msg = m._stamped(seq, created)
                if n is not None:
                    total += n
                    if counter:
                        msg._token_cache[counter] = n  # as _rows.message does for read
                out.append(msg)
            if new:
                self._insert(conn, cid, new)
                conn.execute(
                    "UPDATE conversations SET last_seq = ?, message_count = message_count + ?, "
                    "token_total = token_total + ?, updated_at = ? WHERE cid = ?",
                    (seq, len(new), total, now, cid),
                )
            if refs:
                self._put_refs(
                    conn,
                    cid,
                    now,
                    [(out[i].seq or 0, call, key, ttl) for i, call, key, ttl in refs],
                )
        return out

    @staticmethod
    def _insert(conn: sqlite3.Connection, cid: int, rows: list[tuple[Any, ...]]) -> None:
        # The index rowid will carry the conversation and seq (see _fts.fts_rowid).
        if rows[-1][2] >= 1 << SEQ_BITS:
            raise StoreError(f"conversation {cid} has more than {(1 << SEQ_BITS) - 1} messages")
        conn.executemany(
            "INSERT INTO messages (cid, size, seq, tokens, counter, id, role, created_at, "
            "name, metadata, parts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def read(
        self,
        conversation: str,
        *,
        tenant: str,
        after_seq: int = 0,
        upto_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Message]:
        """Messages with ``after_seq < seq <= upto_seq``, by seq (newest first if asked).

        ``limit`` applies in the chosen order: ``limit=5, newest_first=True`` gives
        the five newest.
        """
        after = _rows.count(after_seq, "after_seq")
        upto = _rows.MAX_SEQ if upto_seq is None else _rows.count(upto_seq, "upto_seq")
        n = -1 if limit is None else _rows.count(limit, "limit")
        order = "DESC" if newest_first else "ASC"
        with self._tx(False, tenant) as conn:
            rows = conn.execute(
                f"SELECT {MSG_COLUMNS} FROM messages m {_IN_CONV} AND m.seq > ? AND m.seq <= ? "
                f"ORDER BY m.seq {order} LIMIT ?",
                (tenant, conversation, after, upto, n),
            ).fetchall()
        return [_rows.message(r) for r in rows]

    def read_tail(
        self,
        conversation: str,
        *,
        tenant: str,
        max_tokens: int,
        after_seq: int = 0,
        counter: str = "",
    ) -> list[Message]:
        """The newest messages (``seq > after_seq``) whose counts fit ``max_tokens``, oldest first.

        Walks the seq index backwards in growing pages reading only the counts, and
        stops at the first message that does not fit, so the cost follows the size
        of the tail, not of the conversation. A message counts by its stored count
        when that was made by ``counter``. Otherwise its count is *unknown*: it is
        charged a deliberately low estimate (``_rows.estimate``) and returned all
        the same, so the tail may come back over budget, never short of it. The
        caller must recount the unknown ones — `count_message` does so by itself,
        as known counts come back primed in its cache — trim the oldest messages
        while over, and may store the recounts with `set_message_tokens`.
        Tool-call units are not considered: the tail may start inside one.
        """
        after = _rows.count(after_seq, "after_seq")
        budget = _rows.count(max_tokens, "max_tokens")
        with self._tx(False, tenant) as conn:
            row = conn.execute(
                "SELECT cid, last_seq FROM conversations WHERE tenant = ? AND id = ?",
                (tenant, conversation),
            ).fetchone()
            if row is None:
                return []
            cid, first = row[0], row[1] + 1
            spent, page, done = 0, 32, False
            while not done:
                chunk = conn.execute(
                    "SELECT seq, tokens, counter, size, role FROM messages WHERE cid = ? AND seq > ? "
                    "AND seq < ? ORDER BY seq DESC LIMIT ?",
                    (cid, after, first, page),
                ).fetchall()
                done = len(chunk) < page
                for seq, tokens, made_by, size, role in chunk:
                    known = tokens is not None and made_by == counter
                    cost = tokens if known else _rows.estimate(tokens, size, role)
                    if spent + cost > budget:
                        done = True
                        break
                    spent += cost
                    first = seq
                page = min(page * 4, 2048)
            rows = conn.execute(
                f"SELECT {MSG_COLUMNS} FROM messages m WHERE m.cid = ? AND m.seq >= ? ORDER BY m.seq",
                (cid, first),
            ).fetchall()
        return [_rows.message(r) for r in rows]

    def token_total(self, conversation: str, *, tenant: str, after_seq: int = 0) -> tuple[int, int]:
        """(message count, sum of stored counts) of the messages with ``seq > after_seq``.

        O(1) for ``after_seq=0`` (the conversation row's running totals); a range
        sum over the seq index otherwise. Uncounted messages add 0 to the sum.
        """
        after = _rows.count(after_seq, "after_seq")
        with self._tx(False, tenant) as conn:
            if after == 0:
                row = conn.execute(
                    "SELECT message_count, token_total FROM conversations "
                    "WHERE tenant = ? AND id = ?",
                    (tenant, conversation),
                ).fetchone()
            else:
                row = conn.execute(
                    f"SELECT count(*), coalesce(sum(m.tokens), 0) FROM messages m {_IN_CONV} "
                    "AND m.seq > ?",
                    (tenant, conversation, after),
                ).fetchone()
        return (0, 0) if row is None else (row[0], row[1])

    def count_messages(self, conversation: str, *, tenant: str, role: str | None = None) -> int:
        """How many messages the conversation holds (of ``role``, if given)."""
        with self._tx(False, tenant) as conn:
            if role is None:
                row = conn.execute(
                    "SELECT message_count FROM conversations WHERE tenant = ? AND id = ?",
                    (tenant, conversation),
                ).fetchone()
            else:
                row = conn.execute(
                    f"SELECT count(*) FROM messages m {_IN_CONV} AND m.role = ?",
                    (tenant, conversation, role),
                ).fetchone()
        return 0 if row is None else int(row[0])

    def message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        seqs: Sequence[int],
        counter: str | None = None,
    ) -> dict[int, int]:
        """Stored counts by seq, for those of ``seqs`` that have one (by ``counter``, if given)."""
        wanted = json.dumps([_rows.count(s, f"seqs[{i}]") for i, s in enumerate(seqs)])
        sql = (
            f"SELECT m.seq, m.tokens FROM messages m {_IN_CONV} AND m.tokens IS NOT NULL "
            "AND m.seq IN (SELECT value FROM json_each(?))"
        )
        params: tuple[Any, ...] = (tenant, conversation, wanted)
        if counter is not None:
            sql, params = sql + " AND m.counter = ?", (*params, counter)
        with self._tx(False, tenant) as conn:
            return dict(conn.execute(sql, params).fetchall())

    def set_message_tokens(
        self, conversation: str, *, tenant: str, counts: Mapping[int, int], counter: str
    ) -> None:
        """Store recounted tokens (by ``counter``) for the messages with the given seqs.

        The conversation's running ``token_total`` moves by the difference, in the
        same transaction. A seq that is not stored raises and nothing is written.
        """
        self.set_message_tokens_with_readback(
            conversation, tenant=tenant, counts=counts, counter=counter
        )

    def set_message_tokens_with_readback(
        self,
        conversation: str,
        *,
        tenant: str,
        counts: Mapping[int, int],
        counter: str,
        readback: Sequence[tuple[int, str, str, float]] = (),
    ) -> None:
        """`set_message_tokens`, and in the same transaction working-memory keys for tool results.

        ``readback`` holds ``(seq, call_id, key, ttl)`` of messages in ``counts``, as
        `append_with_readback` writes them. `Conversations` uses it when it counts
        messages that a bulk import stored uncounted.
        """
        if not isinstance(counter, str):
            raise ConfigError(f"counter must be a string, got {counter!r}")
        refs = []
        for j, ref in enumerate(readback):
            if not isinstance(ref, tuple) or len(ref) != 4 or ref[0] not in counts:
                raise InvalidMessageError(
                    f"readback[{j}]", "must be a tuple (seq, call_id, key, ttl) of a counted seq"
                )
            seq, call_id, key, ttl = ref
            _rows.name(key, "key")
            if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
                raise ConfigError(f"ttl must be a positive number of seconds, got {ttl!r}")
            refs.append((seq, call_id, key, float(ttl)))
        updates = [
            (
                _rows.count(n, f"counts[{seq}]"),
                counter,
                _rows.count(seq, f"counts[{seq!r}]", minimum=1),
            )
            for seq, n in counts.items()
        ]
        if not updates:
            return
        with self._tx(True, tenant) as conn:
            cid, _ = _rows.resolve(conn, tenant, conversation)
            old = dict(
                conn.execute(
                    "SELECT seq, coalesce(tokens, 0) FROM messages WHERE cid = ? "
                    "AND seq IN (SELECT value FROM json_each(?))",
                    (cid, json.dumps([u[2] for u in updates])),
                ).fetchall()
            )
            for _, _, seq in updates:
                if seq not in old:
                    raise InvalidMessageError(f"counts[{seq}]", "no stored message has this seq")
            conn.executemany(
                "UPDATE messages SET tokens = ?, counter = ? WHERE cid = ? AND seq = ?",
                [(n, name, cid, seq) for n, name, seq in updates],
            )
            delta = sum(n for n, _, _ in updates) - sum(old.values())
            conn.execute(
                "UPDATE conversations SET token_total = token_total + ? WHERE cid = ?", (delta, cid)
            )
            if refs:
                self._put_refs(conn, cid, self.clock(), refs)

    # -- search -----------------------------------------------------------------------

    def optimize_search_index(self) -> None:
        """Index every message not yet indexed, then merge the indexes' segments (FTS5 ``optimize``).

        Messages are indexed when their conversation is first searched (see
        `_indexed`); after a bulk import this does it ahead of time, in one
        transaction, and leaves one segment per index, so that the first search
        neither indexes nor walks many segments. It rewrites the whole index of
        every conversation in the file, holding the write lock.
        """
        with self._tx(True, _rows.EVERY_TENANT) as conn:
            behind = conn.execute("SELECT cid FROM conversations WHERE fts_seq < last_seq")
            for (cid,) in behind.fetchall():
                self._index_pending(conn, cid)
            for table in FTS_TABLES:
                conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")

    def _indexed(self, tenant: str, conversation: str, before_seq: int | None = None) -> int | None:
        """The conversation's cid (None if the tenant has none such), its messages indexed.

        Appending does not index (m005): the messages stored since the last search
        are indexed here first, in one write transaction, which re-reads how far
        the index goes under the write lock (another process may have done it).
        With ``before_seq`` only the messages below it need to be in the index (a
        search below the recent window): the index is brought up to the newest
        message only once the window has moved past it, in one batch.
        """
        with self._tx(False, tenant) as conn:
            row = conn.execute(
                "SELECT cid, fts_seq, last_seq FROM conversations WHERE tenant = ? AND id = ?",
                (tenant, conversation),
            ).fetchone()
        if row is None:
            return None
        cid, done, last = row
        need = last if before_seq is None else min(last, before_seq - 1)
        if done < need:
            with self._tx(True, tenant, content=False) as conn:
                self._index_pending(conn, cid)
        return int(cid)

    @staticmethod
    def _index_pending(conn: sqlite3.Connection, cid: int) -> None:
        """Index conversation ``cid``'s messages after its ``fts_seq`` (in the caller's write tx)."""
        done, last = conn.execute(
            "SELECT fts_seq, last_seq FROM conversations WHERE cid = ?", (cid,)
        ).fetchone()
        if done >= last:
            return
        if last - done >= _BULK_ROWS:
            _size_fts_hash(conn)
        cursor = conn.execute(
            f"SELECT {MSG_COLUMNS} FROM messages m WHERE m.cid = ? AND m.seq > ? ORDER BY m.seq",
            (cid, done),
        )
        while page := cursor.fetchmany(2000):
            write_index(conn, [(cid, _rows.message(row)) for row in page])
        conn.execute("UPDATE conversations SET fts_seq = ? WHERE cid = ?", (last, cid))

    def search(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        roles: Sequence[str] = ("user", "assistant"),
    ) -> list[SearchHit]:
        """Messages of this conversation matching ``query``, best first (BM25; see ``_fts.py``).

        English and CJK alike; the query is never parsed as FTS5 syntax. Only
        messages with ``seq < before_seq`` (if given) and a role in ``roles``.
        The first search after appends indexes the conversation's new messages
        (a write transaction; see `_indexed`), so it takes longer than the next.
        """
        rows = self._search(conversation, query, tenant, limit, before_seq, roles, MSG_COLUMNS)
        return [SearchHit(_rows.message(r[:-1]), r[-1]) for r in rows]

    def search_seqs(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        roles: Sequence[str] | None = ("user", "assistant"),
    ) -> list[tuple[int, float]]:
        """`search`, as (seq, score) pairs: for callers that hold the text already.

        Recall keeps every turn in process; reading and decoding the matching
        messages was most of its search (1.5 ms of a one-word search at 10,000
        messages). ``roles=None`` searches the messages' index unfiltered (user,
        assistant, system and developer messages; not tool results) without
        reading the messages table at all, for a caller that knows which
        sequence numbers it wants: the role check was a third of a search.
        """
        if roles is None:
            return self._search_index(conversation, query, tenant, limit, before_seq)
        rows = self._search(conversation, query, tenant, limit, before_seq, roles, "m.seq")
        return [(r[0], r[1]) for r in rows]

    def _search_index(
        self, conversation: str, query: str, tenant: str, limit: int, before_seq: int | None
    ) -> list[tuple[int, float]]:
        """(seq, score) from the messages' full-text index alone, best first."""
        n = _rows.count(limit, "limit")
        expression = self._expression(query)
        if expression is None or n == 0:
            return []
        upper = None if before_seq is None else _rows.count(before_seq, "before_seq")
        cid = self._indexed(tenant, conversation)
        if cid is None:
            return []
        with self._tx(False, tenant) as conn:
            lo, hi = fts_range(cid, upper)
            table = fts_table("user")
            got = conn.execute(
                f"SELECT rowid & {(1 << SEQ_BITS) - 1}, bm25({table}) AS rank FROM {table} "
                f"WHERE {table} MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rank, rowid DESC "
                "LIMIT ?",
                (expression, lo, hi, n),
            ).fetchall()
        return [(seq, -rank) for seq, rank in got]

    def speaker_names(
        self, conversation: str, *, tenant: str, after_seq: int = 0, upto_seq: int | None = None
    ) -> list[str]:
        """The distinct names of the user and assistant messages with ``after_seq < seq <= upto_seq``, sorted.

        Recall reads a conversation's speakers from here (names in a question are a
        prior, not search words); the partial index ``messages_by_name`` (m006)
        answers it without reading the messages.
        """
        after = _rows.count(after_seq, "after_seq")
        upto = _rows.MAX_SEQ if upto_seq is None else _rows.count(upto_seq, "upto_seq")
        with self._tx(False, tenant) as conn:
            found = conn.execute(
                "SELECT DISTINCT m.name FROM messages m JOIN conversations c ON c.cid = m.cid "
                "WHERE c.tenant = ? AND c.id = ? AND m.name IS NOT NULL "
                "AND m.role IN ('user', 'assistant') AND m.seq > ? AND m.seq <= ? ORDER BY m.name",
                (tenant, conversation, after, upto),
            ).fetchall()
        return [name for (name,) in found]

    def search_outlines(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        match_budget: int | None = None,
        around: int = 0,
    ) -> tuple[list[tuple[int, float]], list[MessageOutline]]:
        """The best ``limit`` messages for ``query`` as (seq, score), and the outlines around them.

        Searches the messages' index (user, assistant, system and developer
        messages; not tool results) below ``before_seq``, BM25, best first, ties
        to the newer message. The query's terms are taken as given (no stop
        words dropped). ``match_budget`` bounds the work: the terms are taken
        rarest first while the messages holding them add up to at most that many
        (BM25 scores every match; common words made a search grow with the
        conversation). The second list holds the outlines (`MessageOutline`, by
        seq) of every message within ``around`` sequence numbers of a hit, the
        hits included, below ``before_seq``: what a caller ranking neighbours
        needs, in the same snapshot, in one call.
        """
        n = _rows.count(limit, "limit")
        reach = _rows.count(around, "around")
        budget = None if match_budget is None else _rows.count(match_budget, "match_budget")
        if not isinstance(query, str):
            raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
        upper = None if before_seq is None else _rows.count(before_seq, "before_seq")
        units = unit_expressions(query)
        if not units or n == 0 or upper == 0:
            return [], []
        while True:  # one read transaction, unless the index must catch up first
            with self._tx(False, tenant) as conn:
                row = conn.execute(
                    "SELECT cid, fts_seq, last_seq FROM conversations WHERE tenant = ? AND id = ?",
                    (tenant, conversation),
                ).fetchone()
                if row is None:
                    return [], []
                cid, done, last = row
                if done >= (last if upper is None else min(last, upper - 1)):
                    return search_outlines(conn, cid, units, upper, n, budget, reach)
            with self._tx(True, tenant, content=False) as conn:
                self._index_pending(conn, cid)

    @staticmethod
    def _expression(query: str) -> str | None:
        """The FTS5 expression of ``query`` (see `search`), None if it has no terms."""
        if not isinstance(query, str):
            raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
        # Function words match nearly every row and BM25 must score every match:
        # dropping them made search 3x faster on a 10,000-turn conversation.
        return match_query(_focus(query)) or match_query(query)

    def _search(
        self,
        conversation: str,
        query: str,
        tenant: str,
        limit: int,
        before_seq: int | None,
        roles: Sequence[str],
        columns: str,
    ) -> list[tuple[Any, ...]]:
        """Rows of ``columns`` with their score last, best first (see `search`)."""
        n = _rows.count(limit, "limit")
        bad = [r for r in roles if r not in ROLES]
        if isinstance(roles, str) or bad:
            raise ConfigError(f"roles must be a sequence of {', '.join(ROLES)}; got {roles!r}")
        expression = self._expression(query)
        if expression is None or n == 0 or not roles:
            return []
        upper = None if before_seq is None else _rows.count(before_seq, "before_seq")
        wanted = set(roles)
        tables = sorted({fts_table(r) for r in wanted})
        cid = self._indexed(tenant, conversation)
        if cid is None:
            return []
        with self._tx(False, tenant) as conn:
            lo, hi = fts_range(cid, upper)
            # Two steps: rank in the FTS index alone (FTS5 sorts by rank with a
            # bounded heap, reading no message rows), then fetch the few winners.
            # Joining first made SQLite carry every matching message's parts
            # through the sort: 25 ms at 10,000 messages, 235 ms at 100,000.
            # Roles are filtered after ranking (one index holds four roles), so
            # ask for more. With tool results asked for too, the two indexes'
            # BM25 scores are merged as they are (each index has its own
            # statistics: close enough to interleave, not an exact common scale).
            # Few rows are dropped by role when both user and assistant turns are
            # wanted (only system and developer messages share their index).
            sparse = {"user", "assistant"} <= wanted or wanted == {"tool"}
            pool = n + 20 if sparse else max(4 * n, n + 20)
            marks = ", ".join("?" * len(wanted))
            while True:
                ranked: list[tuple[int, float]] = []
                exhausted = True
                for table in tables:
                    got = conn.execute(
                        f"SELECT rowid & {(1 << SEQ_BITS) - 1}, bm25({table}) AS rank FROM {table} "
                        f"WHERE {table} MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rank LIMIT ?",
                        (expression, lo, hi, pool),
                    ).fetchall()
                    ranked += got
                    exhausted = exhausted and len(got) < pool
                score = dict(ranked)
                found = (
                    conn.execute(
                        f"SELECT {columns}, m.seq FROM messages m WHERE m.cid = ? AND m.seq IN "
                        f"({', '.join('?' * len(score))}) AND m.role IN ({marks})",
                        (cid, *score, *wanted),
                    ).fetchall()
                    if score
                    else []
                )
                # Roles are filtered after ranking: if that left too few, widen the pool.
                if len(found) >= n or exhausted:
                    break
                pool *= 4
        # best first; among equal scores the newer message
        found.sort(key=lambda r: (score[r[-1]], -r[-1]))
        return [(*r[:-1], -score[r[-1]]) for r in found[:n]]

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
