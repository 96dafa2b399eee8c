"""The PostgreSQL backend's message log: conversations, appending, ranges, tails, counts.

`PostgresBackend` methods written as functions of the backend (listed in its
class body, as the SQLite store does with ``sqlite/_log.py``), with the same
semantics and the same checks (``sqlite/_rows.py``, before anything is sent).

- **Appenders of one conversation are serialised by its row.** An append locks
  the conversation's row (``SELECT … FOR UPDATE``, or creates it with ``INSERT …
  ON CONFLICT DO NOTHING``), computes the sequence numbers from ``last_seq``,
  inserts, and moves ``last_seq``, the totals and ``version`` by one, in one
  transaction. Writers of other conversations never wait for it; readers never
  do. A retry of stored message ids finds them under ``UNIQUE (cid, id)`` in
  the same transaction and stores nothing twice.
- **An append is two round trips** (`PostgresBackend.pipelined`): ``BEGIN``,
  the lock and the read of the ids already stored go in one flight (the read
  runs after the lock is granted, so it sees every append committed before);
  the inserts, the update and ``COMMIT`` in the next. Making the conversation
  costs one more (the row, and its versions set above those of a conversation of
  its id deleted before: `CONTINUE`); racing another writer to make it, a re-read.
- **Reads** are single statements (autocommit), or bounded by the ``last_seq``
  read first (messages are immutable but for their counts), so a read never
  sees half of an append.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError, InvalidMessageError
from ...model._messages import Message
from .._contract import Readback, Written
from .._records import ConversationInfo, not_owner
from ..sqlite import _rows
from ._text import index_terms

if TYPE_CHECKING:
    from ._backend import PostgresBackend

MSG_COLUMNS = "m.seq, m.tokens, m.counter, m.id, m.role, m.created_at, m.name, m.metadata, m.parts"
CONV_COLUMNS = (
    "tenant, id, owner, created_at, updated_at, last_seq, message_count, token_total, metadata, "
    "version, first_version"
)
IN_CONV = "JOIN conversations c ON c.cid = m.cid WHERE c.tenant = %s AND c.id = %s"
TSV = "to_tsvector('contextwright.cw_text', NULLIF(%s, ''))"
KNOWN = f"SELECT {MSG_COLUMNS} FROM messages m {IN_CONV} AND m.id = ANY(%s)"


LOCK = (
    "SELECT cid, last_seq, owner, version FROM conversations WHERE tenant = %s AND id = %s "
    "FOR UPDATE"
)
# Sent right after the insert that makes a conversation: starts it above the last
# version of the conversation of its id deleted before (m009), returning the version
# before its creation (no row: none was deleted). Only the row this transaction just
# made has version 0 (every creation bumps it before committing), so a conversation
# another writer made first is left alone. A statement of its own, not part of the
# insert: an insert that met a row being deleted waited for that delete to commit,
# and only a statement begun after it sees the version it retired (read committed
# takes a snapshot per statement).
CONTINUE = (
    "UPDATE conversations c SET version = r.version, first_version = r.version + 1 "
    "FROM retired_versions r WHERE c.tenant = %s AND c.id = %s AND c.version = 0 "
    "AND r.tenant = c.tenant AND r.id = c.id RETURNING c.version"
)


async def lock(
    conn: Any, tenant: str, conversation: str, sent: Any = None
) -> tuple[int, int, str, int] | None:
    """(cid, last_seq, owner, version) of the conversation, its row locked till commit.

    ``sent``: the cursor of this `LOCK` already executed (queued, in pipeline mode).
    """
    cur = sent or await conn.execute(LOCK, (tenant, conversation))
    row = await cur.fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3])


async def ensure(
    self: PostgresBackend, conn: Any, conversation: str, tenant: str, user: str, metadata: str,
    sent: Any = None,
) -> tuple[int, int, int, bool, bool]:  # fmt: skip
    """(cid, last_seq, version, raced, made), the row locked, created for ``user`` if new.

    Another user's conversation raises. One created here (``made``) has the
    version before its creation (`CONTINUE`): the caller's write bumps it.
    ``sent`` as for `lock`; ``raced``: the conversation was created by another
    writer after the first lock found none, so what was read before this
    returned (queued after ``sent``) must be read again.
    """
    row = await lock(conn, tenant, conversation, sent)
    raced = False
    while row is None:
        now = self.now()
        inserting = await conn.execute(
            "INSERT INTO conversations (tenant, id, owner, created_at, updated_at, metadata) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, id) DO NOTHING RETURNING cid",
            (tenant, conversation, user, now, now, metadata),
        )
        continuing = await conn.execute(CONTINUE, (tenant, conversation))  # same flight
        created, continued = await inserting.fetchone(), await continuing.fetchone()
        if created is not None:
            before = 0 if continued is None else int(continued[0])
            return created[0], 0, before, raced, True
        # created meanwhile by another writer (and, if none is found, deleted again since)
        row = await lock(conn, tenant, conversation)
        raced = True
    cid, last, owner, version = row
    if owner != user:
        raise not_owner(conversation, tenant, user)
    return cid, last, version, raced, False


async def resolve(conn: Any, tenant: str, conversation: str) -> tuple[int, int, int]:
    """(cid, last_seq, version) of an existing conversation, its row locked; a missing one raises."""
    row = await lock(conn, tenant, conversation)
    if row is None:
        raise InvalidMessageError(
            "conversation",
            f"no conversation {conversation!r} in tenant {tenant!r}; "
            "create it with ensure_conversation or append",
        )
    return row[0], row[1], row[3]


async def bump(conn: Any, cid: int) -> int:
    """Add one to conversation ``cid``'s version (in the caller's transaction); return it."""
    cur = await conn.execute(
        "UPDATE conversations SET version = version + 1 WHERE cid = %s RETURNING version", (cid,)
    )
    row = await cur.fetchone()
    return int(row[0])


async def ensure_conversation(
    self: PostgresBackend,
    conversation: str,
    *,
    tenant: str,
    user: str,
    metadata: Mapping[str, Any] | None = None,
) -> ConversationInfo:
    _rows.name(conversation, "conversation")
    _rows.name(user, "user")
    meta = _rows.dumps(dict(metadata or {}), "metadata")
    async with self.transaction(tenant) as conn:
        cid, _, _, _, made = await ensure(self, conn, conversation, tenant, user, meta)
        if made:
            await bump(conn, cid)
        cur = await conn.execute(f"SELECT {CONV_COLUMNS} FROM conversations WHERE cid = %s", (cid,))
        row = await cur.fetchone()
    return _rows.conversation_info(row)


async def get_conversation(
    self: PostgresBackend, conversation: str, *, tenant: str
) -> ConversationInfo | None:
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            f"SELECT {CONV_COLUMNS} FROM conversations WHERE tenant = %s AND id = %s",
            (tenant, conversation),
        )
        row = await cur.fetchone()
    return None if row is None else _rows.conversation_info(row)


async def list_conversations(
    self: PostgresBackend, *, tenant: str, user: str | None = None
) -> list[ConversationInfo]:
    sql = f"SELECT {CONV_COLUMNS} FROM conversations WHERE tenant = %s"
    params: tuple[str, ...] = (tenant,)
    if user is not None:
        sql, params = sql + " AND owner = %s", (tenant, user)
    async with self.connection(tenant) as conn:
        cur = await conn.execute(sql + " ORDER BY updated_at DESC, id", params)
        found = await cur.fetchall()
    return [_rows.conversation_info(r) for r in found]


async def version(self: PostgresBackend, conversation: str, *, tenant: str) -> int:
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            "SELECT version FROM conversations WHERE tenant = %s AND id = %s",
            (tenant, conversation),
        )
        row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def append(
    self: PostgresBackend,
    conversation: str,
    messages: Sequence[Message],
    *,
    tenant: str,
    user: str,
    tokens: Sequence[int] | None = None,
    counter: str = "",
    readback: Sequence[Readback] = (),
) -> Written[list[Message]]:
    _rows.name(conversation, "conversation")
    _rows.name(user, "user")
    if not isinstance(counter, str):
        raise ConfigError(f"counter must be a string, got {counter!r}")
    batch = _rows.prepare_messages(messages, tokens)
    refs = _rows.readback_refs(readback, batch)
    terms = [index_terms(p.message) for p in batch]
    ids = [p.message.id for p in batch]
    # Two round trips: BEGIN, the lock and the ids already stored go together (the
    # second statement runs after the lock is held, so it sees every append that
    # committed before); the inserts and the update go with the COMMIT.
    async with self.pipelined(tenant) as conn:
        locking = await conn.execute(LOCK, (tenant, conversation))
        stored = await conn.execute(KNOWN, (tenant, conversation, ids)) if batch else None
        found = await ensure(self, conn, conversation, tenant, user, "{}", locking)
        cid, seq, version, raced, made = found
        known: dict[str, Sequence[Any]] = {}
        if stored is not None:
            if raced:
                stored = await conn.execute(KNOWN, (tenant, conversation, ids))
            for row in await stored.fetchall():
                known[row[3]] = row
        now = self.now()
        new: list[tuple[Any, ...]] = []
        saved: dict[str, Message] = {}
        out: list[Message] = []
        total = users = text_docs = text_len = tool_docs = tool_len = 0
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
            made_by = counter if n is not None else ""
            body, dl = terms[i]
            row = (seq, n, made_by, mid, m.role, created, m.name, p.meta, p.parts)
            new.append((cid, seq, mid, m.role, m.name, created, n, made_by, p.size, p.meta,
                        p.parts, dl, body))  # fmt: skip
            known[mid] = row
            saved[mid] = msg = m._stamped(seq, created)
            if n is not None:
                total += n
                if counter:
                    msg._token_cache[counter] = n
            users += m.role == "user"
            if dl and m.role == "tool":
                tool_docs, tool_len = tool_docs + 1, tool_len + dl
            elif dl:
                text_docs, text_len = text_docs + 1, text_len + dl
            out.append(msg)
        changed = bool(new or refs or made)
        if changed:
            version += 1
        if new:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO messages (cid, seq, id, role, name, created_at, tokens, counter, "
                    f"size, metadata, parts, dl, tsv) VALUES ({', '.join(['%s'] * 12)}, {TSV})",
                    new,
                )
            await conn.execute(
                "UPDATE conversations SET last_seq = %s, message_count = message_count + %s, "
                "user_count = user_count + %s, token_total = token_total + %s, updated_at = %s, "
                "version = %s, text_docs = text_docs + %s, text_len = text_len + %s, "
                "tool_docs = tool_docs + %s, tool_len = tool_len + %s WHERE cid = %s",
                (seq, len(new), users, total, now, version, text_docs, text_len, tool_docs,
                 tool_len, cid),
            )  # fmt: skip
        elif changed:
            await conn.execute(
                "UPDATE conversations SET version = %s WHERE cid = %s", (version, cid)
            )
        if refs:
            await put_refs(
                conn, cid, now, [(out[i].seq or 0, call, key, ttl) for i, call, key, ttl in refs]
            )
    return Written(out, version)


async def put_refs(
    conn: Any, cid: int, now: float, refs: Sequence[tuple[int, str, str, float]]
) -> None:
    """Working-memory keys that read stored tool results (as ``sqlite/_history.put_refs``)."""
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO working_memory (cid, key, created_at, expires_at, meta, content) "
            "VALUES (%s, %s, %s, %s, %s, '') ON CONFLICT (cid, key) DO UPDATE SET "
            "created_at = excluded.created_at, expires_at = excluded.expires_at, "
            "meta = excluded.meta, content = excluded.content",
            [
                (cid, key, now, now + ttl, _rows.dumps(ref_meta(seq, call_id), "meta"))
                for seq, call_id, key, ttl in refs
            ],
        )


def ref_meta(seq: int, call_id: str) -> dict[str, Any]:
    return {"kind": "tool_result", "stored_tool_result": {"call_id": call_id, "seq": seq}}


async def read(
    self: PostgresBackend,
    conversation: str,
    *,
    tenant: str,
    after_seq: int = 0,
    upto_seq: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> list[Message]:
    after = _rows.count(after_seq, "after_seq")
    upto = _rows.MAX_SEQ if upto_seq is None else _rows.count(upto_seq, "upto_seq")
    n = None if limit is None else _rows.count(limit, "limit")
    order = "DESC" if newest_first else "ASC"
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            f"SELECT {MSG_COLUMNS} FROM messages m {IN_CONV} AND m.seq > %s AND m.seq <= %s "
            f"ORDER BY m.seq {order} LIMIT %s",
            (tenant, conversation, after, upto, n),
        )
        rows = await cur.fetchall()
    return [_rows.message(r) for r in rows]


async def read_tail(
    self: PostgresBackend,
    conversation: str,
    *,
    tenant: str,
    max_tokens: int,
    after_seq: int = 0,
    counter: str = "",
) -> list[Message]:
    """As ``sqlite/_log.read_tail``: the seq index walked backwards in growing pages."""
    after = _rows.count(after_seq, "after_seq")
    budget = _rows.count(max_tokens, "max_tokens")
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            "SELECT cid, last_seq FROM conversations WHERE tenant = %s AND id = %s",
            (tenant, conversation),
        )
        row = await cur.fetchone()
        if row is None:
            return []
        cid, last = row
        first = last + 1
        spent, page, done = 0, 32, False
        while not done:
            cur = await conn.execute(
                "SELECT seq, tokens, counter, size, role FROM messages WHERE cid = %s "
                "AND seq > %s AND seq < %s ORDER BY seq DESC LIMIT %s",
                (cid, after, first, page),
            )
            chunk = await cur.fetchall()
            done = len(chunk) < page
            for seq, n, made_by, size, role in chunk:
                cost = n if n is not None and made_by == counter else _rows.estimate(n, size, role)
                if spent + cost > budget:
                    done = True
                    break
                spent += cost
                first = seq
            page = min(page * 4, 2048)
        cur = await conn.execute(
            f"SELECT {MSG_COLUMNS} FROM messages m WHERE m.cid = %s AND m.seq >= %s "
            "AND m.seq <= %s ORDER BY m.seq",
            (cid, first, last),
        )
        rows = await cur.fetchall()
    return [_rows.message(r) for r in rows]


async def token_total(
    self: PostgresBackend, conversation: str, *, tenant: str, after_seq: int = 0
) -> tuple[int, int]:
    after = _rows.count(after_seq, "after_seq")
    async with self.connection(tenant) as conn:
        if after == 0:
            cur = await conn.execute(
                "SELECT message_count, token_total FROM conversations "
                "WHERE tenant = %s AND id = %s",
                (tenant, conversation),
            )
        else:
            cur = await conn.execute(
                f"SELECT count(*), coalesce(sum(m.tokens), 0) FROM messages m {IN_CONV} "
                "AND m.seq > %s",
                (tenant, conversation, after),
            )
        row = await cur.fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


async def count_messages(
    self: PostgresBackend, conversation: str, *, tenant: str, role: str | None = None
) -> int:
    async with self.connection(tenant) as conn:
        if role is None or role == "user":
            column = "message_count" if role is None else "user_count"
            cur = await conn.execute(
                f"SELECT {column} FROM conversations WHERE tenant = %s AND id = %s",
                (tenant, conversation),
            )
        else:
            cur = await conn.execute(
                f"SELECT count(*) FROM messages m {IN_CONV} AND m.role = %s",
                (tenant, conversation, role),
            )
        row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def message_tokens(
    self: PostgresBackend,
    conversation: str,
    *,
    tenant: str,
    seqs: Sequence[int],
    counter: str | None = None,
) -> dict[int, int]:
    wanted = [_rows.count(s, f"seqs[{i}]") for i, s in enumerate(seqs)]
    sql = (
        f"SELECT m.seq, m.tokens FROM messages m {IN_CONV} AND m.tokens IS NOT NULL "
        "AND m.seq = ANY(%s)"
    )
    params: tuple[Any, ...] = (tenant, conversation, wanted)
    if counter is not None:
        sql, params = sql + " AND m.counter = %s", (*params, counter)
    async with self.connection(tenant) as conn:
        cur = await conn.execute(sql, params)
        rows = await cur.fetchall()
    return {int(seq): int(n) for seq, n in rows}


async def set_message_tokens(
    self: PostgresBackend,
    conversation: str,
    *,
    tenant: str,
    counts: Mapping[int, int],
    counter: str,
    readback: Sequence[Readback] = (),
) -> int:
    """Store recounts (and ``readback`` keys, by seq); the version after (as on SQLite)."""
    if not isinstance(counter, str):
        raise ConfigError(f"counter must be a string, got {counter!r}")
    refs: list[tuple[int, str, str, float]] = []
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
    updates = {
        _rows.count(seq, f"counts[{seq!r}]", minimum=1): _rows.count(n, f"counts[{seq}]")
        for seq, n in counts.items()
    }
    async with self.transaction(tenant) as conn:
        if not updates:
            cur = await conn.execute(
                "SELECT version FROM conversations WHERE tenant = %s AND id = %s",
                (tenant, conversation),
            )
            row = await cur.fetchone()
            return 0 if row is None else int(row[0])
        cid, last, _ = await resolve(conn, tenant, conversation)
        for seq in updates:
            if seq > last:
                raise InvalidMessageError(f"counts[{seq}]", "no stored message has this seq")
        seqs, ns = list(updates), list(updates.values())
        cur = await conn.execute(
            "WITH new AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[]) AS u(seq, n)), "
            "old AS (SELECT m.seq, coalesce(m.tokens, 0) AS was FROM messages m JOIN new "
            "ON new.seq = m.seq WHERE m.cid = %s), "
            "upd AS (UPDATE messages m SET tokens = new.n, counter = %s FROM new "
            "WHERE m.cid = %s AND m.seq = new.seq RETURNING m.seq) "
            "SELECT coalesce(sum(new.n - old.was), 0) FROM new JOIN old ON old.seq = new.seq",
            (seqs, ns, cid, counter, cid),
        )
        row = await cur.fetchone()
        await conn.execute(
            "UPDATE conversations SET token_total = token_total + %s WHERE cid = %s",
            (int(row[0]), cid),
        )
        if refs:
            await put_refs(conn, cid, self.now(), refs)
        return await bump(conn, cid)
