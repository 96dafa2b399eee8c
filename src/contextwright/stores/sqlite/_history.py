"""What the history part keeps beside the messages: summaries, compactions, working memory, pins.

These are the `SQLiteStore` methods over the ``summaries``, ``compactions``,
``working_memory`` and ``pinned`` tables, written as functions of the store and
assembled into the class in ``_sqlite.py``, and the one read of the message log
made for compaction (`read_outline`). They follow the store's rules (module docstring of
``_sqlite.py``): one transaction each, tenant resolved inside it, input checked
before it opens. Each row hangs off an existing conversation: writing one for a
conversation that was never created raises `InvalidMessageError`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError, InvalidMessageError, SummaryConflictError
from .._records import CompactionEntry, MessageOutline, PinnedItem, Summary, WorkingItem
from . import _rows as rows

if TYPE_CHECKING:
    from ._store import SQLiteStore

_SUMMARY = "s.version, s.from_seq, s.upto_seq, s.content, s.tokens, s.method, s.created_at, s.meta"
_COMPACTION = (
    "x.id, x.at, x.urgency, x.applied, x.tokens_before, x.tokens_after, x.summary_version, "
    "x.upto_seq, x.strategies, x.detail"
)


# Meta of a working-memory key that refers to a stored tool result (see put_refs).
_KIND = "kind"
_REF = "stored_tool_result"


def _ref_meta(seq: int, call_id: str) -> dict[str, Any]:
    return {_KIND: "tool_result", _REF: {"call_id": call_id, "seq": seq}}


def _stored_result(parts: str | None, call_id: object) -> str | None:
    """The text result of ``call_id`` in a stored message's parts, if it is there."""
    if parts is None:
        return None
    for p in json.loads(parts):
        if p.get("type") == "tool_result" and p.get("call_id") == call_id:
            content = p.get("content")
            if isinstance(content, str):
                return content
    return None


# -- compaction reads -------------------------------------------------------------------


def read_outline(
    self: SQLiteStore,
    conversation: str,
    *,
    tenant: str,
    after_seq: int = 0,
    upto_seq: int | None = None,
) -> list[MessageOutline]:
    """Outlines of the messages with ``after_seq < seq <= upto_seq``, by seq.

    What a compaction plans from (`MessageOutline`): the stored counts, roles,
    sizes, the text of all but tool messages and the names of tool calls,
    without building a `Message`. On 1,000 messages of which a fifth carry a
    1-8 KB tool result, `read` takes about 17 ms and this about 3.
    """
    after = rows.count(after_seq, "after_seq")
    upto = rows.MAX_SEQ if upto_seq is None else rows.count(upto_seq, "upto_seq")
    with self._tx(False, tenant) as conn:
        found = conn.execute(
            f"SELECT {rows.OUTLINE_COLUMNS} FROM messages m JOIN conversations c "
            "ON c.cid = m.cid WHERE c.tenant = ? AND c.id = ? AND m.seq > ? AND m.seq <= ? "
            "ORDER BY m.seq",
            (tenant, conversation, after, upto),
        ).fetchall()
    return [rows.outline(r) for r in found]


# -- summaries --------------------------------------------------------------------------


def save_summary(self: SQLiteStore, summary: Summary, *, tenant: str) -> Summary:
    """Store ``summary`` as the next version and return it with ``version`` set.

    Refused (`InvalidMessageError`): ``upto_seq`` beyond the conversation's last
    message; ``from_seq`` outside ``1..upto_seq``; a non-zero ``version`` other
    than the next one (another summariser got there first: re-read and retry).
    Not saved (`SummaryConflictError`, carrying the stored summary): an
    ``upto_seq`` the latest stored summary already reaches — another writer
    got there first, and this one would cover nothing new. The check and the
    insert are one transaction, so of two processes racing, one stands down.
    """
    return save_summary_versioned(self, summary, tenant=tenant)[0]


def save_summary_versioned(
    self: SQLiteStore, summary: Summary, *, tenant: str, expected: int | None = None
) -> tuple[Summary, int]:
    """`save_summary`, also returning the conversation's version it wrote.

    ``expected`` (if not None) is the latest summary version the caller read (0:
    none): if another was saved since, `SummaryConflictError` carries it and
    nothing is written.
    """
    with self._tx(True, tenant) as conn:
        saved = _insert_summary(self, conn, tenant, summary, expected)
        return saved, rows.bump(conn, rows.resolve(conn, tenant, summary.conversation)[0])


