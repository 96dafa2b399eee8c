"""Opening a memory or knowledge store by where it lives: a file path, or a database URL.

``open_memory_store(db, **kw)`` gives `SQLiteMemoryStore` for a path, a
`SQLiteStore` (shared file) or ``sqlite:///path``, and `PostgresMemoryStore` for
``postgresql://…``/``postgres://…``; ``open_knowledge_store`` likewise. The keyword
arguments go to the store (``embedder``, ``clock``, ``weights``, ``tenant`` for
knowledge…). The PostgreSQL classes are imported only when a URL asks for them,
so this module (and ``import contextwright``) never imports psycopg; without it a
PostgreSQL URL raises `MissingDependencyError` naming the ``postgres`` extra.

`open_backend(store)` does the same for `Conversations`' ``store``: a `Backend` as
is, a PostgreSQL URL's `PostgresBackend`, else an `SQLiteBackend` over a path, a
``sqlite:///`` URL or an `SQLiteStore` (None: in memory).

``sqlite:///rel/path`` is relative, ``sqlite:////abs/path`` absolute (as in
SQLAlchemy), ``sqlite:///:memory:`` in memory.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError
from ._contract import Backend
from ._url import parse_db
from .postgres._connect import is_postgres_url
from .sqlite._backend import SQLiteBackend
from .sqlite._store import SQLiteStore

if TYPE_CHECKING:
    from .postgres._knowledge import PostgresKnowledgeStore
    from .postgres._memory import PostgresMemoryStore
    from .sqlite._knowledge import SQLiteKnowledgeStore
    from .sqlite._memory import SQLiteMemoryStore

__all__ = ["open_backend", "open_knowledge_store", "open_memory_store", "sqlite_path"]


def sqlite_path(db: object) -> str | os.PathLike[str] | SQLiteStore:
    """What `SQLiteStore` takes for ``db`` (a path, a store, or a ``sqlite://`` URL)."""
    if isinstance(db, SQLiteStore):
        return db
    if isinstance(db, os.PathLike):
        return db
    if isinstance(db, str) and db:
        if db.lower().startswith("sqlite:"):
            rest = db[len("sqlite:") :]
            if not rest.startswith("///") or len(rest) == 3:
                raise ConfigError(f"db: a SQLite URL is sqlite:///path, got {db!r:.80}")
            return rest[3:]
        if "://" in db:
            raise ConfigError(
                f"db: expected a file path, sqlite:///path or postgresql://…, got {db!r:.80}"
            )
        return db
    raise ConfigError(f"db: expected a path or a URL, got {db!r:.80}")


def open_memory_store(db: Any, **kw: Any) -> SQLiteMemoryStore | PostgresMemoryStore:
    """The memory store for ``db``: SQLite for a path / ``sqlite:///…``, PostgreSQL for a URL."""
    if is_postgres_url(db):
        from .postgres._memory import PostgresMemoryStore

        return PostgresMemoryStore(db, **kw)
    from .sqlite._memory import SQLiteMemoryStore

    return SQLiteMemoryStore(sqlite_path(db), **kw)


def open_knowledge_store(db: Any, **kw: Any) -> SQLiteKnowledgeStore | PostgresKnowledgeStore:
    """The knowledge store for ``db``: SQLite for a path / ``sqlite:///…``, PostgreSQL for a URL."""
    if is_postgres_url(db):
        from .postgres._knowledge import PostgresKnowledgeStore

        return PostgresKnowledgeStore(db, **kw)
    from .sqlite._knowledge import SQLiteKnowledgeStore

    return SQLiteKnowledgeStore(sqlite_path(db), **kw)


def open_backend(store: object) -> tuple[SQLiteStore | None, Backend]:
    """(the `SQLiteStore`, if one was opened or given; the `Backend`) for ``store``."""
    if isinstance(store, str) and store:
        target = parse_db(store)  # sqlite:///path is a path; postgresql://… a server
        if target.kind == "postgres":
            from .postgres import PostgresBackend

            return None, PostgresBackend(target.url).backend()
        store = target.path
    if isinstance(store, Backend):
        return None, store
    if store is None or isinstance(store, (str, os.PathLike, SQLiteStore)):
        sqlite = store if isinstance(store, SQLiteStore) else SQLiteStore(store or ":memory:")
        return sqlite, SQLiteBackend(sqlite).backend()
    raise ConfigError(
        f"store must be a Backend, an SQLiteStore or a path, got {type(store).__name__}"
    )
