"""`PostgresKnowledgeStore`: a tenant's documents in PostgreSQL + pgvector, for retrieval.

The same API and semantics as `SQLiteKnowledgeStore` (``sqlite/_knowledge.py``):
documents cut by `chunk_document`, one row per chunk in ``knowledge_chunks`` with
its source, heading path and metadata, its text as a tsvector (CJK bigrams) and,
with an embedder, its vector; search is the memory store's hybrid search
(``_hybrid.py``) without importance and recency, so a passage's score is its
relevance, a similarity in 0..1.

- **Per tenant, in SQL.** Each store object serves one ``tenant``; every statement
  is keyed by the tenant's ``tid`` resolved from its name in the same transaction,
  and the rows of a search are fetched through a join on the name again.
- **Re-ingesting a source replaces it** in one transaction that locks the tenant
  row first: old chunks out, new ones in, as one change seen by every worker.
- **Experiences**: passages of a category, ``set_active(source, False)`` takes a
  source out of search; `view` gives a `KnowledgeStore` limited to categories.
- **Shared with SQLite**: input checks, chunking, metadata, search arguments and
  the ranking of hits are ``stores/_knowledge_input.py``'s, listed in the class body.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._errors import ConfigError
from ...llm._embed import Embedder
from ...model._checks import unicode_problem
from ...text._chunk import Chunk
from ...text._query import query_units
from ...text._scores import SearchWeights
from ...text._terms import segment
from ...tokens._count import HeuristicCounter, TokenCounter
from .. import _knowledge_input as _input
from .._knowledge import KnowledgeHit
from .._knowledge_input import COLUMNS, dump_metas, indexed, ranked_hits, search_args
from ._base import PgWorkerStore
from ._hybrid import TS_CONFIG, PgHybrid, add_cosines
from ._space import PgSpace, vector_literal

__all__ = ["PgKnowledgeView", "PostgresKnowledgeStore"]

_INSERT = (
    "INSERT INTO knowledge_chunks (tid, source, idx, category, active, created_at, "
    "embedding_model, heading_path, meta, content, tsv, embedding) VALUES "
    f"(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, to_tsvector('{TS_CONFIG}', %s), %s::vector)"
)
_TENANT = "SELECT tid, size FROM knowledge_scopes WHERE tenant = %s"


class PostgresKnowledgeStore(PgWorkerStore):
    """A tenant's documents, chunked into the hybrid index (see the module docstring).

    ``db`` is a ``postgresql://…`` URL or an open `psycopg_pool.ConnectionPool`;
    the other arguments as for `SQLiteKnowledgeStore` (``exact_max`` and
    ``migrate`` as for `PostgresMemoryStore`).
    """

    thread_name = "contextwright-pg-knowledge"

    def __init__(
        self,
        db: Any,
        *,
        embedder: Embedder | None = None,
        tenant: str = "default",
        clock: Callable[[], float] = time.time,
        weights: SearchWeights | None = None,
        counter: TokenCounter | None = None,
        exact_max: int = 8_192,
        migrate: bool = True,
        max_size: int = 4,
    ) -> None:
        if not isinstance(tenant, str) or not tenant:
            raise ConfigError(f"tenant must be a non-empty string, got {tenant!r}")
        if (problem := unicode_problem(tenant)) is not None:
            raise ConfigError(f"tenant {problem}")
        self._open(db, apply_migrations=migrate, max_size=max_size)
        self.tenant = tenant
        self.embedder = embedder
        self.clock = clock
        self.weights = weights or SearchWeights()
        self.counter = counter or HeuristicCounter()
        try:
            self.space = PgSpace(self._pool, "knowledge", "knowledge_chunks", embedder)
        except BaseException:
            self._abandon()
            raise
        self._hybrid = PgHybrid(
            self.space, table="knowledge_chunks", alias="c", key="kid", exact_max=exact_max
        )

    def __repr__(self) -> str:
        return f"PostgresKnowledgeStore({self.where!r}, tenant={self.tenant!r})"

    def _lock_tenant(self, conn: Any, create: bool) -> int | None:
        if create:
            row = conn.execute(
                "INSERT INTO knowledge_scopes (tenant) VALUES (%s) ON CONFLICT (tenant) "
                "DO UPDATE SET size = knowledge_scopes.size RETURNING tid",
                (self.tenant,),
            ).fetchone()
        else:
            row = conn.execute(_TENANT + " FOR UPDATE", (self.tenant,)).fetchone()
        return None if row is None else int(row[0])

    # -- writes ----------------------------------------------------------------------------

    ingest = _input.ingest
    ingest_file = _input.ingest_file
    add = _input.add

    def _write(
        self,
        source: str,
        chunks: Sequence[Chunk],
        category: str,
        active: bool,
        meta: Mapping[str, Any] | None,
        extra: Mapping[str, Any],
    ) -> int:
        metas = dump_metas(chunks, meta, extra)
        texts = [indexed(c.heading_path, c.content) for c in chunks]
        vectors = self.space.embed(texts) if self.embedder is not None and chunks else None
        model = self.space.model if vectors is not None else None
        now = self.clock()
        rows = [
            (0, source, c.index, category, bool(active), now, model,
             json.dumps(list(c.heading_path), ensure_ascii=False), m, c.content, segment(t),
             None if vectors is None else vector_literal(vectors[i]))
            for i, (c, m, t) in enumerate(zip(chunks, metas, texts, strict=True))
        ]  # fmt: skip
        with self._conn(write=True) as conn:
            if vectors is not None:
                self.space.record(conn)
            tid = self._lock_tenant(conn, create=True)
            assert tid is not None
            removed = conn.execute(
                "DELETE FROM knowledge_chunks WHERE tid = %s AND source = %s", (tid, source)
            ).rowcount
            if rows:
                with conn.cursor() as cur:
                    cur.executemany(_INSERT, [(tid, *r[1:]) for r in rows])
            conn.execute(
                "UPDATE knowledge_scopes SET size = size + %s WHERE tid = %s",
                (len(rows) - removed, tid),
            )
        if vectors is not None:
            self.space.confirm()
        return len(chunks)

    def remove(self, source: str) -> int:
        """Delete a source's chunks; returns how many."""
        with self._conn(write=True) as conn:
            tid = self._lock_tenant(conn, create=False)
            if tid is None:
                return 0
            removed = int(
                conn.execute(
                    "DELETE FROM knowledge_chunks WHERE tid = %s AND source = %s", (tid, source)
                ).rowcount
            )
            if removed:
                conn.execute(
                    "UPDATE knowledge_scopes SET size = size - %s WHERE tid = %s", (removed, tid)
                )
        return removed

    def set_active(self, source: str, active: bool) -> int:
        """Switch a source's chunks on or off for search; returns how many chunks."""
        with self._conn() as conn:
            return int(
                conn.execute(
                    "UPDATE knowledge_chunks c SET active = %s FROM knowledge_scopes t "
                    "WHERE t.tid = c.tid AND t.tenant = %s AND c.source = %s",
                    (bool(active), self.tenant, source),
                ).rowcount
            )

    # -- reads -----------------------------------------------------------------------------

    def sources(self) -> list[str]:
        """The tenant's sources, sorted."""
        with self._conn() as conn:
            return [
                r[0]
                for r in conn.execute(
                    'SELECT DISTINCT c.source COLLATE "C" AS source FROM knowledge_chunks c '
                    "JOIN knowledge_scopes t ON t.tid = c.tid WHERE t.tenant = %s ORDER BY 1",
                    (self.tenant,),
                )
            ]

    def count(self, *, include_inactive: bool = False) -> int:
        """How many chunks the tenant has (active ones unless asked)."""
        live = "" if include_inactive else " AND c.active"
        with self._conn() as conn:
            (n,) = conn.execute(
                "SELECT count(*) FROM knowledge_chunks c JOIN knowledge_scopes t ON t.tid = c.tid "
                f"WHERE t.tenant = %s{live}",
                (self.tenant,),
            ).fetchone()
        return int(n)

    def search_sync(
        self,
        query: str,
        *,
        limit: int = 5,
        categories: Sequence[str] | None = None,
        min_score: float = 0.0,
    ) -> list[KnowledgeHit]:
        """Active passages relevant to ``query``, best first; scores are similarities in 0..1."""
        args = search_args(query, limit, min_score, categories)
        if args is None:
            return []
        n, floor, cats = args
        cat_sql = "" if cats is None else " AND c.category = ANY(%s)"
        cat_params: tuple[Any, ...] = () if cats is None else (cats,)
        units = query_units(query)
        qvec = self.space.query_vector(query)
        k = max(4 * n, 32)
        with self._conn() as conn, conn.transaction():
            found = conn.execute(_TENANT, (self.tenant,)).fetchone()
            if found is None:
                return []
            tid, size = int(found[0]), int(found[1])
            cands = self._hybrid.candidates(
                conn, units, qvec, k, size=size, scope=("c.tid = %s", (tid,)),
                where=f"c.tid = %s AND c.active{cat_sql}", params=(tid, *cat_params),
            )  # fmt: skip
            if not cands.ids:
                return []
            cos, cos_params = self._hybrid.cosine_sql(qvec, size=size)
            rows = conn.execute(
                f"SELECT {COLUMNS}, {cos} FROM knowledge_chunks c JOIN knowledge_scopes t "
                f"ON t.tid = c.tid WHERE t.tenant = %s AND c.active{cat_sql} AND c.kid = ANY(%s)",
                (*cos_params, self.tenant, *cat_params, sorted(cands.ids)),
            ).fetchall()
        add_cosines(cands, rows)
        return ranked_hits(cands, rows, self.weights, floor, n)

    retrieve_for_prompt = _input.retrieve_for_prompt

    def view(
        self, *, categories: Sequence[str] | None = None, min_score: float = 0.0
    ) -> PgKnowledgeView:
        """A `KnowledgeStore` over this one, limited to ``categories`` (e.g. experiences)."""
        return PgKnowledgeView(self, None if categories is None else tuple(categories), min_score)

    # -- async (the KnowledgeStore protocol) ---------------------------------------------------

    async def search(self, query: str, limit: int) -> list[KnowledgeHit]:
        """`search_sync` on the store's threads."""
        return await self._run(functools.partial(self.search_sync, query, limit=limit))


class PgKnowledgeView:
    """A `KnowledgeStore` that searches some categories of a `PostgresKnowledgeStore`."""

    def __init__(
        self, store: PostgresKnowledgeStore, categories: tuple[str, ...] | None, min_score: float
    ) -> None:
        self.store = store
        self.categories = categories
        self.min_score = min_score

    async def search(self, query: str, limit: int) -> list[KnowledgeHit]:
        call = functools.partial(
            self.store.search_sync, query, limit=limit, categories=self.categories,
            min_score=self.min_score,
        )  # fmt: skip
        return await self.store._run(call)

    def __repr__(self) -> str:
        return f"PgKnowledgeView({self.store!r}, categories={self.categories!r})"
