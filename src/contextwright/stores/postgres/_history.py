"""The PostgreSQL backend beside its message log: outlines, summaries, compactions,
working memory and pins.

`PostgresBackend` methods written as functions of the backend, with the
semantics and checks of ``sqlite/_history.py``: input checked before anything is
sent, each write one transaction that locks the conversation's row first (so two
processes saving a summary at once are serialised, and one of them stands down
with `SummaryConflictError`) and moves its version by one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError, InvalidMessageError, SummaryConflictError
from .._contract import Written
from .._records import CompactionEntry, MessageOutline, PinnedItem, Summary, WorkingItem
from ..sqlite import _rows
from ._log import bump, lock, resolve

if TYPE_CHECKING:
    from ._backend import PostgresBackend

_SUMMARY = "s.version, s.from_seq, s.upto_seq, s.content, s.tokens, s.method, s.created_at, s.meta"
_COMPACTION = (
    "x.id, x.at, x.urgency, x.applied, x.tokens_before, x.tokens_after, x.summary_version, "
    "x.upto_seq, x.strategies, x.detail"
)
OUTLINE_COLUMNS = _rows.OUTLINE_COLUMNS  # plain SQL, the same in both dialects
_REF = "stored_tool_result"


async def read_outline(
    self: PostgresBackend,
    conversation: str,
    *,
    tenant: str,
    after_seq: int = 0,
    upto_seq: int | None = None,
) -> list[MessageOutline]:
    after = _rows.count(after_seq, "after_seq")
    upto = _rows.MAX_SEQ if upto_seq is None else _rows.count(upto_seq, "upto_seq")
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            f"SELECT {OUTLINE_COLUMNS} FROM messages m JOIN conversations c ON c.cid = m.cid "
            "WHERE c.tenant = %s AND c.id = %s AND m.seq > %s AND m.seq <= %s ORDER BY m.seq",
            (tenant, conversation, after, upto),
        )
        found = await cur.fetchall()
    return [_rows.outline(r) for r in found]


# -- summaries and compactions ----------------------------------------------------------


async def _stored_summary(conn: Any, cid: int, conversation: str, version: int) -> Summary:
    cur = await conn.execute(
        f"SELECT {_SUMMARY} FROM summaries s WHERE s.cid = %s AND s.version = %s", (cid, version)
    )
    return _rows.summary(conversation, await cur.fetchone())


async def _insert_summary(
    conn: Any, tenant: str, summary: Summary, expected: int | None
) -> tuple[int, Summary]:
    """(cid, the saved summary); the conversation's row locked (see ``sqlite/_history``)."""
    version, from_seq, upto, tokens, method, meta = _rows.summary_row(summary)
    if expected is not None:
        _rows.count(expected, "expected")
    cid, last, _ = await resolve(conn, tenant, summary.conversation)
    cur = await conn.execute(
        "SELECT version, upto_seq FROM summaries WHERE cid = %s ORDER BY version DESC LIMIT 1",
        (cid,),
    )
    prev = await cur.fetchone()
    nxt, floor = (1, 0) if prev is None else (prev[0] + 1, prev[1])
    if expected is not None and expected != nxt - 1:
        if expected > nxt - 1:
            raise InvalidMessageError(
                "expected", f"is {expected} but the latest summary version is {nxt - 1}"
            )
        latest = await _stored_summary(conn, cid, summary.conversation, nxt - 1)
        raise SummaryConflictError(upto, latest, expected=expected)
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
        latest = await _stored_summary(conn, cid, summary.conversation, prev[0])
        raise SummaryConflictError(upto, latest)
    await conn.execute(
        "INSERT INTO summaries (cid, version, from_seq, upto_seq, tokens, method, created_at, "
        "meta, content) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (cid, nxt, from_seq, upto, tokens, method, summary.created_at, meta, summary.content),
    )
    return cid, replace(summary, version=nxt)


