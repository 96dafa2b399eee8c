"""The SQLite store's message log: appending, reading ranges and tails, counts.

The `SQLiteStore` methods over the ``messages`` table and the conversation row's
running totals (``last_seq``, ``message_count``, ``token_total``, ``version``),
written as functions of the store and assembled into the class in ``_sqlite.py``.
They follow the store's rules (that module's docstring): one transaction each,
tenant resolved inside it, input checked before it opens, and every write moves
the conversation's version by one in its own transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError, InvalidMessageError, StoreError
from ...model._messages import Message
from .._records import not_owner
from . import _rows
from ._fts import SEQ_BITS
from ._history import put_refs
from ._rows import MSG_COLUMNS

if TYPE_CHECKING:
    from ._store import SQLiteStore

__all__ = [
    "append", "append_versioned", "count_messages", "ensure",
    "message_tokens", "read", "read_tail", "set_message_tokens",
    "token_total",
]  # fmt: skip

IN_CONV = "JOIN conversations c ON c.cid = m.cid WHERE c.tenant = ? AND c.id = ?"


def ensure(
    self: SQLiteStore,
    conn: sqlite3.Connection,
    conversation: str,
    tenant: str,
    user: str,
    metadata: str,
) -> tuple[int, int, int, bool]:
    """(cid, last_seq, version, made), creating the conversation for ``user``; another user's raises.

    A conversation created here (``made``) has the version before its creation:
    0, or the last version of the conversation of this id deleted before it
    (m011), so that its versions continue above that one's. The caller's write
    bumps it (once per call, creation included).
    """
    row = conn.execute(
        "SELECT cid, last_seq, user, version FROM conversations WHERE tenant = ? AND id = ?",
        (tenant, conversation),
    ).fetchone()
    if row is not None:
        if row[2] != user:
            raise not_owner(conversation, tenant, user)
        return row[0], row[1], row[3], False
    # above every cid ever given out, a deleted conversation's too (m010)
    (cid,) = conn.execute(
        "SELECT max(coalesce((SELECT max(cid) FROM conversations), 0), "
        "coalesce((SELECT max(cid) FROM retired_cids), 0)) + 1"
    ).fetchone()
    retired = conn.execute(
        "SELECT version FROM retired_versions WHERE tenant = ? AND id = ?", (tenant, conversation)
    ).fetchone()
    before = retired[0] if retired is not None else 0
    now = self.clock()
    conn.execute(
        "INSERT INTO conversations (tenant, id, cid, user, created_at, updated_at, metadata, "
        "version, first_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (tenant, conversation, cid, user, now, now, metadata, before, before + 1),
    )
    return cid, 0, before, True


def append(
    self: SQLiteStore,
    conversation: str,
    messages: Sequence[Message],
    *,
    tenant: str,
    user: str = "anonymous",
    tokens: Sequence[int] | None = None,
    counter: str = "",
    readback: Sequence[tuple[int, str, str, float]] = (),
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

    ``readback`` holds ``(i, call_id, key, ttl)``, written in the same transaction:
    ``get_working(key)`` returns, for ``ttl`` seconds, the result of call
    ``call_id`` in ``messages[i]`` (a tool message) as it is stored. This is how
    `Conversations` offloads a large tool result: the stored message already
    keeps the original verbatim, so working memory holds a reference to it
    instead of a second copy, written with the message or not at all.
    """
    return _append(self, conversation, messages, tenant, user, tokens, counter, readback)[0]


def append_versioned(
    self: SQLiteStore,
    conversation: str,
    messages: Sequence[Message],
    *,
    tenant: str,
    user: str = "anonymous",
    tokens: Sequence[int] | None = None,
    counter: str = "",
    readback: Sequence[tuple[int, str, str, float]] = (),
) -> tuple[list[Message], int]:
    """`append`, also returning the conversation's version after the call.

    The version moved by one if anything was written (the caller's cache that
    was current at ``version - 1`` and takes in these messages is current at
    ``version``); a retry of stored messages leaves it as it was.
    """
    return _append(self, conversation, messages, tenant, user, tokens, counter, readback)


