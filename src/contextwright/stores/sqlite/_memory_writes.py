"""The write side of `SQLiteMemoryStore`: add, supersede, importance, activity, forget.

Written as functions of the store and listed in its class body, one line each
(no mixin). What PostgreSQL does the same way (preparing a batch and its vectors,
``add``, the item that supersedes a memory) is ``stores/_memory_input.py``'s.

Each method validates and embeds *before* its transaction opens (embedding is the
slow part), writes in one ``BEGIN IMMEDIATE`` transaction — row, FTS entry, vector,
supersession and the scope's ``version``/``size`` together — and then applies the
same change to the cached vector index, if it was current (``_vectors.VectorCache``).
A contentless FTS5 row is deleted by giving back the values it indexed, which the
stored content reproduces (``segment(content)``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._errors import ConfigError
from ...text._scores import fingerprint
from ...text._terms import segment
from ...text._vectors import VectorIndex
from .._memory import Memory, Scope, check_importance
from .._memory_input import UNSET, prepare_batch, successor
from ._memory_rows import (
    FROM,
    IN_SCOPE,
    bump,
    prepare_item,
    scope_params,
    scope_row,
    supersede_key,
)

if TYPE_CHECKING:
    from ._memory import SQLiteMemoryStore

__all__ = [
    "add_many",
    "forget",
    "forget_scope",
    "reembed",
    "set_active",
    "supersede",
    "update_importance",
]


def add_many(
    self: SQLiteMemoryStore, scope: Scope, items: Sequence[str | Mapping[str, Any]]
) -> list[Memory]:
    """`add` for many memories in one transaction and one embedding batch.

    Each item is a content string or a mapping of `add`'s arguments. Later items
    with a key supersede earlier ones of the same batch too.
    """
    batch = prepare_batch(self, scope, items)
    if batch is None:
        return []
    prepared, vectors, now, model = batch
    with self._tx(True, scope) as conn:
        if model is not None:
            self.space.record(conn)
        found = scope_row(conn, scope, create=True)
        assert found is not None
        sid, before, _ = found
        (top,) = conn.execute(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0)"
        ).fetchone()
        out: list[Memory] = []
        superseded: list[int] = []
        for n, (p, vector) in enumerate(zip(prepared, vectors, strict=True)):
            mid = top + 1 + n
            memory = Memory(
                p["content"], p["category"], p["importance"], "m_" + uuid.uuid4().hex, now,
                p["source_message_ids"], scope.tenant, scope.user, scope.namespace,
                p["key"], now, None, 0, None, None, True, p["meta"],
                model if vector is not None else None,
            )  # fmt: skip
            if memory.key is not None:
                superseded += supersede_key(conn, sid, memory, now)
            conn.execute(
                "INSERT INTO memories (mid, sid, id, category, key, importance, created_at, "
                "updated_at, embedding_model, fingerprint, source_ids, meta, content) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    mid, sid, memory.id, memory.category, memory.key, memory.importance, now,
                    now, memory.embedding_model, fingerprint(memory.content),
                    p["source_json"], p["meta_json"], memory.content,
                ),
            )  # fmt: skip
            conn.execute(
                "INSERT INTO memory_fts (rowid, scope, body) VALUES (?, ?, ?)",
                (mid, f"s{sid}", segment(memory.content)),
            )
            if vector is not None:
                conn.execute(
                    "INSERT INTO memory_vectors (mid, vector) VALUES (?, ?)",
                    (mid, vector.tobytes()),
                )
            out.append(memory)
        after = bump(conn, sid, len(out))

    def change(index: VectorIndex) -> None:
        fresh = [(top + 1 + n, v, m) for n, (v, m) in enumerate(zip(vectors, out, strict=True))]
        fresh = [f for f in fresh if f[1] is not None]
        if fresh:
            index.append(
                [f[0] for f in fresh],
                np.stack([f[1] for f in fresh]),  # type: ignore[misc]
                [f[2].category for f in fresh],
            )
        for mid in superseded:  # after the append: a batch may supersede its own items
            index.set_superseded(mid)

    self._index.vectors.after_write(sid, before, after, change)
    return out


def supersede(
    self: SQLiteMemoryStore,
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
    old, item = successor(
        self, scope, old_id, content, category=category, importance=importance, key=key,
        source_message_ids=source_message_ids, meta=meta, embedding=embedding,
    )  # fmt: skip
    prepared = prepare_item(0, item)
    new = self.add_many(scope, [item])[0]
    # The key already superseded it if the key and category match; otherwise mark it here.
    if prepared["key"] is None or prepared["key"] != old.key or new.category != old.category:
        self._mark_superseded(scope, old_id, new.id)
    return new


def _mark_superseded(self: SQLiteMemoryStore, scope: Scope, old_id: str, new_id: str) -> None:
    now = self.clock()
    with self._tx(True, scope) as conn:
        found = scope_row(conn, scope, create=False)
        if found is None:
            return
        sid, before, _ = found
        row = conn.execute(
            "SELECT mid FROM memories WHERE sid = ? AND id = ? AND superseded_by IS NULL",
            (sid, old_id),
        ).fetchone()
        if row is None:
            return
        conn.execute(
            "UPDATE memories SET superseded_by = ?, superseded_at = ?, updated_at = ? "
            "WHERE mid = ?",
            (new_id, now, now, row[0]),
        )
        after = bump(conn, sid)
    self._index.vectors.after_write(sid, before, after, lambda index: index.set_superseded(row[0]))


def _update(
    self: SQLiteMemoryStore,
    scope: Scope,
    id_: str,
    sql: str,
    params: tuple[Any, ...],
    versioned: bool,
) -> tuple[int, int, int, int] | None:
    with self._tx(True, scope) as conn:
        found = scope_row(conn, scope, create=False)
        if found is None:
            return None
        sid, before, _ = found
        row = conn.execute(
            "SELECT mid FROM memories WHERE sid = ? AND id = ?", (sid, id_)
        ).fetchone()
        if row is None:
            return None
        conn.execute(sql, (*params, row[0]))
        after = bump(conn, sid) if versioned else before
    return sid, before, after, row[0]


def update_importance(
    self: SQLiteMemoryStore, scope: Scope, id: str, importance: int
) -> Memory | None:
    """Set a memory's importance; returns the updated memory, None if not in ``scope``."""
    check_importance(importance)
    sql = "UPDATE memories SET importance = ?, updated_at = ? WHERE mid = ?"
    if self._update(scope, id, sql, (importance, self.clock()), versioned=False) is None:
        return None
    return self.get(scope, id)


