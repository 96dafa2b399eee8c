"""`SQLiteKnowledgeStore`: documents of a tenant in the hybrid index, for retrieval.

Documents are cut by `chunk_document` (headings → paragraphs → sentences, with
overlap) and each chunk is stored in ``knowledge_chunks`` with its source, heading
path and metadata, indexed in ``knowledge_fts`` (CJK bigrams, ``text/_terms.py``)
and, with an embedder, as a vector in ``knowledge_vectors`` (tables:
``stores/sqlite/_migrations.py`` ``m003_knowledge``). Search is the memory store's hybrid
search (``_hybrid.py`` `HybridIndex`) without importance and
recency: a passage's score is its relevance, a similarity in 0..1 — the number
the rendered passage prints.

- **Per tenant, in SQL.** Knowledge is shared by a tenant's users, never across
  tenants: each store object serves one ``tenant`` and every statement is keyed by
  the tenant's ``tid``, resolved from the tenant name in the same transaction.
- **Re-ingesting a source replaces it**, in one transaction: the old chunks, their
  index entries and vectors go, the new ones come. A source is the unit of update.
- **Experiences** (reviewed, gated passages) are passages of category ``"experience"`` (any
  category works) added with `add`; ``set_active(source, False)`` takes a source out
  of every search without deleting it, and `view` gives a `KnowledgeStore` limited to
  some categories for `SimilarExperiencesSource`, whose stage gate decides when it
  is asked at all.

What the PostgreSQL store does the same way (checking and chunking input,
metadata, search arguments, ranking hits) is in ``stores/_knowledge_input.py``;
``ingest``, ``ingest_file``, ``add`` and ``retrieve_for_prompt`` are listed from there.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..._errors import ConfigError, StoreError
from ...llm._embed import Embedder
from ...model._checks import unicode_problem
from ...text._chunk import Chunk
from ...text._query import query_units
from ...text._scores import SearchWeights
from ...text._terms import segment
from ...text._vectors import VectorIndex
from ...tokens._count import HeuristicCounter, TokenCounter
from .. import SQLiteStore
from .. import _knowledge_input as _input
from .._knowledge import KnowledgeHit
from .._knowledge_input import COLUMNS, dump_metas, indexed, ranked_hits, search_args
from ._hybrid import HybridIndex
from ._vectors import SpaceGuard
from ._worker import WorkerStore

__all__ = ["KnowledgeView", "SQLiteKnowledgeStore"]


class SQLiteKnowledgeStore(WorkerStore):
    """A tenant's documents, chunked into the hybrid index (see the module docstring).

    ``path_or_store`` is a `SQLiteStore` to share or a path. ``embedder`` enables
    vector search (one model per file, as for memories). ``counter`` measures chunks
    when ingesting (default: the heuristic counter).
    """

    thread_name = "contextwright-knowledge"

    def __init__(
        self,
        path_or_store: str | os.PathLike[str] | SQLiteStore,
        *,
        embedder: Embedder | None = None,
        tenant: str = "default",
        clock: Callable[[], float] = time.time,
        weights: SearchWeights | None = None,
        counter: TokenCounter | None = None,
        cache_rows: int = 2_000_000,
        exact_max: int = 8_192,
    ) -> None:
        if not isinstance(tenant, str) or not tenant:
            raise ConfigError(f"tenant must be a non-empty string, got {tenant!r}")
        if (problem := unicode_problem(tenant)) is not None:
            raise ConfigError(f"tenant {problem}")
        self._open(path_or_store, clock)
        self.tenant = tenant
        self.embedder = embedder
        self.clock = clock
        self.weights = weights or SearchWeights()
        self.counter = counter or HeuristicCounter()
        try:
            self.space = SpaceGuard(self.db, "knowledge", embedder)
        except BaseException:
            self._abandon()
            raise
        self._index = HybridIndex(
            self.space, fts="knowledge_fts", rows="knowledge_chunks c", key="c.kid",
            seq="knowledge_chunks",
            load_sql="SELECT c.kid, c.category, 0, c.active, v.vector FROM knowledge_chunks c "
            "INDEXED BY knowledge_by_tenant JOIN knowledge_vectors v ON v.kid = c.kid "
            "WHERE c.tid = ? ORDER BY c.kid",
            cache_rows=cache_rows, exact_max=exact_max,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"SQLiteKnowledgeStore({self.db.path!r}, tenant={self.tenant!r})"

    @contextmanager
    def _tx(self, write: bool) -> Iterator[Any]:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        with self.db._tx(write, self.tenant) as conn:
            yield conn

    def _tenant_row(self, conn: Any, create: bool) -> tuple[int, int, int] | None:
        if create:
            conn.execute(
                "INSERT OR IGNORE INTO knowledge_scopes (tenant) VALUES (?)", (self.tenant,)
            )
        row = conn.execute(
            "SELECT tid, version, size FROM knowledge_scopes WHERE tenant = ?", (self.tenant,)
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    @staticmethod
    def _bump(conn: Any, tid: int, grew: int) -> int:
        conn.execute(
            "UPDATE knowledge_scopes SET version = version + 1, size = size + ? WHERE tid = ?",
            (grew, tid),
        )
        return int(
            conn.execute("SELECT version FROM knowledge_scopes WHERE tid = ?", (tid,)).fetchone()[0]
        )

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
        now = self.clock()
        with self._tx(True) as conn:
            if vectors is not None:
                self.space.record(conn)
            found = self._tenant_row(conn, create=True)
            assert found is not None
            tid, before, _ = found
            removed = self._delete_source(conn, tid, source)
            (top,) = conn.execute(
                "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'knowledge_chunks'), 0)"
            ).fetchone()
            kids = list(range(top + 1, top + 1 + len(chunks)))
            model = self.space.model if vectors is not None else None
            conn.executemany(
                "INSERT INTO knowledge_chunks (kid, tid, source, idx, category, active, created_at, "
                "embedding_model, heading_path, meta, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (k, tid, source, c.index, category, int(bool(active)), now, model,
                     json.dumps(list(c.heading_path), ensure_ascii=False), m, c.content)
                    for k, c, m in zip(kids, chunks, metas, strict=True)
                ],
            )  # fmt: skip
            conn.executemany(
                "INSERT INTO knowledge_fts (rowid, scope, body) VALUES (?, ?, ?)",
                [(k, f"t{tid}", segment(t)) for k, t in zip(kids, texts, strict=True)],
            )
            if vectors is not None:
                conn.executemany(
                    "INSERT INTO knowledge_vectors (kid, vector) VALUES (?, ?)",
                    [(k, v.tobytes()) for k, v in zip(kids, vectors, strict=True)],
                )
            after = self._bump(conn, tid, len(chunks) - len(removed))

        def change(index: VectorIndex) -> None:
            for kid in removed:
                index.remove(kid)
            if vectors is not None and kids:
                index.append(kids, vectors, [category] * len(kids), active=[active] * len(kids))

        self._index.vectors.after_write(tid, before, after, change)
        return len(chunks)

    @staticmethod
    def _delete_source(conn: Any, tid: int, source: str) -> list[int]:
        rows = conn.execute(
            "SELECT kid, heading_path, content FROM knowledge_chunks WHERE tid = ? AND source = ?",
            (tid, source),
        ).fetchall()
        if rows:
            # A contentless FTS5 row is deleted by giving back the values it indexed.
            conn.executemany(
                "INSERT INTO knowledge_fts (knowledge_fts, rowid, scope, body) "
                "VALUES ('delete', ?, ?, ?)",
                [(k, f"t{tid}", segment(indexed(json.loads(h), c))) for k, h, c in rows],
            )
            conn.execute("DELETE FROM knowledge_chunks WHERE tid = ? AND source = ?", (tid, source))
        return [r[0] for r in rows]

    def remove(self, source: str) -> int:
        """Delete a source's chunks; returns how many."""
        with self._tx(True) as conn:
            found = self._tenant_row(conn, create=False)
            if found is None:
                return 0
            tid, before, _ = found
            removed = self._delete_source(conn, tid, source)
            after = self._bump(conn, tid, -len(removed)) if removed else before

        def change(index: VectorIndex) -> None:
            for kid in removed:
                index.remove(kid)

        self._index.vectors.after_write(tid, before, after, change)
        return len(removed)

    def set_active(self, source: str, active: bool) -> int:
        """Switch a source's chunks on or off for search; returns how many chunks."""
        with self._tx(True) as conn:
            found = self._tenant_row(conn, create=False)
            if found is None:
                return 0
            tid, before, _ = found
            kids = [
                r[0]
                for r in conn.execute(
                    "SELECT kid FROM knowledge_chunks WHERE tid = ? AND source = ?", (tid, source)
                )
            ]
            conn.execute(
                "UPDATE knowledge_chunks SET active = ? WHERE tid = ? AND source = ?",
                (int(bool(active)), tid, source),
            )
            after = self._bump(conn, tid, 0) if kids else before

        def change(index: VectorIndex) -> None:
            for kid in kids:
                index.set_active(kid, bool(active))

        self._index.vectors.after_write(tid, before, after, change)
        return len(kids)

    # -- reads -----------------------------------------------------------------------------

    def sources(self) -> list[str]:
        """The tenant's sources, sorted."""
        with self._tx(False) as conn:
            return [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT c.source FROM knowledge_chunks c JOIN knowledge_scopes t "
                    "ON t.tid = c.tid WHERE t.tenant = ? ORDER BY c.source",
                    (self.tenant,),
                )
            ]

    def count(self, *, include_inactive: bool = False) -> int:
        """How many chunks the tenant has (active ones unless asked)."""
        live = "" if include_inactive else " AND c.active = 1"
        with self._tx(False) as conn:
            (n,) = conn.execute(
                "SELECT count(*) FROM knowledge_chunks c JOIN knowledge_scopes t ON t.tid = c.tid "
                f"WHERE t.tenant = ?{live}",
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
        cat_sql = "" if cats is None else f" AND c.category IN ({', '.join('?' * len(cats))})"
        cat_params = tuple(cats or ())
        units = query_units(query)
        qvec = self.space.query_vector(query)
        k = max(4 * n, 32)
        with self._tx(False) as conn:
            found = self._tenant_row(conn, create=False)
            if found is None:
                return []
            tid, version, size = found
            cands = self._index.candidates(
                conn, units, qvec, k, scope=tid, version=version, size=size, token=f"t{tid}",
                where=f"c.tid = ? AND c.active = 1{cat_sql}", params=(tid, *cat_params),
                categories=cats,
            )  # fmt: skip
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM json_each(?) AS j CROSS JOIN knowledge_chunks c "
                "ON c.kid = j.value CROSS JOIN knowledge_scopes t ON t.tid = c.tid "
                f"WHERE t.tenant = ? AND c.active = 1{cat_sql}",
                (json.dumps(sorted(cands.ids)), self.tenant, *cat_params),
            ).fetchall()
        return ranked_hits(cands, rows, self.weights, floor, n)

    retrieve_for_prompt = _input.retrieve_for_prompt

    def view(
        self, *, categories: Sequence[str] | None = None, min_score: float = 0.0
    ) -> KnowledgeView:
        """A `KnowledgeStore` over this one, limited to ``categories`` (e.g. experiences)."""
        return KnowledgeView(self, None if categories is None else tuple(categories), min_score)

    # -- async (the KnowledgeStore protocol) ---------------------------------------------------

    async def search(self, query: str, limit: int) -> list[KnowledgeHit]:
        """`search_sync` on the store's worker thread."""
        return await self._run(functools.partial(self.search_sync, query, limit=limit))

    def _release(self) -> None:
        self._index.clear()


class KnowledgeView:
    """A `KnowledgeStore` that searches some categories of a `SQLiteKnowledgeStore`."""

    def __init__(
        self, store: SQLiteKnowledgeStore, categories: tuple[str, ...] | None, min_score: float
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
        return f"KnowledgeView({self.store!r}, categories={self.categories!r})"