def save_compaction(
    self: SQLiteStore, summary: Summary, entry: CompactionEntry, *, tenant: str
) -> tuple[Summary, CompactionEntry]:
    """Save a summary and the log entry of the compaction that made it, atomically.

    The entry's ``summary_version`` is set to the new version. A process killed
    half-way leaves neither: a summary is never stored without its log entry.
    Refused as `save_summary` refuses, with nothing written.
    """
    saved, logged, _ = save_compaction_versioned(self, summary, entry, tenant=tenant)
    return saved, logged


def save_compaction_versioned(
    self: SQLiteStore,
    summary: Summary,
    entry: CompactionEntry,
    *,
    tenant: str,
    expected: int | None = None,
) -> tuple[Summary, CompactionEntry, int]:
    """`save_compaction`, also returning the conversation's version it wrote (one bump).

    ``expected`` as for `save_summary_versioned`.
    """
    rows.summary_row(summary)
    rows.compaction_row(entry)
    rows.same_conversation(summary, entry)
    with self._tx(True, tenant) as conn:
        saved = _insert_summary(self, conn, tenant, summary, expected)
        logged = _insert_compaction(
            self, conn, tenant, replace(entry, summary_version=saved.version)
        )
        return saved, logged, rows.bump(conn, rows.resolve(conn, tenant, entry.conversation)[0])


def _insert_summary(
    self: SQLiteStore,
    conn: sqlite3.Connection,
    tenant: str,
    summary: Summary,
    expected: int | None = None,
) -> Summary:
    version, from_seq, upto, tokens, method, meta = rows.summary_row(summary)
    if expected is not None:
        rows.count(expected, "expected")
    cid, last = rows.resolve(conn, tenant, summary.conversation)
    prev = conn.execute(
        "SELECT version, upto_seq FROM summaries WHERE cid = ? ORDER BY version DESC LIMIT 1",
        (cid,),
    ).fetchone()
    nxt, floor = (1, 0) if prev is None else (prev[0] + 1, prev[1])
    if expected is not None and expected != nxt - 1:
        if expected > nxt - 1:
            raise InvalidMessageError(
                "expected", f"is {expected} but the latest summary version is {nxt - 1}"
            )
        latest = conn.execute(
            f"SELECT {_SUMMARY} FROM summaries s WHERE s.cid = ? AND s.version = ?",
            (cid, nxt - 1),
        ).fetchone()
        raise SummaryConflictError(
            upto, rows.summary(summary.conversation, latest), expected=expected
        )
    if version not in (0, nxt):
        raise InvalidMessageError(
            "summary.version",
            f"is {version} but the next version is {nxt} (was another summary saved?)",
        )
    if upto > last:
        raise InvalidMessageError(
            "summary.upto_seq", f"is {upto} but the conversation's last seq is {last}"
        )
    if prev is not None and upto <= floor:
        latest = conn.execute(
            f"SELECT {_SUMMARY} FROM summaries s WHERE s.cid = ? AND s.version = ?",
            (cid, prev[0]),
        ).fetchone()
        raise SummaryConflictError(upto, rows.summary(summary.conversation, latest))
    conn.execute(
        "INSERT INTO summaries (cid, version, from_seq, upto_seq, tokens, method, "
        "created_at, meta, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (cid, nxt, from_seq, upto, tokens, method, summary.created_at, meta, summary.content),
    )
    return replace(summary, version=nxt)


def latest_summary(self: SQLiteStore, conversation: str, *, tenant: str) -> Summary | None:
    """The newest version, or None if the conversation has no summary."""
    found = _summaries(self, conversation, tenant, " DESC LIMIT 1")
    return found[0] if found else None


def summaries(self: SQLiteStore, conversation: str, *, tenant: str) -> list[Summary]:
    """Every version, oldest first."""
    return _summaries(self, conversation, tenant, "")


def _summaries(self: SQLiteStore, conversation: str, tenant: str, order: str) -> list[Summary]:
    with self._tx(False, tenant) as conn:
        found = conn.execute(
            f"SELECT {_SUMMARY} FROM summaries s JOIN conversations c ON c.cid = s.cid "
            f"WHERE c.tenant = ? AND c.id = ? ORDER BY s.version{order}",
            (tenant, conversation),
        ).fetchall()
    return [rows.summary(conversation, r) for r in found]


# -- compaction log ---------------------------------------------------------------------


def log_compaction(self: SQLiteStore, entry: CompactionEntry, *, tenant: str) -> CompactionEntry:
    """Append ``entry`` to the conversation's compaction log; return it with ``id`` set.

    ``upto_seq`` must not pass the last message, and ``summary_version``, if
    given, must be a stored summary of this conversation.
    """
    return log_compaction_versioned(self, entry, tenant=tenant)[0]