def set_active(self: SQLiteMemoryStore, scope: Scope, id: str, active: bool) -> bool:
    """Switch a memory on or off (inactive ones are never searched); False if not found."""
    sql = "UPDATE memories SET active = ?, updated_at = ? WHERE mid = ?"
    done = self._update(scope, id, sql, (int(bool(active)), self.clock()), versioned=True)
    if done is None:
        return False
    sid, before, after, mid = done
    self._index.vectors.after_write(
        sid, before, after, lambda index: index.set_active(mid, bool(active))
    )
    return True


def forget(self: SQLiteMemoryStore, scope: Scope, id: str) -> bool:
    """Delete a memory for good (its text, index entry and vector); False if not found."""
    return self._delete(scope, "AND m.id = ?", (id,)) > 0


def forget_scope(self: SQLiteMemoryStore, scope: Scope) -> int:
    """Delete every memory of ``scope`` (a user's right to be forgotten); returns how many."""
    return self._delete(scope, "", ())


def _delete(self: SQLiteMemoryStore, scope: Scope, where: str, params: tuple[Any, ...]) -> int:
    with self._tx(True, scope) as conn:
        found = scope_row(conn, scope, create=False)
        if found is None:
            return 0
        sid, before, _ = found
        rows = conn.execute(
            f"SELECT m.mid, m.content FROM memories m WHERE m.sid = ? {where}", (sid, *params)
        ).fetchall()
        if not rows:
            return 0
        # A contentless FTS5 row is deleted by giving back the values it indexed.
        conn.executemany(
            "INSERT INTO memory_fts (memory_fts, rowid, scope, body) VALUES ('delete', ?, ?, ?)",
            [(mid, f"s{sid}", segment(content)) for mid, content in rows],
        )
        mids = json.dumps([r[0] for r in rows])
        conn.execute(
            "DELETE FROM memory_vectors WHERE mid IN (SELECT value FROM json_each(?))", (mids,)
        )
        conn.execute("DELETE FROM memories WHERE mid IN (SELECT value FROM json_each(?))", (mids,))
        after = bump(conn, sid, -len(rows))

    def change(index: VectorIndex) -> None:
        for mid, _ in rows:
            index.remove(mid)

    self._index.vectors.after_write(sid, before, after, change)
    return len(rows)


def reembed(self: SQLiteMemoryStore, scope: Scope, *, batch_size: int = 256) -> int:
    """Embed the memories of ``scope`` that have no vector yet; returns how many."""
    if self.embedder is None:
        raise ConfigError("reembed needs a store opened with an embedder")
    done = 0
    while True:
        with self._tx(False, scope) as conn:
            rows = conn.execute(
                f"SELECT m.mid, m.content {FROM} LEFT JOIN memory_vectors v ON v.mid = m.mid "
                f"WHERE {IN_SCOPE} AND v.mid IS NULL ORDER BY m.mid LIMIT ?",
                (*scope_params(scope), batch_size),
            ).fetchall()
        if not rows:
            return done
        vectors = self.space.embed([r[1] for r in rows])
        with self._tx(True, scope) as conn:
            self.space.record(conn)
            conn.executemany(
                "INSERT OR IGNORE INTO memory_vectors (mid, vector) VALUES (?, ?)",
                [(r[0], v.tobytes()) for r, v in zip(rows, vectors, strict=True)],
            )
            conn.executemany(
                "UPDATE memories SET embedding_model = ? WHERE mid = ?",
                [(self.space.model, r[0]) for r in rows],
            )
            found = scope_row(conn, scope, create=False)
            if found is not None:
                bump(conn, found[0])
        done += len(rows)
