"""`SQLiteMemoryStore`: long-term memory in the conversations' SQLite file, hybrid search.

Design (the tables: ``stores/sqlite/_migrations.py`` ``m002_memory``; the search:
``_hybrid.py``; the scores: ``text/_scores.py``):

- **Same file, same connection.** Given a `SQLiteStore` the memory store uses its
  connection, lock and transactions (one transaction per call, ``BEGIN IMMEDIATE``
  for writes); given a path it opens one. Either way the migrations have run.
- **Scope in SQL.** Every statement that reads memories joins ``memory_scopes`` on
  ``tenant = ? AND user = ? AND namespace = ?`` or uses the ``sid`` that such a
  statement returned within the same transaction; FTS matches are intersected with
  the scope's token and then joined back through the scope as well. The isolation
  property test drives random multi-user workloads through every method.
- **Writes are whole.** ``add`` with a ``key`` supersedes the live memory of the
  same scope, category and key in the transaction that inserts the new one;
  content, FTS row, vector and supersession commit together or not at all. Input is
  validated and embedded *before* the transaction opens (embedding is the slow part).
- **Vectors cached per scope.** A scope's vectors are read once into a `VectorIndex`
  and kept up to date by this store's own writes; ``memory_scopes.version`` counts
  writes, so a write by another process is noticed by the next search (one indexed
  lookup) and the scope reloaded. Up to ``cache_rows`` rows are cached over all
  scopes, least recently used scopes dropped first.
- **One embedding space.** The first vector written records its model name and
  dimension (``embedding_spaces``); a store opened with another embedder raises
  `ConfigError` naming both.
- **Access statistics** (``accessed_at``, ``access_count``) are updated for the
  memories a search returns, by one statement after the read. It is best effort: if
  another writer holds the database the update is skipped rather than waited for
  (searches run under a deadline, 500 ms by default:
  docs/design-notes.md, Budget shares and deadlines).
- **Async.** ``search`` and ``top`` (the `MemoryStore` protocol) run the sync methods
  on a worker thread owned by the store, so the event loop never waits on SQLite,
  numpy or the embedding model.

The writes live in ``_memory_writes.py`` (a mixin), the row helpers in ``_memory_rows.py``;
``search_sync`` and ``find_similar`` (ranking and near-duplicates, the same on
PostgreSQL) in ``stores/_memory_search.py``, listed in the class body.

Measured on the development machine (2 cores, SQLite 3.40; ``bench/bench_memory.py``)
with 100,000 memories in one scope: ``search_sync`` p50 2.7-2.9 ms / p95 3.5-3.7 ms
lexical, 5.0 / 5.8-6.0 ms hybrid with 384-d vectors (the model's query embedding not included:
MiniLM adds about 11 ms); the first search of a scope loads its vectors (0.8-1 s
at 100,000); ``add_many`` stores 17,000-27,000 memories/s, 10,000-15,000/s with
vectors.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..._errors import StoreError
from ...llm._embed import Embedder, Vectors
from ...text._query import Unit
from ...text._scores import SearchWeights, fingerprint
from .. import SQLiteStore
from .. import _memory_input as _input
from .. import _memory_search as _search
from .._memory import (
    Memory,
    Scope,
    check_category,
    check_key,
    check_limit,
)
from . import _memory_writes as _writes
from ._hybrid import Candidates, HybridIndex
from ._memory_rows import (
    COLUMNS,
    FROM,
    IN_SCOPE,
    LIVE,
    categories_sql,
    memory_from_row,
    scope_params,
    scope_row,
)
from ._vectors import SpaceGuard
from ._worker import WorkerStore


class SQLiteMemoryStore(WorkerStore):
    """Scoped long-term memory with hybrid search (see the module docstring).

    ``path_or_store`` is a `SQLiteStore` to share (conversations and memories in one
    file) or a path for one of its own (``":memory:"`` works). ``embedder`` enables
    vector search; without it search is lexical only. ``weights`` sets the fusion
    and weighting. ``clock`` gives "now" for timestamps and recency.
    """

    thread_name = "contextwright-memory"

    def __init__(
        self,
        path_or_store: str | os.PathLike[str] | SQLiteStore,
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
        weights: SearchWeights | None = None,
        cache_rows: int = 2_000_000,
        exact_max: int = 8_192,
    ) -> None:
        self._open(path_or_store, clock)
        self.embedder = embedder
        self.clock = clock
        self.weights = weights or SearchWeights()
        self.cache_rows = cache_rows
        self.exact_max = exact_max
        try:
            self.space = SpaceGuard(self.db, "memory", embedder)
        except BaseException:
            self._abandon()
            raise
        self._index = HybridIndex(
            self.space, fts="memory_fts", rows="memories m", key="m.mid", seq="memories",
            load_sql="SELECT m.mid, m.category, m.superseded_by IS NOT NULL, m.active, v.vector "
            "FROM memories m INDEXED BY memories_by_scope JOIN memory_vectors v ON v.mid = m.mid "
            "WHERE m.sid = ? ORDER BY m.mid",
            cache_rows=cache_rows, exact_max=exact_max,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"SQLiteMemoryStore({self.db.path!r}, embedder={self.embedder!r})"

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def _tx(self, write: bool, scope: Scope) -> Iterator[Any]:
        scope_params(scope)  # a Scope, or ConfigError before anything is touched
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        with self.db._tx(write, scope.tenant) as conn:
            yield conn

    # -- reads --------------------------------------------------------------------------------

    def get(self, scope: Scope, id: str) -> Memory | None:
        with self._tx(False, scope) as conn:
            row = conn.execute(
                f"SELECT {COLUMNS} {FROM} WHERE {IN_SCOPE} AND m.id = ?", (*scope_params(scope), id)
            ).fetchone()
        return None if row is None else memory_from_row(row)

    def count(self, scope: Scope, *, include_superseded: bool = False) -> int:
        """How many memories ``scope`` holds (live ones, unless asked for all)."""
        live = "" if include_superseded else f" AND {LIVE}"
        with self._tx(False, scope) as conn:
            (n,) = conn.execute(
                f"SELECT count(*) {FROM} WHERE {IN_SCOPE}{live}", scope_params(scope)
            ).fetchone()
        return int(n)

    def history(
        self, scope: Scope, key: str | None = None, category: str | None = None
    ) -> list[Memory]:
        """Every memory of ``scope`` (superseded and inactive too), oldest first."""
        sql, params = f"SELECT {COLUMNS} {FROM} WHERE {IN_SCOPE}", list(scope_params(scope))
        if key is not None:
            sql, params = sql + " AND m.key = ?", [*params, key]
            check_key(key)
        if category is not None:
            sql, params = sql + " AND m.category = ?", [*params, check_category(category)]
        with self._tx(False, scope) as conn:
            rows = conn.execute(sql + " ORDER BY m.created_at, m.mid", params).fetchall()
        return [memory_from_row(r) for r in rows]

    def top_sync(
        self, scope: Scope, limit: int, *, categories: Sequence[str] | None = None
    ) -> list[Memory]:
        """The live memories of ``scope`` by importance, then the newest first."""
        n = check_limit(limit)
        cats, cat_params = categories_sql(categories)
        with self._tx(False, scope) as conn:
            rows = conn.execute(
                f"SELECT {COLUMNS} {FROM} WHERE {IN_SCOPE} AND {LIVE}{cats} "
                "ORDER BY m.importance DESC, m.created_at DESC LIMIT ?",
                (*scope_params(scope), *cat_params, n),
            ).fetchall()
        return [memory_from_row(r) for r in rows]

    search_sync = _search.search_sync
    find_similar = _search.find_similar

    def _candidates(
        self,
        scope: Scope,
        units: list[Unit],
        qvec: Vectors | None,
        k: int,
        categories: Sequence[str] | None,
        include_superseded: bool,
    ) -> tuple[list[Any], Candidates] | None:
        """The rows of the lexical and vector candidates, and what found them (`Candidates`)."""
        cats, cat_params = categories_sql(categories)
        live = " AND m.active = 1" + ("" if include_superseded else " AND m.superseded_by IS NULL")
        with self._tx(False, scope) as conn:
            found = scope_row(conn, scope, create=False)
            if found is None:
                return None
            sid, version, size = found
            cands = self._index.candidates(
                conn, units, qvec, k, scope=sid, version=version, size=size, token=f"s{sid}",
                where=f"m.sid = ?{live}{cats}", params=(sid, *cat_params), categories=categories,
                include_superseded=include_superseded,
            )  # fmt: skip
            rows = self._rows_by_mid(conn, scope, cands.ids, f"{live}{cats}", cat_params)
        return rows, cands

    @staticmethod
    def _rows_by_mid(
        conn: Any, scope: Scope, mids: Iterable[int], where: str, params: Sequence[Any]
    ) -> list[Any]:
        # Driven from the id list (CROSS JOIN fixes the order): left to itself the
        # planner walks the whole scope's index and tests each row (14 ms at 100,000).
        return list(
            conn.execute(
                f"SELECT {COLUMNS} FROM json_each(?) AS j CROSS JOIN memories m ON m.mid = j.value "
                f"CROSS JOIN memory_scopes s ON s.sid = m.sid WHERE {IN_SCOPE}{where}",
                (json.dumps(sorted(mids)), *scope_params(scope), *params),
            )
        )

    def _touch(self, mids: list[int], when: float) -> None:
        """Best-effort access statistics (see the module docstring)."""
        if not mids or self._closed:
            return
        lock = self.db._lock
        if not lock.acquire(timeout=0.05):
            return
        try:
            conn = self.db._conn
            if conn is None:
                return
            (timeout,) = conn.execute("PRAGMA busy_timeout").fetchone()
            conn.execute("PRAGMA busy_timeout = 0")  # never wait for another writer here
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(
                        "UPDATE memories SET accessed_at = ?, access_count = access_count + 1 "
                        "WHERE mid IN (SELECT value FROM json_each(?))",
                        (when, json.dumps(mids)),
                    )
                    conn.execute("COMMIT")
                except sqlite3.Error:
                    conn.rollback()
            except sqlite3.Error:  # busy: another writer has the lock; the statistics can wait
                pass
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")
        finally:
            lock.release()

    def _same_fingerprint(
        self, scope: Scope, content: str, categories: Sequence[str] | None
    ) -> list[Any]:
        """The live memories of ``scope`` whose text normalises as ``content``'s does."""
        with self._tx(False, scope) as conn:
            cat_sql, cat_params = categories_sql(categories)
            return list(
                conn.execute(
                    f"SELECT {COLUMNS} {FROM} WHERE {IN_SCOPE} AND m.fingerprint = ? "
                    f"AND {LIVE}{cat_sql}",
                    (*scope_params(scope), fingerprint(content), *cat_params),
                )
            )

    # -- async (the MemoryStore protocol) ------------------------------------------------------

    search = _search.search
    top = _search.top

    # -- writes (_memory_writes.py) -----------------------------------------------

    add = _input.add
    add_many = _writes.add_many
    supersede = _writes.supersede
    _mark_superseded = _writes._mark_superseded
    _update = _writes._update
    update_importance = _writes.update_importance
    set_active = _writes.set_active
    forget = _writes.forget
    forget_scope = _writes.forget_scope
    _delete = _writes._delete
    reembed = _writes.reembed

    def _release(self) -> None:
        self._index.clear()