def log_compaction_versioned(
    self: SQLiteStore, entry: CompactionEntry, *, tenant: str
) -> tuple[CompactionEntry, int]:
    """`log_compaction`, also returning the conversation's version it wrote."""
    with self._tx(True, tenant) as conn:
        logged = _insert_compaction(self, conn, tenant, entry)
        return logged, rows.bump(conn, rows.resolve(conn, tenant, entry.conversation)[0])


def _insert_compaction(
    self: SQLiteStore, conn: sqlite3.Connection, tenant: str, entry: CompactionEntry
) -> CompactionEntry:
    values = rows.compaction_row(entry)
    cid, last = rows.resolve(conn, tenant, entry.conversation)
    if entry.upto_seq > last:
        raise InvalidMessageError(
            "entry.upto_seq",
            f"is {entry.upto_seq} but the conversation's last seq is {last}",
        )
    version = entry.summary_version
    if (
        version is not None
        and not conn.execute(
            "SELECT 1 FROM summaries WHERE cid = ? AND version = ?", (cid, version)
        ).fetchone()
    ):
        raise InvalidMessageError(
            "entry.summary_version", f"no summary version {version} is stored"
        )
    cur = conn.execute(
        "INSERT INTO compactions (cid, at, urgency, applied, tokens_before, tokens_after, "
        "summary_version, upto_seq, strategies, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (cid, *values),
    )
    return replace(entry, id=cur.lastrowid or 0, strategies=tuple(entry.strategies))


def compactions(self: SQLiteStore, conversation: str, *, tenant: str) -> list[CompactionEntry]:
    """The compaction log, oldest first."""
    with self._tx(False, tenant) as conn:
        found = conn.execute(
            f"SELECT {_COMPACTION} FROM compactions x JOIN conversations c ON c.cid = x.cid "
            "WHERE c.tenant = ? AND c.id = ? ORDER BY x.id",
            (tenant, conversation),
        ).fetchall()
    return [rows.compaction(conversation, r) for r in found]


# -- working memory ---------------------------------------------------------------------


def put_working(
    self: SQLiteStore,
    conversation: str,
    key: str,
    content: str,
    *,
    tenant: str,
    ttl: float,
    meta: Mapping[str, Any] | None = None,
) -> WorkingItem:
    """Keep ``content`` under ``key`` for ``ttl`` seconds (``math.inf``: until replaced).

    Putting an existing key replaces its value and restarts its clock.
    """
    return put_working_versioned(
        self, conversation, key, content, tenant=tenant, ttl=ttl, meta=meta
    )[0]


def put_working_versioned(
    self: SQLiteStore,
    conversation: str,
    key: str,
    content: str,
    *,
    tenant: str,
    ttl: float,
    meta: Mapping[str, Any] | None = None,
) -> tuple[WorkingItem, int]:
    """`put_working`, also returning the conversation's version it wrote."""
    rows.name(key, "key")
    if not isinstance(content, str):
        raise InvalidMessageError("content", f"must be a string, got {type(content).__name__}")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise ConfigError(f"ttl must be a positive number of seconds, got {ttl!r}")
    meta_json = rows.dumps(dict(meta or {}), "meta")
    with self._tx(True, tenant) as conn:
        cid, _ = rows.resolve(conn, tenant, conversation)
        now = self.clock()
        item = WorkingItem(key, conversation, content, now, now + ttl, json.loads(meta_json))
        conn.execute(
            "INSERT INTO working_memory (cid, key, created_at, expires_at, meta, content) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (cid, key) DO UPDATE SET "
            "created_at = excluded.created_at, expires_at = excluded.expires_at, "
            "meta = excluded.meta, content = excluded.content",
            (cid, key, now, item.expires_at, meta_json, content),
        )
        return item, rows.bump(conn, cid)


def put_refs(
    conn: sqlite3.Connection,
    cid: int,
    now: float,
    refs: list[tuple[int, str, str, float]],
) -> None:
    """Working-memory keys ``(seq, call_id, key, ttl)`` that read stored tool results.

    Written by `append` (``readback=``) in its transaction. The value is not
    copied: the row's meta names the message (``stored_tool_result``: seq and
    call id, never a cid, so the reference cannot leave the conversation) and
    `get_working` reads the result from it. Expiry and collection are those of
    any other key.
    """
    conn.executemany(
        "INSERT INTO working_memory (cid, key, created_at, expires_at, meta, content) "
        "VALUES (?, ?, ?, ?, ?, '') ON CONFLICT (cid, key) DO UPDATE SET "
        "created_at = excluded.created_at, expires_at = excluded.expires_at, "
        "meta = excluded.meta, content = excluded.content",
        [
            (cid, key, now, now + ttl, rows.dumps(_ref_meta(seq, call_id), "meta"))
            for seq, call_id, key, ttl in refs
        ],
    )


