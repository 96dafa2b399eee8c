"""Hybrid search on PostgreSQL: tsvector candidates, pgvector candidates, the same scoring.

The PostgreSQL twin of ``sqlite/_hybrid.py``: a query's units (``text/_query.py``
`query_units`: content words, CJK bigrams, a lone CJK character as a prefix)
collect up to ``k`` candidates from each side, and every candidate in the union is
then scored by `Candidates.scored` (``stores/_candidates.py``), the very function
the SQLite stores use — IDF-weighted coverage computed from the row's text, fused
with its exact cosine. Only *how candidates are found* differs:

- **Lexical**: ``tsv`` holds ``to_tsvector('english', segment(text))`` (CJK as
  overlapping bigrams plus each run's last character, as the FTS5 tables hold
  them) under a GIN index. Each unit becomes its own tsquery, built by PostgreSQL
  from a bound parameter (``plainto_tsquery`` for a word or a bigram, a ``:*``
  prefix for a lone CJK character), so no query syntax from the user is ever
  parsed. The units are OR-ed; candidates are the scope's best ``k`` by
  ``ts_rank`` (ties: newest first). Each unit's document frequency *among the
  scope's rows* gives its IDF, N the scope's size. Unlike SQLite (table-wide, N the
  highest row id: the same ranking when the table holds one scope), a search thus
  costs what its scope costs and its scores tell nothing of other scopes' rows.
- **Vector**: pgvector cosine distance ``<=>``, exact for a small scope; a larger
  one through the HNSW index on ``embedding::vector(d)`` with ``hnsw.ef_search``
  raised to cover the filter, falling back to the exact scan if the filter (scope,
  liveness, categories) left fewer than ``k`` (pgvector 0.6 has no iterative
  index scans).

**A scope of at most ``exact_max`` rows is read once** (`PgHybrid._one_pass`): its
rows chosen by the scope key alone (the tsqueries are in the select list, so the
table-wide GIN filtered by scope is never a plan: taken for a rare unit, it cost
3.7 ms p95 at 200,000 rows), each row
matched once against the OR of the units, a unit only on the rows that matched,
and its exact distance computed, into a narrow materialised table that yields the
document frequencies, both candidate lists and every candidate's cosine. Three
separate reads (counts, lexical, vector) cost 14 ms at 5,000 rows, this one 9
(most of it the 5,000 distances). A larger scope takes the GIN and HNSW indexes,
its document frequencies cached five minutes per scope (125 ms per miss at
200,000 rows before).

``where`` fragments always name the scope key resolved in the same transaction,
and the rows are fetched through a join on the scope's names again by the caller.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ...llm._embed import Vectors
from ...text._query import Unit
from ...text._scores import idf
from .._candidates import Candidates
from ._space import PgSpace, vector_literal

__all__ = ["TS_CONFIG", "PgHybrid", "unit_tsquery"]

TS_CONFIG = "english"


def unit_tsquery(unit: Unit) -> tuple[str, str]:
    """The SQL (one ``%s``) building ``unit``'s tsquery, and its parameter."""
    if unit.cjk and unit.expr.endswith("*"):
        # a lone CJK character (never a quote): a prefix over the bigrams it starts
        return "to_tsquery('simple', %s)", f"'{unit.term}':*"
    text = unit.term if unit.cjk else unit.expr[1:-1].replace('""', '"')
    return f"plainto_tsquery('{TS_CONFIG}', %s)", text


def any_tsquery(units: Sequence[Unit]) -> tuple[str, list[str]]:
    """The SQL of the OR of ``units``' tsqueries, and its parameters."""
    parts = [unit_tsquery(u) for u in units]
    return "(" + " || ".join(p[0] for p in parts) + ")", [p[1] for p in parts]