async def _insert_compaction(conn: Any, tenant: str, entry: CompactionEntry) -> CompactionEntry:
    values = _rows.compaction_row(entry)
    cid, last, _ = await resolve(conn, tenant, entry.conversation)
    if entry.upto_seq > last:
        raise InvalidMessageError(
            "entry.upto_seq", f"is {entry.upto_seq} but the conversation's last seq is {last}"
        )
    version = entry.summary_version
    if version is not None:
        cur = await conn.execute(
            "SELECT 1 FROM summaries WHERE cid = %s AND version = %s", (cid, version)
        )
        if await cur.fetchone() is None:
            raise InvalidMessageError(
                "entry.summary_version", f"no summary version {version} is stored"
            )
    cur = await conn.execute(
        "INSERT INTO compactions (cid, at, urgency, applied, tokens_before, tokens_after, "
        "summary_version, upto_seq, strategies, detail) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (cid, *values),
    )
    (entry_id,) = await cur.fetchone()
    return replace(entry, id=int(entry_id), strategies=tuple(entry.strategies))


async def save_summary(
    self: PostgresBackend, summary: Summary, *, tenant: str, expected: int | None = None
) -> Written[Summary]:
    _rows.summary_row(summary)
    if expected is not None:
        _rows.count(expected, "expected")
    async with self.transaction(tenant) as conn:
        cid, saved = await _insert_summary(conn, tenant, summary, expected)
        return Written(saved, await bump(conn, cid))


async def latest_summary(
    self: PostgresBackend, conversation: str, *, tenant: str
) -> Summary | None:
    found = await _summaries(self, conversation, tenant, " DESC LIMIT 1")
    return found[0] if found else None


async def summaries(self: PostgresBackend, conversation: str, *, tenant: str) -> list[Summary]:
    return await _summaries(self, conversation, tenant, "")


async def _summaries(
    self: PostgresBackend, conversation: str, tenant: str, order: str
) -> list[Summary]:
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            f"SELECT {_SUMMARY} FROM summaries s JOIN conversations c ON c.cid = s.cid "
            f"WHERE c.tenant = %s AND c.id = %s ORDER BY s.version{order}",
            (tenant, conversation),
        )
        found = await cur.fetchall()
    return [_rows.summary(conversation, r) for r in found]


async def log_compaction(
    self: PostgresBackend, entry: CompactionEntry, *, tenant: str
) -> Written[CompactionEntry]:
    _rows.compaction_row(entry)
    async with self.transaction(tenant) as conn:
        logged = await _insert_compaction(conn, tenant, entry)
        cid, _, _ = await resolve(conn, tenant, entry.conversation)
        return Written(logged, await bump(conn, cid))


async def save_compaction(
    self: PostgresBackend,
    summary: Summary,
    entry: CompactionEntry,
    *,
    tenant: str,
    expected: int | None = None,
) -> Written[tuple[Summary, CompactionEntry]]:
    _rows.summary_row(summary)
    _rows.compaction_row(entry)
    _rows.same_conversation(summary, entry)
    if expected is not None:
        _rows.count(expected, "expected")
    async with self.transaction(tenant) as conn:
        cid, saved = await _insert_summary(conn, tenant, summary, expected)
        logged = await _insert_compaction(
            conn, tenant, replace(entry, summary_version=saved.version)
        )
        return Written((saved, logged), await bump(conn, cid))


async def compactions(
    self: PostgresBackend, conversation: str, *, tenant: str
) -> list[CompactionEntry]:
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            f"SELECT {_COMPACTION} FROM compactions x JOIN conversations c ON c.cid = x.cid "
            "WHERE c.tenant = %s AND c.id = %s ORDER BY x.id",
            (tenant, conversation),
        )
        found = await cur.fetchall()
    return [_rows.compaction(conversation, r) for r in found]


# -- working memory ---------------------------------------------------------------------


async def put_working(
    self: PostgresBackend,
    conversation: str,
    key: str,
    content: str,
    *,
    tenant: str,
    ttl: float,
    meta: Mapping[str, Any] | None = None,
) -> Written[WorkingItem]:
    _rows.name(key, "key")
    if not isinstance(content, str):
        raise InvalidMessageError("content", f"must be a string, got {type(content).__name__}")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise ConfigError(f"ttl must be a positive number of seconds, got {ttl!r}")
    meta_json = _rows.dumps(dict(meta or {}), "meta")
    async with self.transaction(tenant) as conn:
        cid, _, _ = await resolve(conn, tenant, conversation)
        now = self.now()
        item = WorkingItem(key, conversation, content, now, now + ttl, json.loads(meta_json))
        await conn.execute(
            "INSERT INTO working_memory (cid, key, created_at, expires_at, meta, content) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (cid, key) DO UPDATE SET "
            "created_at = excluded.created_at, expires_at = excluded.expires_at, "
            "meta = excluded.meta, content = excluded.content",
            (cid, key, now, item.expires_at, meta_json, content),
        )
        return Written(item, await bump(conn, cid))


