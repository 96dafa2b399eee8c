"""What the SQLite and PostgreSQL memory stores' writes do the same way, and the row they read.

`SQLiteMemoryStore` and `PostgresMemoryStore` store a memory each in its own
tables and transactions (``sqlite/_memory_writes.py``, ``postgres/_memory_writes.py``);
what comes before that is the same and lives here once, so both refuse the same
input with the same error: preparing a batch (`prepare_item`, then the vectors,
given or embedded, in one batch: `prepare_batch`), `add` (one item of `add_many`)
and `successor` (the item that supersedes a memory, from the old one). Both
backends select the memory columns in one order (their ``COLUMNS``), which
`memory_from_row` reads.

``add`` is a module-level function of the store, listed in each class body (as
``sqlite/_store.py`` lists its methods); a store provides ``embedder``, ``space``
(``dimension``, ``model``, ``embed``), ``clock``, ``get`` and ``add_many``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .._errors import ConfigError, InvalidMessageError
from ..llm._embed import Vectors, normalize_rows
from ..model._checks import dump_json
from ._memory import (
    Memory,
    Scope,
    check_category,
    check_content,
    check_importance,
    check_key,
    check_scope,
)

__all__ = [
    "UNSET", "add", "memory_from_row", "prepare_batch", "prepare_item", "scope_params",
    "successor",
]  # fmt: skip

UNSET: Any = object()  # an argument not given (None is a value: no key)


class _Store(Protocol):
    embedder: Any
    space: Any
    clock: Callable[[], float]

    def get(self, scope: Scope, id: str) -> Memory | None: ...

    def add_many(self, scope: Scope, items: Sequence[str | Mapping[str, Any]]) -> list[Memory]: ...


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
        meta_json = dump_json(meta, f"{where}.meta" if i else "meta")
    except InvalidMessageError as exc:  # a setting-like argument: ConfigError, as the others
        raise ConfigError(str(exc)) from None
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


def prepare_batch(
    self: _Store, scope: Scope, items: Sequence[str | Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], list[Vectors | None], float, str | None] | None:
    """``(prepared items, their vectors, now, embedding model or None)``; None for no items.

    Everything `add_many` checks and computes before its transaction opens.
    """
    scope_params(scope)
    prepared = [prepare_item(i, item) for i, item in enumerate(items)]
    if not prepared:
        return None
    texts = [p["content"] for p in prepared]
    vectors = _vectors(self, texts, [p["embedding"] for p in prepared])
    now = self.clock()
    model = self.space.model if any(v is not None for v in vectors) else None
    return prepared, vectors, now, model


def _vectors(
    self: _Store, texts: Sequence[str], given: Sequence[Any | None]
) -> list[Vectors | None]:
    """Vectors for ``texts``: the given ones checked, the others embedded in one batch."""
    out: list[Vectors | None] = [None] * len(texts)
    todo = []
    for i, g in enumerate(given):
        if g is None:
            todo.append(i)
            continue
        if self.embedder is None:
            raise ConfigError("an explicit embedding needs a store opened with an embedder")
        out[i] = normalize_rows(g, self.space.dimension, who=f"embedding[{i}]")[0]
    if self.embedder is not None and todo:
        made = self.space.embed([texts[i] for i in todo])
        for i, v in zip(todo, made, strict=True):
            out[i] = v
    return out


def add(
    self: _Store,
    scope: Scope,
    content: str,
    *,
    category: str = "fact",
    importance: int = 50,
    key: str | None = None,
    source_message_ids: Sequence[str] = (),
    meta: Mapping[str, Any] | None = None,
    embedding: Any = None,
) -> Memory:
    """Store a memory; a live one with the same scope, category and ``key`` is superseded.

    ``embedding`` is a precomputed vector of the store's embedder (else it embeds).
    Raises `InvalidMessageError` for empty content, `ConfigError` for a bad
    importance (0..100), category or key.
    """
    item = {
        "content": content, "category": category, "importance": importance, "key": key,
        "source_message_ids": source_message_ids, "meta": meta, "embedding": embedding,
    }  # fmt: skip
    return self.add_many(scope, [item])[0]


def successor(
    self: _Store,
    scope: Scope,
    old_id: str,
    content: str,
    *,
    category: str,
    importance: int,
    key: str | None,
    source_message_ids: Sequence[str],
    meta: Mapping[str, Any] | None,
    embedding: Any,
) -> tuple[Memory, dict[str, Any]]:
    """The live memory ``old_id`` and the item that supersedes it (`UNSET`: the old one's).

    Raises `InvalidMessageError` if ``old_id`` is not a live memory of ``scope``.
    """
    old = self.get(scope, old_id)
    if old is None:
        raise InvalidMessageError("old_id", f"no memory {old_id!r} in scope {scope.key!r}")
    if old.superseded_by is not None:
        raise InvalidMessageError(
            "old_id", f"memory {old_id!r} is already superseded by {old.superseded_by!r}"
        )
    item = {
        "content": content,
        "category": old.category if category is UNSET else category,
        "importance": old.importance if importance is UNSET else importance,
        "key": old.key if key is UNSET else key,
        "source_message_ids": source_message_ids,
        "meta": meta,
        "embedding": embedding,
    }
    return old, item
