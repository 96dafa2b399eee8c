"""Rows of the memory tables: columns, conversion, scope lookups, input preparation.

Shared by the read side (``_sqlite.py``) and the write side (``_writes.py``) of
`SQLiteMemoryStore`. Every statement that names memories of a scope goes through
``IN_SCOPE`` (tenant, user and namespace compared in SQL) or through a ``sid`` that
`scope_row` returned within the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..._errors import ConfigError, InvalidMessageError
from ...model._checks import unicode_problem
from .._memory import (
    Memory,
    Scope,
    check_category,
    check_content,
    check_importance,
    check_key,
    check_scope,
)

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
UNSET: Any = object()


def memory_from_row(row: Sequence[Any]) -> Memory:
    return Memory(
        content=row[18], category=row[5], importance=row[7], id=row[4], created_at=row[9],
        source_message_ids=tuple(json.loads(row[16])), tenant=row[1], user=row[2],
        namespace=row[3], key=row[6], updated_at=row[10], accessed_at=row[11],
        access_count=row[12], superseded_by=row[13], superseded_at=row[14],
        active=bool(row[8]), meta=json.loads(row[17]), embedding_model=row[15],
    )  # fmt: skip


def scope_params(scope: Scope) -> tuple[str, str, str]:
    check_scope(scope)
    return (scope.tenant, scope.user, scope.namespace)


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


def prepare_item(i: int, item: str | Mapping[str, Any]) -> dict[str, Any]:
    where = f"items[{i}]"
    if isinstance(item, str):
        item = {"content": item}
    if not isinstance(item, Mapping):
        raise InvalidMessageError(where, "must be a content string or a mapping")
    unknown = set(item) - {
        "content", "category", "importance", "key", "source_message_ids", "meta", "embedding",
    }  # fmt: skip
    if unknown:
        raise ConfigError(f"{where}: unknown fields {sorted(unknown)}")
    ids = item.get("source_message_ids", ())
    if isinstance(ids, str) or not all(isinstance(x, str) for x in ids):
        raise ConfigError(f"{where}.source_message_ids must be a sequence of strings")
    meta = dict(item.get("meta") or {})
    try:
        meta_json = json.dumps(meta, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}.meta must be JSON-serialisable: {exc}") from exc
    if (problem := unicode_problem(meta_json)) is not None:
        raise ConfigError(f"{where}.meta {problem}")
    return {
        "content": check_content(item.get("content"), f"{where}.content" if i else "content"),
        "category": check_category(item.get("category", "fact")),
        "importance": check_importance(item.get("importance", 50)),
        "key": check_key(item.get("key")),
        "source_message_ids": tuple(ids),
        "source_json": json.dumps(list(ids)),
        "meta": meta,
        "meta_json": meta_json,
        "embedding": item.get("embedding"),
    }


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
