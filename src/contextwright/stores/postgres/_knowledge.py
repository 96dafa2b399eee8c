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
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ..._errors import ConfigError, InvalidMessageError
from ...llm._embed import Embedder
from ...model._checks import check_unicode, unicode_problem
from ...text._chunk import Chunk, chunk_document
from ...text._query import query_units
from ...text._scores import SearchWeights
from ...text._terms import segment
from ...tokens._count import HeuristicCounter, TokenCounter
from .._knowledge import KnowledgeHit
from .._knowledge_render import render_passages
from .._memory import check_limit, check_score
from ..sqlite._knowledge import _category, _indexed, _passage, _row_text
from ._base import PgWorkerStore
from ._hybrid import TS_CONFIG, PgHybrid, add_cosines
from ._space import PgSpace, vector_literal

__all__ = ["PgKnowledgeView", "PostgresKnowledgeStore"]

_COLUMNS = "c.kid, c.source, c.idx, c.category, c.active, c.heading_path, c.meta, c.content"
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

    def ingest(
        self,
        text: str,
        *,
        source: str,
        format: Literal["markdown", "text"] = "markdown",
        category: str = "",
        active: bool = True,
        meta: Mapping[str, Any] | None = None,
        max_tokens: int = 300,
        overlap_tokens: int = 40,
    ) -> int:
        """Chunk ``text`` and store it as ``source`` (replacing that source); returns the chunk count."""
        chunks = chunk_document(
            text, source=source, format=format, max_tokens=max_tokens,
            overlap_tokens=overlap_tokens, counter=self.counter,
        )  # fmt: skip
        return self._write(source, chunks, _category(category), active, meta, {"format": format})

    def ingest_file(
        self,
        path: str | os.PathLike[str],
        *,
        source: str | None = None,
        format: Literal["markdown", "text"] | None = None,
        category: str = "",
        active: bool = True,
        meta: Mapping[str, Any] | None = None,
        encoding: str = "utf-8",
        max_tokens: int = 300,
        overlap_tokens: int = 40,
    ) -> int:
        """`ingest` a file: markdown for ``.md``/``.markdown``, else text; source = the file name."""
        p = Path(path)
        try:
            text = p.read_text(encoding=encoding)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {p}: {exc}") from exc
        fmt = format or ("markdown" if p.suffix.lower() in (".md", ".markdown") else "text")
        return self.ingest(
            text, source=source or p.name, format=fmt, category=category, active=active,
            meta={"path": str(p), **(meta or {})}, max_tokens=max_tokens,
            overlap_tokens=overlap_tokens,
        )  # fmt: skip

    def add(
        self,
        content: str,
        *,
        source: str,
        category: str = "experience",
        active: bool = True,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Store one passage as is (an experience, a FAQ answer) as ``source``, replacing it."""
        if not isinstance(content, str) or not content.strip():
            raise InvalidMessageError("content", "must be a non-empty string")
        check_unicode(content, "content")
        if not isinstance(source, str) or not source:
            raise ConfigError(f"source must be a non-empty string, got {source!r}")
        if (problem := unicode_problem(source)) is not None:
            raise ConfigError(f"source {problem}")
        chunk = Chunk(content, source, (), 0, {})
        return self._write(source, [chunk], _category(category), active, meta, {})

    def _write(
        self,
        source: str,
        chunks: Sequence[Chunk],
        category: str,
        active: bool,
        meta: Mapping[str, Any] | None,
        extra: Mapping[str, Any],
    ) -> int:
        base = dict(meta or {})
        try:
            metas = [json.dumps({**base, **extra, **c.meta}, ensure_ascii=False) for c in chunks]
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"meta must be JSON-serialisable: {exc}") from exc
        for text in metas:
            if (problem := unicode_problem(text)) is not None:
                raise ConfigError(f"meta {problem}")
        texts = [_indexed(c.heading_path, c.content) for c in chunks]
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
        if not isinstance(query, str):
            raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
        n = check_limit(limit)
        floor = check_score(min_score, "min_score")
        if n == 0 or not query.strip():
            return []
        if isinstance(categories, str):
            raise ConfigError("categories must be a sequence of names, not one string")
        cats = None if categories is None else [_category(c) for c in categories]
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
            cos, cos_params = self._hybrid.cosine_sql(qvec)
            rows = conn.execute(
                f"SELECT {_COLUMNS}, {cos} FROM knowledge_chunks c JOIN knowledge_scopes t "
                f"ON t.tid = c.tid WHERE t.tenant = %s AND c.active{cat_sql} AND c.kid = ANY(%s)",
                (*cos_params, self.tenant, *cat_params, sorted(cands.ids)),
            ).fetchall()
        add_cosines(cands, rows)
        found_rows = cands.scored(rows, self.weights, _row_text, floor)
        scored = [(min(rel, 1.0), row) for rel, row in found_rows]
        scored.sort(key=lambda s: (-s[0], s[1][0]))
        return [KnowledgeHit(_passage(row), score) for score, row in scored[:n]]

    def retrieve_for_prompt(
        self,
        query: str,
        budget_tokens: int,
        *,
        counter: TokenCounter | None = None,
        limit: int = 5,
        locale: str = "en",
        categories: Sequence[str] | None = None,
        min_score: float = 0.0,
    ) -> str:
        """The best passages rendered with source and similarity, within ``budget_tokens``."""
        budget = check_limit(budget_tokens, "budget_tokens")
        hits = self.search_sync(query, limit=limit, categories=categories, min_score=min_score)
        return render_passages(hits, budget, counter or self.counter, locale=locale)

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