def _append(
    self: SQLiteStore,
    conversation: str,
    messages: Sequence[Message],
    tenant: str,
    user: str,
    tokens: Sequence[int] | None,
    counter: str,
    readback: Sequence[tuple[int, str, str, float]],
) -> tuple[list[Message], int]:
    """The stored messages and the conversation's version after the call.

    The version moves (by one) only if something was written: a retry of
    messages all stored already, on an existing conversation, leaves it.
    """
    _rows.name(conversation, "conversation")
    _rows.name(user, "user")
    if not isinstance(counter, str):
        raise ConfigError(f"counter must be a string, got {counter!r}")
    batch = _rows.prepare_messages(messages, tokens)
    refs = _rows.readback_refs(readback, batch)
    with self._tx(True, tenant) as conn:
        cid, seq, version, made = ensure(self, conn, conversation, tenant, user, "{}")
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
        changed = bool(new or refs or made)
        if changed:
            version += 1
        if new:
            _insert(conn, cid, new)
            users = sum(1 for r in new if r[6] == "user")
            conn.execute(
                "UPDATE conversations SET last_seq = ?, message_count = message_count + ?, "
                "user_count = user_count + ?, token_total = token_total + ?, updated_at = ?, "
                "version = ? WHERE cid = ?",
                (seq, len(new), users, total, now, version, cid),
            )
        elif changed:
            conn.execute("UPDATE conversations SET version = ? WHERE cid = ?", (version, cid))
        if refs:
            put_refs(
                conn,
                cid,
                now,
                [(out[i].seq or 0, call, key, ttl) for i, call, key, ttl in refs],
            )
    return out, version


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
    self: SQLiteStore,
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
            f"SELECT {MSG_COLUMNS} FROM messages m {IN_CONV} AND m.seq > ? AND m.seq <= ? "
            f"ORDER BY m.seq {order} LIMIT ?",
            (tenant, conversation, after, upto, n),
        ).fetchall()
    return [_rows.message(r) for r in rows]


def read_tail(
    self: SQLiteStore,
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


def token_total(
    self: SQLiteStore, conversation: str, *, tenant: str, after_seq: int = 0
) -> tuple[int, int]:
    """(message count, sum of stored counts) of the messages with ``seq > after_seq``.

    O(1) for ``after_seq=0`` (the conversation row's running totals); a range
    sum over the seq index otherwise. Uncounted messages add 0 to the sum.
    """
    after = _rows.count(after_seq, "after_seq")
    with self._tx(False, tenant) as conn:
        if after == 0:
            row = conn.execute(
                "SELECT message_count, token_total FROM conversations WHERE tenant = ? AND id = ?",
                (tenant, conversation),
            ).fetchone()
        else:
            row = conn.execute(
                f"SELECT count(*), coalesce(sum(m.tokens), 0) FROM messages m {IN_CONV} "
                "AND m.seq > ?",
                (tenant, conversation, after),
            ).fetchone()
    return (0, 0) if row is None else (row[0], row[1])


def count_messages(
    self: SQLiteStore, conversation: str, *, tenant: str, role: str | None = None
) -> int:
    """How many messages the conversation holds (of ``role``, if given)."""
    with self._tx(False, tenant) as conn:
        if role is None or role == "user":  # both kept with the conversation (m009)
            column = "message_count" if role is None else "user_count"
            row = conn.execute(
                f"SELECT {column} FROM conversations WHERE tenant = ? AND id = ?",
                (tenant, conversation),
            ).fetchone()
        else:
            row = conn.execute(
                f"SELECT count(*) FROM messages m {IN_CONV} AND m.role = ?",
                (tenant, conversation, role),
            ).fetchone()
    return 0 if row is None else int(row[0])


def message_tokens(
    self: SQLiteStore,
    conversation: str,
    *,
    tenant: str,
    seqs: Sequence[int],
    counter: str | None = None,
) -> dict[int, int]:
    """Stored counts by seq, for those of ``seqs`` that have one (by ``counter``, if given)."""
    wanted = json.dumps([_rows.count(s, f"seqs[{i}]") for i, s in enumerate(seqs)])
    sql = (
        f"SELECT m.seq, m.tokens FROM messages m {IN_CONV} AND m.tokens IS NOT NULL "
        "AND m.seq IN (SELECT value FROM json_each(?))"
    )
    params: tuple[Any, ...] = (tenant, conversation, wanted)
    if counter is not None:
        sql, params = sql + " AND m.counter = ?", (*params, counter)
    with self._tx(False, tenant) as conn:
        return dict(conn.execute(sql, params).fetchall())


def set_message_tokens(
    self: SQLiteStore,
    conversation: str,
    *,
    tenant: str,
    counts: Mapping[int, int],
    counter: str,
    readback: Sequence[tuple[int, str, str, float]] = (),
) -> int:
    """Store recounted tokens (by ``counter``) for the messages with the given seqs.

    The conversation's running ``token_total`` moves by the difference, in the
    same transaction. A seq that is not stored raises and nothing is written.
    Returns the conversation's version after the call (unchanged if ``counts``
    is empty: nothing is written then). ``readback`` holds ``(seq, call_id, key,
    ttl)`` of messages in ``counts``, working-memory keys written in the same
    transaction as `append` (``readback=``) writes them: `Conversations` uses it
    when it counts messages that a bulk import stored uncounted.
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
        return self.version(conversation, tenant=tenant)
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
            put_refs(conn, cid, self.clock(), refs)
        return _rows.bump(conn, cid)
