"""Rows of the PostgreSQL memory tables: columns, the scope in SQL, scope locking.

The columns come back in the order of ``sqlite/_memory_rows.py`` ``COLUMNS``, so
`memory_from_row` and `prepare_item` (pure) are shared with SQLite. Every
statement that names memories of a scope either joins ``memory_scopes`` and
compares tenant, user and namespace (``IN_SCOPE``), or uses the ``sid`` that such a
statement returned within the same transaction (`scope_sid`, `lock_scope`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._errors import ConfigError
from .._memory import Memory, Scope, check_category
from .._memory_input import memory_from_row, prepare_item, scope_params

__all__ = [
    "COLUMNS",
    "FROM",
    "IN_SCOPE",
    "LIVE",
    "categories_sql",
    "lock_scope",
    "memory_from_row",
    "prepare_item",
    "scope_params",
    "scope_sid",
    "supersede_key",
]

COLUMNS = (
    'm.mid, s.tenant, s."user", s.namespace, m.id, m.category, m.key, m.importance, m.active, '
    "m.created_at, m.updated_at, m.accessed_at, m.access_count, m.superseded_by, "
    "m.superseded_at, m.embedding_model, m.source_ids, m.meta, m.content"
)
FROM = "FROM memories m JOIN memory_scopes s ON s.sid = m.sid"
IN_SCOPE = 's.tenant = %s AND s."user" = %s AND s.namespace = %s'
LIVE = "m.superseded_by IS NULL AND m.active"
_SID = 'SELECT sid, size FROM memory_scopes WHERE tenant = %s AND "user" = %s AND namespace = %s'


def categories_sql(categories: Sequence[str] | None) -> tuple[str, tuple[Any, ...]]:
    """`` AND m.category = ANY(%s)`` for a list of categories (none: no condition)."""
    if categories is None:
        return "", ()
    if isinstance(categories, str):
        raise ConfigError("categories must be a sequence of names, not one string")
    return " AND m.category = ANY(%s)", ([check_category(c) for c in categories],)


def scope_sid(conn: Any, scope: Scope) -> tuple[int, int] | None:
    """(sid, size) of ``scope``, None if it never held a memory."""
    row = conn.execute(_SID, scope_params(scope)).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def lock_scope(conn: Any, scope: Scope, create: bool) -> int | None:
    """In a write transaction: the scope's sid, its row locked until commit (created if asked).

    The lock serialises writes to one scope across workers, as SQLite's
    ``BEGIN IMMEDIATE`` does: two of them cannot both supersede one key.
    """
    if create:
        row = conn.execute(
            'INSERT INTO memory_scopes (tenant, "user", namespace) VALUES (%s, %s, %s) '
            'ON CONFLICT (tenant, "user", namespace) DO UPDATE SET size = memory_scopes.size '
            "RETURNING sid",
            scope_params(scope),
        ).fetchone()
    else:
        row = conn.execute(_SID + " FOR UPDATE", scope_params(scope)).fetchone()
    return None if row is None else int(row[0])


def supersede_key(conn: Any, sid: int, new: Memory, now: float) -> list[int]:
    """Mark the live memories of ``sid`` with ``new``'s category and key superseded by it."""
    rows = conn.execute(
        "UPDATE memories m SET superseded_by = %s, superseded_at = %s, updated_at = %s "
        f"WHERE m.sid = %s AND m.category = %s AND m.key = %s AND {LIVE} RETURNING m.mid",
        (new.id, now, now, sid, new.category, new.key),
    ).fetchall()
    return [int(r[0]) for r in rows]