def _stored_result(parts: str | None, call_id: object) -> str | None:
    if parts is None:
        return None
    for p in json.loads(parts):
        if p.get("type") == "tool_result" and p.get("call_id") == call_id:
            content = p.get("content")
            if isinstance(content, str):
                return content
    return None


async def get_working(
    self: PostgresBackend, conversation: str, key: str, *, tenant: str
) -> WorkingItem | None:
    now = self.now()
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            "SELECT w.created_at, w.expires_at, w.meta, w.content, w.cid "
            "FROM working_memory w JOIN conversations c ON c.cid = w.cid "
            "WHERE c.tenant = %s AND c.id = %s AND w.key = %s AND w.expires_at > %s",
            (tenant, conversation, key, now),
        )
        row = await cur.fetchone()
        if row is None:
            return None
        # the meta is read here, not cast to jsonb in SQL: jsonb refuses some JSON
        # text holds (an escaped NUL), and the item would become unreadable
        meta = json.loads(row[2])
        content = row[3]
        ref = meta.get(_REF)
        if isinstance(ref, dict):
            seq = ref.get("seq")
            parts = None
            if isinstance(seq, int) and not isinstance(seq, bool):
                cur = await conn.execute(
                    "SELECT parts FROM messages WHERE cid = %s AND seq = %s", (row[4], seq)
                )
                found = await cur.fetchone()
                parts = found[0] if found is not None else None
            content = _stored_result(parts, ref.get("call_id"))
            if content is None:
                return None
    return WorkingItem(key, conversation, content, row[0], row[1], meta)


async def collect_working(self: PostgresBackend, *, now: float | None = None) -> int:
    when = self.now() if now is None else now
    async with self.transaction(_rows.EVERY_TENANT) as conn:
        await conn.execute(
            "UPDATE conversations SET version = version + 1 WHERE cid IN "
            "(SELECT DISTINCT cid FROM working_memory WHERE expires_at <= %s)",
            (when,),
        )
        cur = await conn.execute("DELETE FROM working_memory WHERE expires_at <= %s", (when,))
        return int(cur.rowcount)


# -- pins -------------------------------------------------------------------------------


async def pin(
    self: PostgresBackend, conversation: str, content: str, *, tenant: str, priority: int = 0
) -> Written[PinnedItem]:
    if not isinstance(content, str):
        raise InvalidMessageError("content", f"must be a string, got {type(content).__name__}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigError(f"priority must be an integer, got {priority!r}")
    async with self.transaction(tenant) as conn:
        cid, _, _ = await resolve(conn, tenant, conversation)
        now = self.now()
        cur = await conn.execute(
            "INSERT INTO pinned (cid, priority, created_at, content) VALUES (%s, %s, %s, %s) "
            "RETURNING id",
            (cid, int(priority), now, content),
        )
        (pin_id,) = await cur.fetchone()
        item = PinnedItem(int(pin_id), conversation, content, int(priority), now)
        return Written(item, await bump(conn, cid))


async def unpin(
    self: PostgresBackend, conversation: str, pin_id: int, *, tenant: str
) -> Written[bool]:
    async with self.transaction(tenant) as conn:
        row = await lock(conn, tenant, conversation)
        if row is None:
            return Written(False, 0)
        cid, _, _, version = row
        if (
            isinstance(pin_id, bool)
            or not isinstance(pin_id, int)
            or not -(2**63) <= pin_id < 2**63
        ):
            return Written(False, int(version))
        cur = await conn.execute("DELETE FROM pinned WHERE id = %s AND cid = %s", (pin_id, cid))
        if cur.rowcount == 0:
            return Written(False, int(version))
        return Written(True, await bump(conn, cid))


async def pinned(self: PostgresBackend, conversation: str, *, tenant: str) -> list[PinnedItem]:
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            "SELECT p.id, p.content, p.priority, p.created_at FROM pinned p "
            "JOIN conversations c ON c.cid = p.cid WHERE c.tenant = %s AND c.id = %s "
            "ORDER BY p.priority, p.id",
            (tenant, conversation),
        )
        found = await cur.fetchall()
    return [PinnedItem(int(r[0]), conversation, r[1], int(r[2]), r[3]) for r in found]
