"""The write side of `PostgresMemoryStore`: add, supersede, importance, activity, forget.

Written as functions of the store and listed in its class body, one line each,
as ``sqlite/_memory_writes.py`` is (what both do alike, from checking a batch to
``add``, is ``stores/_memory_input.py``'s). Each validates and embeds *before* its
transaction opens (embedding is the slow part), then writes in one transaction
that first locks the scope row (`lock_scope`): row, tsvector, vector and
supersession commit together or not at all. ``supersede`` is one transaction too
(SQLite's takes two): the old memory is re-read under the scope lock, so it cannot
be superseded twice by two workers.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError, InvalidMessageError
from ...text._scores import fingerprint
from ...text._terms import segment
from .._memory import Memory, Scope, check_importance
from .._memory_input import UNSET, prepare_batch, successor
from ._hybrid import TS_CONFIG
from ._memory_rows import lock_scope, scope_params, supersede_key
from ._space import vector_literal

if TYPE_CHECKING:
    from ._memory import PostgresMemoryStore

__all__ = [
    "add_many",
    "forget",
    "forget_scope",
    "reembed",
    "set_active",
    "supersede",
    "update_importance",
]

_INSERT = (
    "INSERT INTO memories (sid, id, category, key, importance, created_at, updated_at, "
    "embedding_model, fingerprint, source_ids, meta, content, tsv, embedding) VALUES "
    f"(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, to_tsvector('{TS_CONFIG}', %s), %s::vector)"
)
_IN_SID = (
    'm.sid = (SELECT sid FROM memory_scopes WHERE tenant = %s AND "user" = %s AND namespace = %s)'
)


def add_many(
    self: PostgresMemoryStore, scope: Scope, items: Sequence[str | Mapping[str, Any]]
) -> list[Memory]:
    """`add` for many memories in one transaction and one embedding batch.

    Each item is a content string or a mapping of `add`'s arguments. Later items
    with a key supersede earlier ones of the same batch too.
    """
    return self._add_many(scope, items, None)


def _add_many(
    self: PostgresMemoryStore,
    scope: Scope,
    items: Sequence[str | Mapping[str, Any]],
    old_id: str | None,
) -> list[Memory]:
    batch = prepare_batch(self, scope, items)
    if batch is None:
        return []
    prepared, vectors, now, model = batch
    with self._conn(write=True) as conn:
        if model is not None:
            self.space.record(conn)
        sid = lock_scope(conn, scope, create=True)
        assert sid is not None
        if old_id is not None:
            _check_supersedable(conn, scope, sid, old_id)
        out: list[Memory] = []
        rows: list[tuple[Any, ...]] = []
        keyed = any(p["key"] is not None for p in prepared)
        for p, vector in zip(prepared, vectors, strict=True):
            memory = Memory(
                p["content"], p["category"], p["importance"], "m_" + uuid.uuid4().hex, now,
                p["source_message_ids"], scope.tenant, scope.user, scope.namespace,
                p["key"], now, None, 0, None, None, True, p["meta"],
                model if vector is not None else None,
            )  # fmt: skip
            row = (
                sid, memory.id, memory.category, memory.key, memory.importance, now, now,
                memory.embedding_model, fingerprint(memory.content), p["source_json"],
                p["meta_json"], memory.content, segment(memory.content), vector_literal(vector),
            )  # fmt: skip
            if keyed:  # a later item may supersede an earlier one: one at a time, in order
                if memory.key is not None:
                    supersede_key(conn, sid, memory, now)
                conn.execute(_INSERT, row)
            else:
                rows.append(row)
            out.append(memory)
        if rows:
            with conn.cursor() as cur:
                cur.executemany(_INSERT, rows)
        if old_id is not None:
            conn.execute(
                "UPDATE memories SET superseded_by = %s, superseded_at = %s, updated_at = %s "
                "WHERE sid = %s AND id = %s AND superseded_by IS NULL",
                (out[0].id, now, now, sid, old_id),
            )
        conn.execute("UPDATE memory_scopes SET size = size + %s WHERE sid = %s", (len(out), sid))
    if model is not None:
        self.space.confirm()
    return out


def _check_supersedable(conn: Any, scope: Scope, sid: int, old_id: str) -> None:
    row = conn.execute(
        "SELECT superseded_by FROM memories WHERE sid = %s AND id = %s", (sid, old_id)
    ).fetchone()
    if row is None:
        raise InvalidMessageError("old_id", f"no memory {old_id!r} in scope {scope.key!r}")
    if row[0] is not None:
        raise InvalidMessageError(
            "old_id", f"memory {old_id!r} is already superseded by {row[0]!r}"
        )


def supersede(
    self: PostgresMemoryStore,
    scope: Scope,
    old_id: str,
    content: str,
    *,
    category: str = UNSET,
    importance: int = UNSET,
    key: str | None = UNSET,
    source_message_ids: Sequence[str] = (),
    meta: Mapping[str, Any] | None = None,
    embedding: Any = None,
) -> Memory:
    """Store ``content`` as the new version of memory ``old_id`` (in this scope).

    Category, importance and key default to the old memory's. Raises
    `InvalidMessageError` if ``old_id`` is not a live memory of ``scope``.
    """
    _, item = successor(
        self, scope, old_id, content, category=category, importance=importance, key=key,
        source_message_ids=source_message_ids, meta=meta, embedding=embedding,
    )  # fmt: skip
    return self._add_many(scope, [item], old_id)[0]


def update_importance(
    self: PostgresMemoryStore, scope: Scope, id: str, importance: int
) -> Memory | None:
    """Set a memory's importance; returns the updated memory, None if not in ``scope``."""
    check_importance(importance)
    params = scope_params(scope)
    with self._conn() as conn:
        done = conn.execute(
            f"UPDATE memories m SET importance = %s, updated_at = %s WHERE {_IN_SID} AND m.id = %s",
            (importance, self.clock(), *params, id),
        ).rowcount
    return self.get(scope, id) if done else None