class PgHybrid:
    """Candidates of one table (``table`` with alias ``alias``, key column ``key``)."""

    df_ttl = 300.0
    df_cache_size = 8_192

    def __init__(self, space: PgSpace, *, table: str, alias: str, key: str, exact_max: int):
        self.space = space
        self.table = table
        self.alias = alias
        self.key = key
        self.exact_max = exact_max
        self._dfs: OrderedDict[tuple[tuple[Any, ...], str], tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def dfs(
        self, conn: Any, units: Sequence[Unit], *, scope: str, params: Sequence[Any]
    ) -> list[int]:
        """Each unit's document frequency among the rows of a scope of more than
        ``exact_max`` rows (``scope``, a fragment on alias ``alias`` naming only the scope
        key, and its ``params``): through the GIN index and the scope key, cached for
        ``df_ttl`` seconds per scope (a smaller scope counts them in `_one_pass`).
        """
        a = self.alias
        parts = [unit_tsquery(u) for u in units]
        now = time.monotonic()
        keys = [(tuple(params), u.expr) for u in units]
        known: dict[tuple[tuple[Any, ...], str], int] = {}
        with self._lock:
            for key in keys:
                hit = self._dfs.get(key)
                if hit is not None and now - hit[1] < self.df_ttl:
                    known[key] = hit[0]
        todo = [(key, part) for key, part in zip(keys, parts, strict=True) if key not in known]
        if todo:
            counts = ", ".join(f"count(*) FILTER (WHERE {a}.tsv @@ {sql})" for _, (sql, _) in todo)
            either = " || ".join(sql for _, (sql, _) in todo)
            row = conn.execute(
                f"SELECT {counts} FROM {self.table} {a} WHERE {scope} AND {a}.tsv @@ ({either})",
                [*(p for _, (_, p) in todo), *params, *(p for _, (_, p) in todo)],
                prepare=False,
            ).fetchone()
            with self._lock:
                for (key, _), n in zip(todo, row, strict=True):
                    known[key] = int(n)
                    self._dfs[key] = (int(n), now)
                    self._dfs.move_to_end(key)
                while len(self._dfs) > self.df_cache_size:
                    self._dfs.popitem(last=False)
        return [known[key] for key in keys]

    def candidates(
        self,
        conn: Any,
        units: list[Unit],
        qvec: Vectors | None,
        k: int,
        *,
        size: int,
        scope: tuple[str, Sequence[Any]],
        where: str,
        params: Sequence[Any],
    ) -> Candidates:
        """Up to ``k`` candidates of each side among the rows ``where`` admits (a
        fragment on alias ``alias`` naming the scope key) in a scope of ``size`` rows;
        ``scope`` is the fragment naming the scope key alone and its parameters (the
        rows the document frequencies are counted over).

        ``conn`` is in a transaction (the HNSW search sets ``hnsw.ef_search`` locally).
        The cosines are every candidate's in a scope of at most ``exact_max`` rows, else
        those of the vector candidates (the caller adds the others': `cosine_sql`).
        """
        a, key = self.alias, self.key
        want_vector = qvec is not None and self.space.dimension is not None and k > 0
        if size <= self.exact_max and (units or want_vector):
            return self._one_pass(conn, units, qvec if want_vector else None, k, size=size,
                                  scope=scope, where=where, params=params)  # fmt: skip
        lexical: dict[int, float | None] = {}
        idfs: list[float] = []
        if units:
            dfs = self.dfs(conn, units, scope=scope[0], params=scope[1])
            idfs = [idf(d, size) for d in dfs]
            q, q_params = any_tsquery(units)
            rows = conn.execute(
                f"WITH q AS (SELECT {q} AS q) SELECT {a}.{key}, ts_rank({a}.tsv, q.q) AS r "
                f"FROM {self.table} {a}, q WHERE {a}.tsv @@ q.q AND {where} "
                f"ORDER BY r DESC, {a}.{key} DESC LIMIT %s",
                [*q_params, *params, k],
                prepare=False,  # a generic plan cannot see the tsquery: 6x slower, measured
            ).fetchall()
            lexical = {int(r[0]): float(r[1]) for r in rows}
        vector: list[tuple[int, float]] = []
        if want_vector:
            assert qvec is not None
            vector = self._nearest(conn, qvec, k, size=size, where=where, params=params)
        return Candidates(units, idfs, lexical, vector, dict(vector))

    def _one_pass(
        self,
        conn: Any,
        units: list[Unit],
        qvec: Vectors | None,
        k: int,
        *,
        size: int,
        scope: tuple[str, Sequence[Any]],
        where: str,
        params: Sequence[Any],
    ) -> Candidates:
        """`candidates` for a scope of at most ``exact_max`` rows, in one read of its rows.

        The document frequencies, the lexical candidates and the exact nearest
        vectors all need every row of the scope, and a row is wide (its vector:
        about 2 kB, two or three to a page), so reading the scope once rather than
        three times is most of the cost: 5,000 rows read three times took 16 ms.
        The scope's rows are read once through its btree into a narrow
        materialised table (id, a flag per unit, rank, distance), and its three
        answers come from that; the orders are those of the separate statements
        (rank then newest; distance then oldest), numbered in SQL.
        """
        a, key = self.alias, self.key
        tsq: list[str] = []  # the one-row table q: the OR of the units (q), each unit (u<i>)
        args: list[Any] = []
        inner = [f"{a}.{key} AS mid", f"({where}) AS ok"]
        outer = ["mid", "ok"]
        out: list[str] = []
        if units:
            # each row is matched once against the OR; a unit only on the rows it matched
            parts = [unit_tsquery(u) for u in units]
            q, q_params = any_tsquery(units)
            tsq.append(f"{q} AS q")
            args += q_params
            for i, (sql, p) in enumerate(parts):
                tsq.append(f"{sql} AS u{i}")
                args.append(p)
            inner += [f"{a}.tsv", f"{a}.tsv @@ q.q AS hit"]
            outer.append("CASE WHEN hit THEN ts_rank(tsv, q) END AS r")
            if len(parts) == 1:
                outer.append("hit")
                counts = "count(*) FILTER (WHERE hit)"
            else:
                outer += [f"hit AND tsv @@ u{i} AS h{i}" for i in range(len(parts))]
                counts = ", ".join(f"count(*) FILTER (WHERE h{i})" for i in range(len(parts)))
            # columns: side (0 counts, 1 lexical, 2 vector), id, position, rank, counts, cosine
            out.append(
                f"(SELECT 0, 0::bigint, 0::bigint, NULL::real, ARRAY[{counts}], NULL::float8 "
                "FROM s)"
            )
            cos = "1 - d" if qvec is not None else "NULL::float8"
            out.append(
                "(SELECT 1, mid, row_number() OVER (ORDER BY r DESC, mid DESC), r, NULL, c FROM "
                f"(SELECT mid, r, {cos} AS c FROM s WHERE ok AND r IS NOT NULL "
                "ORDER BY r DESC, mid DESC LIMIT %s) t)"
            )
        args += params
        if qvec is not None:
            inner.append(f"{a}.embedding::vector <=> %s::vector AS d")
            args.append(vector_literal(qvec))
            outer.append("d")
            out.append(
                "(SELECT 2, mid, row_number() OVER (ORDER BY d, mid), NULL, NULL, 1 - d FROM "
                "(SELECT mid, d FROM s WHERE ok AND d IS NOT NULL ORDER BY d, mid LIMIT %s) t)"
            )
        limits = [k] * (len(out) - (1 if units else 0))
        q_from = ", q" if tsq else ""
        rows = conn.execute(
            (f"WITH q AS (SELECT {', '.join(tsq)}), " if tsq else "WITH ")
            + f"s AS MATERIALIZED (SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} "
            f"FROM {self.table} {a}{q_from} WHERE {scope[0]} OFFSET 0) x{q_from}) "
            + " UNION ALL ".join(out),
            [*args, *scope[1], *limits],
            prepare=False,
        ).fetchall()
        rows.sort(key=lambda row: (row[0], row[2]))
        idfs = [idf(int(d), size) for d in rows[0][4]] if units else []
        lexical: dict[int, float | None] = {int(r[1]): float(r[3]) for r in rows if r[0] == 1}
        vector = [(int(r[1]), _finite(r[5])) for r in rows if r[0] == 2]
        cosines = dict(vector)
        for r in rows:  # a lexical candidate's cosine (none for a row without a vector)
            if r[0] == 1 and r[5] is not None:
                cosines.setdefault(int(r[1]), _finite(r[5]))
        return Candidates(units, idfs, lexical, vector, cosines)

    def nearest_sql(self, where: str, *, hnsw: bool) -> str:
        """The vector query (parameters: vector, ``where``'s, vector, k): through the HNSW
        index's expression, or exact (another expression, so the scope's btree is used)."""
        a, key = self.alias, self.key
        cast = self.space.cast if hnsw else "::vector"
        return (
            f"SELECT {a}.{key}, 1 - ({a}.embedding{cast} <=> %s{cast}) FROM {self.table} {a} "
            f"WHERE {a}.embedding IS NOT NULL AND {where} "
            f"ORDER BY {a}.embedding{cast} <=> %s{cast}"
            + ("" if hnsw else f", {a}.{key}")
            + " LIMIT %s"
        )

    def _nearest(
        self, conn: Any, qvec: Vectors, k: int, *, size: int, where: str, params: Sequence[Any]
    ) -> list[tuple[int, float]]:
        literal = vector_literal(qvec)
        if size > self.exact_max:
            conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(40, 4 * k))}")
            sql = self.nearest_sql(where, hnsw=True)
            rows = conn.execute(sql, [literal, *params, literal, k], prepare=False).fetchall()
            if len(rows) >= k:
                return [(int(i), _finite(c)) for i, c in rows]
        sql = self.nearest_sql(where, hnsw=False)
        rows = conn.execute(sql, [literal, *params, literal, k], prepare=False).fetchall()
        return [(int(i), _finite(c)) for i, c in rows]

    def cosine_sql(self, qvec: Vectors | None, *, size: int) -> tuple[str, list[Any]]:
        """A select-list column with each row's cosine to ``qvec`` (NULL without one, and
        for a scope of at most ``exact_max`` rows: `_one_pass` found every candidate's)."""
        if qvec is None or size <= self.exact_max:
            return "NULL::float8", []
        return f"1 - ({self.alias}.embedding <=> %s::vector)", [vector_literal(qvec)]


def _finite(value: Any) -> float:
    """A cosine from pgvector (NaN for a zero vector: no similarity)."""
    c = float(value) if value is not None else 0.0
    return c if c == c else 0.0


def add_cosines(cands: Candidates, rows: Sequence[Sequence[Any]]) -> None:
    """Record the cosines of fetched rows (their last column) in ``cands``."""
    for row in rows:
        if row[-1] is not None:
            cands.cosines.setdefault(int(row[0]), _finite(row[-1]))