def get_working(
    self: SQLiteStore, conversation: str, key: str, *, tenant: str
) -> WorkingItem | None:
    """The value under ``key``, or None if there is none or it has expired.

    A key written by `append` (``readback=``) returns the tool result it refers
    to, read from the stored message in the same snapshot.
    """
    with self._tx(False, tenant) as conn:
        row = conn.execute(
            "SELECT w.created_at, w.expires_at, w.meta, w.content, m.parts "
            "FROM working_memory w JOIN conversations c ON c.cid = w.cid "
            "LEFT JOIN messages m ON m.cid = w.cid "
            f"AND m.seq = json_extract(w.meta, '$.{_REF}.seq') "
            "WHERE c.tenant = ? AND c.id = ? AND w.key = ? AND w.expires_at > ?",
            (tenant, conversation, key, self.clock()),
        ).fetchone()
    if row is None:
        return None
    meta = json.loads(row[2])
    content = row[3]
    ref = meta.get(_REF)
    if isinstance(ref, dict):
        content = _stored_result(row[4], ref.get("call_id"))
        if content is None:
            return None
    return WorkingItem(key, conversation, content, row[0], row[1], meta)


def collect_working(self: SQLiteStore, *, now: float | None = None) -> int:
    """Delete every value expired at ``now`` (default: the clock), in all tenants; return how many.

    Housekeeping across tenants is safe here: it returns a count, never data.
    """
    when = self.clock() if now is None else now
    with self._tx(True, rows.EVERY_TENANT) as conn:
        # a conversation that loses values is written to: its version moves
        conn.execute(
            "UPDATE conversations SET version = version + 1 WHERE cid IN "
            "(SELECT DISTINCT cid FROM working_memory WHERE expires_at <= ?)",
            (when,),
        )
        cur = conn.execute("DELETE FROM working_memory WHERE expires_at <= ?", (when,))
    return cur.rowcount


# -- pins -------------------------------------------------------------------------------


def pin(
    self: SQLiteStore, conversation: str, content: str, *, tenant: str, priority: int = 0
) -> PinnedItem:
    """Pin ``content`` to the conversation; lower ``priority`` is more important."""
    return pin_versioned(self, conversation, content, tenant=tenant, priority=priority)[0]


def pin_versioned(
    self: SQLiteStore, conversation: str, content: str, *, tenant: str, priority: int = 0
) -> tuple[PinnedItem, int]:
    """`pin`, also returning the conversation's version it wrote."""
    if not isinstance(content, str):
        raise InvalidMessageError("content", f"must be a string, got {type(content).__name__}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigError(f"priority must be an integer, got {priority!r}")
    with self._tx(True, tenant) as conn:
        cid, _ = rows.resolve(conn, tenant, conversation)
        now = self.clock()
        cur = conn.execute(
            "INSERT INTO pinned (cid, priority, created_at, content) VALUES (?, ?, ?, ?)",
            (cid, int(priority), now, content),
        )
        item = PinnedItem(cur.lastrowid or 0, conversation, content, int(priority), now)
        return item, rows.bump(conn, cid)


def unpin(self: SQLiteStore, conversation: str, pin_id: int, *, tenant: str) -> bool:
    """Remove a pin; False if this conversation has no pin with that id."""
    return unpin_versioned(self, conversation, pin_id, tenant=tenant)[0]


def unpin_versioned(
    self: SQLiteStore, conversation: str, pin_id: int, *, tenant: str
) -> tuple[bool, int]:
    """`unpin`, also returning the conversation's version after it (moved only if removed)."""
    with self._tx(True, tenant) as conn:
        row = conn.execute(
            "SELECT cid, version FROM conversations WHERE tenant = ? AND id = ?",
            (tenant, conversation),
        ).fetchone()
        if row is None:
            return False, 0
        cid, version = row
        cur = conn.execute("DELETE FROM pinned WHERE id = ? AND cid = ?", (pin_id, cid))
        if cur.rowcount == 0:
            return False, int(version)
        return True, rows.bump(conn, cid)


def pinned(self: SQLiteStore, conversation: str, *, tenant: str) -> list[PinnedItem]:
    """The pins, most important (lowest priority number) first, then in pin order."""
    with self._tx(False, tenant) as conn:
        found = conn.execute(
            "SELECT p.id, p.content, p.priority, p.created_at FROM pinned p "
            "JOIN conversations c ON c.cid = p.cid WHERE c.tenant = ? AND c.id = ? "
            "ORDER BY p.priority, p.id",
            (tenant, conversation),
        ).fetchall()
    return [PinnedItem(r[0], conversation, r[1], r[2], r[3]) for r in found]