def set_active(self: PostgresMemoryStore, scope: Scope, id: str, active: bool) -> bool:
    """Switch a memory on or off (inactive ones are never searched); False if not found."""
    params = scope_params(scope)
    with self._conn() as conn:
        done = conn.execute(
            f"UPDATE memories m SET active = %s, updated_at = %s WHERE {_IN_SID} AND m.id = %s",
            (bool(active), self.clock(), *params, id),
        ).rowcount
    return bool(done)


def forget(self: PostgresMemoryStore, scope: Scope, id: str) -> bool:
    """Delete a memory for good (its text, index entries and vector); False if not found."""
    return self._delete(scope, " AND m.id = %s", (id,)) > 0


def forget_scope(self: PostgresMemoryStore, scope: Scope) -> int:
    """Delete every memory of ``scope`` (a user's right to be forgotten); returns how many."""
    return self._delete(scope, "", ())


def _delete(self: PostgresMemoryStore, scope: Scope, where: str, params: tuple[Any, ...]) -> int:
    scope_params(scope)
    with self._conn(write=True) as conn:
        sid = lock_scope(conn, scope, create=False)
        if sid is None:
            return 0
        n = conn.execute(f"DELETE FROM memories m WHERE m.sid = %s{where}", (sid, *params)).rowcount
        if n:
            conn.execute("UPDATE memory_scopes SET size = size - %s WHERE sid = %s", (n, sid))
    return int(n)


def reembed(self: PostgresMemoryStore, scope: Scope, *, batch_size: int = 256) -> int:
    """Embed the memories of ``scope`` that have no vector yet; returns how many."""
    if self.embedder is None:
        raise ConfigError("reembed needs a store opened with an embedder")
    params = scope_params(scope)
    done = 0
    while True:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT m.mid, m.content FROM memories m WHERE {_IN_SID} "
                "AND m.embedding IS NULL ORDER BY m.mid LIMIT %s",
                (*params, batch_size),
            ).fetchall()
        if not rows:
            return done
        vectors = self.space.embed([r[1] for r in rows])
        with self._conn(write=True) as conn:
            self.space.record(conn)
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE memories SET embedding = %s::vector, embedding_model = %s "
                    "WHERE mid = %s AND embedding IS NULL",
                    [
                        (vector_literal(v), self.space.model, r[0])
                        for r, v in zip(rows, vectors, strict=True)
                    ],
                )
        self.space.confirm()
        done += len(rows)
