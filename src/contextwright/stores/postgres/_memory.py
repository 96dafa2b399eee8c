"""`PostgresMemoryStore`: long-term memory on PostgreSQL + pgvector, for many workers.

The same public API and semantics as `SQLiteMemoryStore` (``sqlite/_memory.py``):
the same validators (``stores/_memory.py``), the same row conversion, the same
candidate scoring (`Candidates.scored`) and weighting (`weighted_score`), so a
search ranks alike on both. What differs is where the work happens:

- **Scope in SQL.** Reads join ``memory_scopes`` on tenant, user and namespace, or
  use the ``sid`` such a statement returned in the same transaction; the rows of a
  search are fetched through that join again. Writes lock the scope row first
  (``_memory_rows.py`` `lock_scope`), which serialises writes to one scope across
  workers.
- **Search in the database** (``_hybrid.py``): tsvector + GIN for the lexical
  candidates (CJK as bigrams, as SQLite), pgvector for the vector ones (exact for
  a scope of <= ``exact_max`` rows, HNSW above). There is no process-local vector
  cache to keep current, so another worker's write is seen by the next search
  with no version check.
- **One embedding space** per database (``_space.py``): the first vector records
  model and dimension and creates the HNSW index on ``embedding::vector(d)``;
  another embedder is refused with `ConfigError` naming both; ``reembed`` fills in
  the vectors of memories written without one.
- **Access statistics** are best effort, as in SQLite: one ``UPDATE`` with a 50 ms
  lock timeout and ``synchronous_commit = off`` after the read (a crash may lose
  the last counts, never a memory), skipped on any error.
- **Async**: ``search`` and ``top`` run the sync methods on the store's threads
  (``_base.py``).

The writes live in ``_memory_writes.py``, ``search_sync`` and ``find_similar`` in
``stores/_memory_search.py`` (shared with SQLite), listed in the class body one line each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ...llm._embed import Embedder, Vectors
from ...text._query import Unit
from ...text._scores import SearchWeights, fingerprint
from .. import _memory_input as _input
from .. import _memory_search as _search
from .._candidates import Candidates
from .._memory import (
    Memory,
    Scope,
    check_category,
    check_key,
    check_limit,
)
from . import _memory_writes as _writes
from ._base import PgWorkerStore
from ._hybrid import PgHybrid, add_cosines
from ._memory_rows import (
    COLUMNS,
    FROM,
    IN_SCOPE,
    LIVE,
    categories_sql,
    memory_from_row,
    scope_params,
    scope_sid,
)
from ._space import PgSpace

__all__ = ["PostgresMemoryStore"]


class PostgresMemoryStore(PgWorkerStore):
    """Scoped long-term memory with hybrid search on PostgreSQL (see the module docstring).

    ``db`` is a ``postgresql://…`` URL (the store opens a pool of ``max_size``
    connections and closes it) or an open `psycopg_pool.ConnectionPool` to share.
    ``embedder``, ``clock`` and ``weights`` as for `SQLiteMemoryStore`;
    ``exact_max``: up to this many rows a scope's vectors are searched exactly,
    above it through the HNSW index. ``migrate=False`` refuses a database whose
    schema is behind instead of migrating it.
    """

    thread_name = "contextwright-pg-memory"

    def __init__(
        self,
        db: Any,
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
        weights: SearchWeights | None = None,
        exact_max: int = 8_192,
        migrate: bool = True,
        max_size: int = 4,
    ) -> None:
        self._open(db, apply_migrations=migrate, max_size=max_size)
        self.embedder = embedder
        self.clock = clock
        self.weights = weights or SearchWeights()
        self.exact_max = exact_max
        try:
            self.space = PgSpace(self._pool, "memory", "memories", embedder)
        except BaseException:
            self._abandon()
            raise
        self._hybrid = PgHybrid(
            self.space, table="memories", alias="m", key="mid", exact_max=exact_max
        )

    def __repr__(self) -> str:
        return f"PostgresMemoryStore({self.where!r}, embedder={self.embedder!r})"

    # -- reads --------------------------------------------------------------------------

    def get(self, scope: Scope, id: str) -> Memory | None:
        params = scope_params(scope)
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT {COLUMNS} {FROM} WHERE {IN_SCOPE} AND m.id = %s", (*params, id)
            ).fetchone()
        return None if row is None else memory_from_row(row)

    def count(self, scope: Scope, *, include_superseded: bool = False) -> int:
        """How many memories ``scope`` holds (live ones, unless asked for all)."""
        live = "" if include_superseded else f" AND {LIVE}"
        params = scope_params(scope)
        with self._conn() as conn:
            (n,) = conn.execute(f"SELECT count(*) {FROM} WHERE {IN_SCOPE}{live}", params).fetchone()
        return int(n)

    def history(
        self, scope: Scope, key: str | None = None, category: str | None = None
    ) -> list[Memory]:
        """Every memory of ``scope`` (superseded and inactive too), oldest first."""
        sql, params = f"SELECT {COLUMNS} {FROM} WHERE {IN_SCOPE}", list(scope_params(scope))
        if key is not None:
            check_key(key)
            sql, params = sql + " AND m.key = %s", [*params, key]
        if category is not None:
            sql, params = sql + " AND m.category = %s", [*params, check_category(category)]
        with self._conn() as conn:
            rows = conn.execute(sql + " ORDER BY m.created_at, m.mid", params).fetchall()
        return [memory_from_row(r) for r in rows]

    def top_sync(
        self, scope: Scope, limit: int, *, categories: Sequence[str] | None = None
    ) -> list[Memory]:
        """The live memories of ``scope`` by importance, then the newest first."""
        n = check_limit(limit)
        params = scope_params(scope)
        cats, cat_params = categories_sql(categories)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {COLUMNS} {FROM} WHERE {IN_SCOPE} AND {LIVE}{cats} "
                "ORDER BY m.importance DESC, m.created_at DESC, m.mid DESC LIMIT %s",
                (*params, *cat_params, n),
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
        """The rows of the lexical and vector candidates, and what found them."""
        cats, cat_params = categories_sql(categories)
        live = " AND m.active" + ("" if include_superseded else " AND m.superseded_by IS NULL")
        with self._conn() as conn, conn.transaction():
            found = scope_sid(conn, scope)
            if found is None:
                return None
            sid, size = found
            cands = self._hybrid.candidates(
                conn, units, qvec, k, size=size, scope=("m.sid = %s", (sid,)),
                where=f"m.sid = %s{live}{cats}", params=(sid, *cat_params),
            )  # fmt: skip
            if not cands.ids:
                return [], cands
            cos, cos_params = self._hybrid.cosine_sql(qvec, size=size)
            # by primary key, fenced: before the table's first ANALYZE the planner read the
            # whole scope through its btree and filtered it by id (3 ms at 5,000 rows)
            rows = conn.execute(
                f"SELECT {COLUMNS}, {cos} FROM (SELECT * FROM memories WHERE mid = ANY(%s) "
                f"OFFSET 0) m JOIN memory_scopes s ON s.sid = m.sid WHERE {IN_SCOPE}{live}{cats}",
                (*cos_params, sorted(cands.ids), *scope_params(scope), *cat_params),
            ).fetchall()
        add_cosines(cands, rows)
        return rows, cands

    def _touch(self, mids: list[int], when: float) -> None:
        """Best-effort access statistics (see the module docstring)."""
        if not mids or self._closed:
            return
        try:
            with self._pool.connection(timeout=0.05) as conn, conn.transaction():
                # best effort: never wait for a lock, never for the WAL flush either
                conn.execute("SET LOCAL lock_timeout = '50ms'; SET LOCAL synchronous_commit = off")
                conn.execute(
                    "UPDATE memories SET accessed_at = %s, access_count = access_count + 1 "
                    "WHERE mid = ANY(%s)",
                    (when, mids),
                )
        except Exception:  # busy, or the pool is: the statistics can wait
            pass

    def _same_fingerprint(
        self, scope: Scope, content: str, categories: Sequence[str] | None
    ) -> list[Any]:
        """The live memories of ``scope`` whose text normalises as ``content``'s does."""
        cat_sql, cat_params = categories_sql(categories)
        with self._conn() as conn:
            return list(
                conn.execute(
                    f"SELECT {COLUMNS}, NULL {FROM} WHERE {IN_SCOPE} AND m.fingerprint = %s "
                    f"AND {LIVE}{cat_sql}",
                    (*scope_params(scope), fingerprint(content), *cat_params),
                )
            )

    # -- async (the MemoryStore protocol) ------------------------------------------------------

    search = _search.search
    top = _search.top

    # -- writes (_memory_writes.py) -------------------------------------------------------------

    add = _input.add
    add_many = _writes.add_many
    _add_many = _writes._add_many
    supersede = _writes.supersede
    update_importance = _writes.update_importance
    set_active = _writes.set_active
    forget = _writes.forget
    forget_scope = _writes.forget_scope
    _delete = _writes._delete
    reembed = _writes.reembed
