"""Rows of the memory tables: columns, conversion, scope lookups, input preparation.

Shared by the read side (``_sqlite.py``) and the write side (``_writes.py``) of
`SQLiteMemoryStore`. Every statement that names memories of a scope goes through
``IN_SCOPE`` (tenant, user and namespace compared in SQL) or through a ``sid`` that
`scope_row` returned within the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..._errors import ConfigError
from .._memory import (
    Memory,
    Scope,
    check_category,
)
from .._memory_input import UNSET, memory_from_row, prepare_item, scope_params

__all__ = [
    "COLUMNS",
    "FROM",
    "IN_SCOPE",
    "LIVE",
    "UNSET",
    "bump",
    "categories_sql",
    "memory_from_row",
    "prepare_item",
    "scope_params",
    "scope_row",
    "supersede_key",
]


COLUMNS = (
    "m.mid, s.tenant, s.user, s.namespace, m.id, m.category, m.key, m.importance, m.active, "
    "m.created_at, m.updated_at, m.accessed_at, m.access_count, m.superseded_by, "
    "m.superseded_at, m.embedding_model, m.source_ids, m.meta, m.content"
)
FROM = "FROM memories m JOIN memory_scopes s ON s.sid = m.sid"
IN_SCOPE = "s.tenant = ? AND s.user = ? AND s.namespace = ?"
LIVE = "m.superseded_by IS NULL AND m.active = 1"


def categories_sql(categories: Sequence[str] | None) -> tuple[str, tuple[str, ...]]:
    if categories is None:
        return "", ()
    if isinstance(categories, str):
        raise ConfigError("categories must be a sequence of names, not one string")
    cats = tuple(check_category(c) for c in categories)
    return f" AND m.category IN ({', '.join('?' * len(cats))})", cats


def scope_row(conn: Any, scope: Scope, create: bool) -> tuple[int, int, int] | None:
    """(sid, version, size) of ``scope``; with ``create``, the scope is added if new."""
    params = scope_params(scope)
    if create:
        conn.execute(
            "INSERT OR IGNORE INTO memory_scopes (tenant, user, namespace) VALUES (?, ?, ?)",
            params,
        )
    row = conn.execute(
        "SELECT sid, version, size FROM memory_scopes "
        "WHERE tenant = ? AND user = ? AND namespace = ?",
        params,
    ).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def bump(conn: Any, sid: int, grew: int = 0) -> int:
    conn.execute(
        "UPDATE memory_scopes SET version = version + 1, size = size + ? WHERE sid = ?",
        (grew, sid),
    )
    (version,) = conn.execute("SELECT version FROM memory_scopes WHERE sid = ?", (sid,)).fetchone()
    return int(version)


def supersede_key(conn: Any, sid: int, new: Memory, now: float) -> list[int]:
    rows = conn.execute(
        f"SELECT mid FROM memories m WHERE sid = ? AND category = ? AND key = ? AND {LIVE}",
        (sid, new.category, new.key),
    ).fetchall()
    mids = [r[0] for r in rows]
    if mids:
        conn.execute(
            "UPDATE memories SET superseded_by = ?, superseded_at = ?, updated_at = ? "
            "WHERE mid IN (SELECT value FROM json_each(?))",
            (new.id, now, now, json.dumps(mids)),
        )
    return mids
