"""Hybrid search over one table family (memories, knowledge): FTS5 candidates, vectors, relevance.

`HybridIndex` is the one hybrid search of the SQLite stores; `SQLiteMemoryStore`
and `SQLiteKnowledgeStore` each hold one, naming their tables, and differ only in
their rows and in what they do with a relevance (memories weigh it by importance
and recency, passages print it).

**Candidates.** A query (``text/_query.py`` `query_units`: content words and CJK
bigrams, stop words dropped so "where does she work" asks for "work") collects
up to ``k`` candidates from each side: FTS5 (`TextIndex`, below) and the scope's
vector index by cosine (``_vectors.py`` `VectorCache`). Each candidate in the
union then gets *both* signals, exactly: its cosine from the cached matrix, its
lexical score (IDF-weighted coverage) from its text; `Candidates.scored` fuses
them (``text/_scores.py``).

**The lexical side under a bounded cost** (`TextIndex`). The index is a
contentless FTS5 table per kind (``memory_fts``, ``knowledge_fts``) whose ``scope``
column holds one token per scope and ``body`` the text segmented as the message
index is (``text/_terms.py`` `segment`). Each unit's document frequency (df) is
counted once (``count(*)`` over FTS5 postings: 0.3 ms for 8,000 matches) and cached
for five minutes; it gives the unit's IDF and decides the plan:

- **Small** (the sum of the units' dfs <= 3,000, or a scope of <= 5,000 rows — the
  usual case): one query, OR of all units, intersected with the scope token when
  the scope is a minority of the table, ranked by BM25, ``LIMIT k``.
- **Large** (a big scope and common words; the benchmark's 100,000 memories in one
  scope): BM25 reads each match's length from FTS5's docsize table (7.6 ms for
  10,000 matches, measured), so it is spent only on the rare units: OR of the rarest units while their dfs add
  up to <= 2,000, ranked by BM25; plus the newest ``k`` rows matching *all* units,
  and the newest ``k`` matching all the common ones (a boolean AND newest-first
  stops after ``k`` rows: 0.1 ms). Together these hold the rows of highest coverage;
  if they are fewer than ``k``, the newest rows matching any unit fill up.

A ranked query ranks in FTS5 alone and then filters its best ``4k`` through the row
table (scope key, liveness, categories) in one statement; only if the filter leaves
fewer than ``k`` does it run again with the join inside. Every candidate is thus
checked against the row table in SQL; FTS rows never leave here without that.
Coverage, not BM25, is the score: the BM25 order only picks candidates.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ...llm._embed import Vectors
from ...text._query import Unit
from ...text._scores import idf
from .._candidates import Candidates
from ._vectors import SpaceGuard, VectorCache

__all__ = ["Candidates", "HybridIndex", "TextIndex"]


class HybridIndex:
    """The hybrid search of one table family (see the module docstring).

    ``fts``, ``rows``, ``key`` and ``seq`` name the tables (`TextIndex`);
    ``load_sql`` loads a scope's vectors (`VectorCache`).
    """

    def __init__(
        self,
        space: SpaceGuard,
        *,
        fts: str,
        rows: str,
        key: str,
        seq: str,
        load_sql: str,
        cache_rows: int,
        exact_max: int,
    ) -> None:
        self.space = space
        self.text = TextIndex(fts, rows, key, seq)
        self.vectors = VectorCache(space, load_sql, cache_rows=cache_rows, exact_max=exact_max)

    def candidates(
        self,
        conn: Any,
        units: list[Unit],
        qvec: Vectors | None,
        k: int,
        *,
        scope: int,
        version: int,
        size: int,
        token: str,
        where: str,
        params: Sequence[Any],
        categories: Sequence[str] | None,
        include_superseded: bool = False,
    ) -> Candidates:
        """Up to ``k`` candidates of each side in scope ``scope`` (its ``version`` and
        ``size`` as read in this transaction), ``where`` checked on the row table."""
        lexical: dict[int, float | None] = {}
        idfs: list[float] = []
        if units:
            dfs = self.text.dfs(conn, units)
            total = self.text.total(conn)
            idfs = [idf(d, total) for d in dfs]
            lexical = self.text.candidates(
                conn, units, dfs, token=token, scope_rows=size, total=total,
                where=where, params=params, k=k,
            )  # fmt: skip
        vector: list[tuple[int, float]] = []
        cosines: dict[int, float] = {}
        index = self.vectors.get(conn, scope, version) if qvec is not None else None
        if index is not None and qvec is not None:
            vector = index.nearest(
                qvec, k, categories=categories, include_superseded=include_superseded
            )
            cosines = dict(vector)
            cosines.update(index.cosines([i for i in lexical if i not in cosines], qvec))
        return Candidates(units, idfs, lexical, vector, cosines)

    def clear(self) -> None:
        """Drop the cached vectors (the store is closing)."""
        self.vectors.clear()


class TextIndex:
    """FTS5 candidate retrieval for one table pair (see the module docstring).

    ``fts`` is the FTS5 table, ``rows`` the row table with its alias (``"memories
    m"``), ``key`` its rowid column (``"m.mid"``), ``seq`` its name in
    ``sqlite_sequence``.
    """

    small_df = 3_000
    small_scope = 5_000
    rare_budget = 2_000
    df_ttl = 300.0
    df_cache_size = 8_192

    def __init__(self, fts: str, rows: str, key: str, seq: str) -> None:
        self.fts = fts
        self.rows = rows
        self.key = key
        self.seq = seq
        self._dfs: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def total(self, conn: Any) -> int:
        """Rows ever inserted (an upper bound of the table's size; the N of IDF)."""
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (self.seq,)).fetchone()
        return int(row[0]) if row else 0

    def dfs(self, conn: Any, units: Sequence[Unit]) -> list[int]:
        """Document frequency of each unit over the whole table (cached a few minutes)."""
        now = time.monotonic()
        out: list[int] = []
        for u in units:
            with self._lock:
                hit = self._dfs.get(u.expr)
            if hit is not None and now - hit[1] < self.df_ttl:
                out.append(hit[0])
                continue
            (n,) = conn.execute(
                f"SELECT count(*) FROM {self.fts} WHERE {self.fts} MATCH ?", (f"body : {u.expr}",)
            ).fetchone()
            out.append(int(n))
            with self._lock:
                self._dfs[u.expr] = (int(n), now)
                self._dfs.move_to_end(u.expr)
                while len(self._dfs) > self.df_cache_size:
                    self._dfs.popitem(last=False)
        return out

    def _run(
        self,
        conn: Any,
        match: str,
        token: str | None,
        where: str,
        params: Sequence[Any],
        k: int,
        ranked: bool,
    ) -> list[tuple[int, float | None]]:
        fts, rows, key = self.fts, self.rows, self.key
        expression = f'scope : "{token}" AND body : ({match})' if token else f"body : ({match})"
        if not ranked:  # newest first: FTS5 walks rowids backwards and stops after k
            sql = (
                f"SELECT {fts}.rowid FROM {fts} CROSS JOIN {rows} ON {key} = {fts}.rowid "
                f"WHERE {fts} MATCH ? AND {where} ORDER BY {fts}.rowid DESC LIMIT ?"
            )
            return [(r, None) for (r,) in conn.execute(sql, (expression, *params, k))]
        # Rank in FTS5 alone, then filter the best 4k through the row table: the join
        # costs a lookup per match (1.7 ms per 1,300 matches), the filter rarely drops
        # many. Only if it drops so many that fewer than k remain, join everything.
        # bm25 weights: the scope column only narrows the match, it must not score.
        best = conn.execute(
            f"SELECT rowid, bm25({fts}, 0.0, 1.0) AS rank FROM {fts} WHERE {fts} MATCH ? "
            "ORDER BY rank LIMIT ?",
            (expression, 4 * k),
        ).fetchall()
        if best:
            kept = {
                r
                for (r,) in conn.execute(
                    f"SELECT {key} FROM json_each(?) AS j CROSS JOIN {rows} ON {key} = j.value "
                    f"WHERE {where}",
                    (json.dumps([r for r, _ in best]), *params),
                )
            }
            found = [(r, -s) for r, s in best if r in kept][:k]
            if len(found) >= k or len(best) < 4 * k:
                return found
        sql = (
            f"SELECT {fts}.rowid, bm25({fts}, 0.0, 1.0) AS rank FROM {fts} CROSS JOIN {rows} "
            f"ON {key} = {fts}.rowid WHERE {fts} MATCH ? AND {where} ORDER BY rank LIMIT ?"
        )
        return [(r, -s) for r, s in conn.execute(sql, (expression, *params, k))]

    def candidates(
        self,
        conn: Any,
        units: Sequence[Unit],
        dfs: Sequence[int],
        *,
        token: str,
        scope_rows: int,
        total: int,
        where: str,
        params: Sequence[Any],
        k: int,
    ) -> dict[int, float | None]:
        """Row ids of the lexical candidates (BM25 where it was computed, else None)."""
        if not units or k <= 0:
            return {}
        df = {u.expr: d for u, d in zip(units, dfs, strict=True)}
        # The token narrows FTS5's work when the scope is a minority of the table;
        # for a scope that is most of it, intersecting its long posting list costs more
        # than the join filter (5.4 ms vs 4.5 ms for 90% of 100,000 rows).
        scoped = token if scope_rows * 2 < total else None
        every = " OR ".join(u.expr for u in units)
        if sum(dfs) <= self.small_df or scope_rows <= self.small_scope:
            return dict(self._run(conn, every, scoped, where, params, k, ranked=True))
        by_df = sorted(units, key=lambda u: df[u.expr])
        rare: list[Unit] = []
        spent = 0
        for u in by_df:
            if spent + df[u.expr] > self.rare_budget:
                break
            rare.append(u)
            spent += df[u.expr]
        common = by_df[len(rare) :]
        found: dict[int, float | None] = {}
        if rare:
            found.update(
                self._run(conn, " OR ".join(u.expr for u in rare), scoped, where, params, k, True)
            )
        groups = [units] if len(units) > 1 else []
        if rare and common:
            groups.append(common)
        for group in groups:
            match = " AND ".join(u.expr for u in group)
            for r, _ in self._run(conn, match, scoped, where, params, k, ranked=False):
                found.setdefault(r, None)
        if len(found) < k:
            for r, _ in self._run(conn, every, scoped, where, params, k, ranked=False):
                found.setdefault(r, None)
        return found
