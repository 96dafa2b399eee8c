"""The PostgreSQL backend's full-text search of stored messages: BM25 over tsvectors.

Every message's segmented terms are indexed at append (``messages.tsv``;
``_text.py`` says what goes in and why CJK is segmented in the application), so
there is no index to catch up, and `optimize_index` has nothing to do but
``ANALYZE``. The GIN index (m007) holds ``tsv`` plus one lexeme naming the
message's conversation and role (`SCOPED`), so a term's matches in one
conversation come from the index, and a search costs what its terms' postings
do, not what the conversation holds: with the index on ``tsv`` alone the planner
read every message of the conversation (5,000 messages: 39 ms survey + 15 ms
ranking before, 4 + 1.4 ms after; the default build 97 -> 10.5 ms).

Ranking is BM25 with the conversation's own statistics, as FTS5 ranks on SQLite:
each query term (`unit_queries`, the units FTS5 gets) is weighted by its
inverse document frequency among the messages searched, ``ln(1 + (N - df +
0.5) / (df + 0.5))``, and a message scores the sum of the weights of the terms
it holds times BM25's length factor ``(k1 + 1) / (1 + k1 (1 - b + b dl / avgdl))``
(k1 1.2, b 0.75, a term counted once: conversational turns rarely repeat one).
``N`` and ``avgdl`` are kept on the conversation row (``text_docs``,
``text_len``; tool results apart, as their own FTS5 table on SQLite); ``df`` is
counted per search, over the rows searched, in the statement that reads them
(`_survey`) — which ``match_budget`` needs anyway (rarest terms first while
their matches add up to at most the budget; with a budget each count stops past
it, as on SQLite, so a common word costs budget + 1 rows, not its matches). Best first, ties to the newer
message. A search is two round trips: that one, and the ranking (with the
outlines around the hits, for `search_outlines`).
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Sequence, Sized
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError, InvalidMessageError
from ...model._messages import ROLES
from ...text._terms import focus
from .._records import MessageOutline, SearchHit
from ..sqlite import _rows
from ._history import OUTLINE_COLUMNS
from ._log import MSG_COLUMNS
from ._text import unit_queries

if TYPE_CHECKING:
    from ._backend import PostgresBackend

_K1, _B = 1.2, 0.75
_NOT_TOOL = ("system", "developer", "user", "assistant")
_LIST_AT_MOST = 4096  # known seqs sent to be left out (else only filtered here)
Q = "to_tsquery('contextwright.cw_text', %s)"
# The indexed value (m007, ``_schema_log.py``): a message's tsv and the lexeme
# "<cid> <role>", which no query term can be (it holds a space).
SCOPED = "contextwright.cw_scoped(m.cid, m.role, m.tsv)"
_SCOPE_SQL = "string_agg(quote_literal(c.cid::text || ' ' || r), ' | ')::tsquery"


def _check_query(query: object) -> str:
    if not isinstance(query, str):
        raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
    return query


def _check_roles(roles: object) -> list[str]:
    if (
        isinstance(roles, str)
        or not isinstance(roles, Sequence)
        or any(r not in ROLES for r in roles)
    ):
        raise ConfigError(f"roles must be a sequence of {', '.join(ROLES)}; got {roles!r}")
    return list(dict.fromkeys(roles))


async def _survey(
    conn: Any, tenant: str, conversation: str, units: list[str], upper: int,
    roles: Sequence[str], tool: bool, cap: int | None,
) -> tuple[int, int, tuple[int, int], list[int]] | None:  # fmt: skip
    """(cid, bound, (N, total length), each unit's df): what ranking needs, in one statement.

    The conversation's row and, for each unit, how many of its messages of
    ``roles`` below ``bound`` match it: ``upper``, or its ``last_seq`` + 1 if
    lower (what later appends add is not searched). Each count goes through the
    scoped index (`SCOPED`) and stops at ``cap`` when given (a unit with more is
    left out by the budget anyway), so it reads at most that many rows. None if
    there is no such conversation. ``tool``: N and the length count the tool
    results too.
    """
    docs = (
        "c.text_docs + c.tool_docs, c.text_len + c.tool_len" if tool else "c.text_docs, c.text_len"
    )
    # One subquery run per unit (LATERAL over the units): the statement's text
    # does not depend on how many there are, and planning 20 subqueries took
    # longer than running them.
    cur = await conn.execute(
        f"SELECT c.cid, b.bound, {docs}, ARRAY(SELECT (SELECT count(*) FROM (SELECT 1 "
        f"FROM messages m WHERE {SCOPED} @@ (s.q && to_tsquery('contextwright.cw_text', u.t)) "
        "AND m.tsv IS NOT NULL AND m.seq < b.bound AND m.role = ANY(s.roles) LIMIT %s) x) "
        "FROM unnest(%s::text[]) WITH ORDINALITY u(t, i) ORDER BY u.i) "
        "FROM conversations c CROSS JOIN LATERAL (SELECT least(%s, c.last_seq + 1) AS bound) b "
        f"CROSS JOIN LATERAL (SELECT {_SCOPE_SQL} AS q, array_agg(r) AS roles "
        "FROM unnest(%s::text[]) r) s WHERE c.tenant = %s AND c.id = %s",
        (cap, units, upper, list(roles), tenant, conversation),
    )
    row = await cur.fetchone()
    if row is None:
        return None
    cid, bound, docs_n, length, dfs = row
    return cid, bound, (docs_n, length), [int(df) for df in dfs]


def scope(cid: int, roles: Sequence[str]) -> str:
    """The tsquery text matching the scope lexemes of conversation ``cid``'s messages of ``roles``."""
    return " | ".join(f"'{int(cid)} {r}'" for r in roles)


def _ranking(
    cid: int, units: list[str], dfs: list[int], upper: int, roles: Sequence[str], limit: int,
    budget: int | None, stats: tuple[int, int], columns: str = "m.seq",
) -> tuple[str, list[Any]] | None:  # fmt: skip
    """The SELECT of ``columns`` and the score, best first, and its parameters (module docstring).

    None when no unit is kept: nothing would match.
    """
    kept = list(range(len(units)))
    if budget is not None:  # rarest first, then the query's order
        kept, spent = [], 0
        for df, i in sorted((df, i) for i, df in enumerate(dfs)):
            if spent + df > budget:
                break
            spent += df
            kept.append(i)
        kept.sort()
    kept = [i for i in kept if dfs[i] > 0]
    if not kept:
        return None
    docs, length = stats
    n = max(docs, max(dfs[i] for i in kept))
    avgdl = (length / docs) if docs else 1.0
    weights = [math.log(1 + (n - dfs[i] + 0.5) / (dfs[i] + 0.5)) for i in kept]
    chosen = [units[i] for i in kept]
    terms = " + ".join(f"CASE WHEN m.tsv @@ {Q} THEN %s::float8 ELSE 0 END" for _ in kept)
    norm = f"{_K1 + 1} / (1 + {_K1} * ({1 - _B} + {_B} * m.dl / %s::float8))"
    any_kept = " || ".join([Q] * len(kept))
    params: list[Any] = []
    for u, w in zip(chosen, weights, strict=True):
        params += (u, w)
    sql = (
        f"SELECT {columns}, ({terms}) * {norm} AS score FROM messages m "
        f"WHERE {SCOPED} @@ (%s::tsquery && ({any_kept})) AND m.tsv IS NOT NULL "
        "AND m.seq < %s AND m.role = ANY(%s) ORDER BY score DESC, m.seq DESC LIMIT %s"
    )
    where = [scope(cid, roles), *chosen, upper, list(roles)]
    return sql, [*params, max(avgdl, 1e-9), *where, limit]


async def _search(
    self: PostgresBackend, conversation: str, query: str, tenant: str, limit: int,
    before_seq: int | None, roles: Sequence[str], columns: str,
) -> list[tuple[Any, ...]]:  # fmt: skip
    n = _rows.count(limit, "limit")
    wanted = _check_roles(roles)
    _check_query(query)
    units = unit_queries(focus(query)) or unit_queries(query)
    upper = _rows.MAX_SEQ if before_seq is None else _rows.count(before_seq, "before_seq")
    if not units or n == 0 or not wanted:
        return []
    async with self.connection(tenant) as conn:
        tool = "tool" in wanted
        found = await _survey(conn, tenant, conversation, units, upper, wanted, tool, None)
        if found is None:
            return []
        cid, upper, stats, dfs = found
        ranking = _ranking(cid, units, dfs, upper, wanted, n, None, stats, columns)
        if ranking is None:
            return []
        cur = await conn.execute(*ranking)
        return list(await cur.fetchall())


async def search(
    self: PostgresBackend,
    conversation: str,
    query: str,
    *,
    tenant: str,
    limit: int = 10,
    before_seq: int | None = None,
    roles: Sequence[str] = ("user", "assistant"),
) -> list[SearchHit]:
    rows = await _search(self, conversation, query, tenant, limit, before_seq, roles, MSG_COLUMNS)
    return [SearchHit(_rows.message(r[:-1]), float(r[-1])) for r in rows]


async def search_seqs(
    self: PostgresBackend,
    conversation: str,
    query: str,
    *,
    tenant: str,
    limit: int = 10,
    before_seq: int | None = None,
    roles: Sequence[str] | None = ("user", "assistant"),
) -> list[tuple[int, float]]:
    wanted = _NOT_TOOL if roles is None else roles
    rows = await _search(self, conversation, query, tenant, limit, before_seq, wanted, "m.seq")
    return [(int(r[0]), float(r[1])) for r in rows]


async def search_outlines(
    self: PostgresBackend,
    conversation: str,
    query: str,
    *,
    tenant: str,
    limit: int = 10,
    before_seq: int | None = None,
    match_budget: int | None = None,
    around: int = 0,
    known: Container[int] = (),
) -> tuple[list[tuple[int, float]], list[MessageOutline]]:
    """As ``sqlite/_search.search_outlines``: hits, and the outlines around them, in one call."""
    n = _rows.count(limit, "limit")
    reach = _rows.count(around, "around")
    budget = None if match_budget is None else _rows.count(match_budget, "match_budget")
    _check_query(query)
    if isinstance(known, str) or not isinstance(known, Container):
        raise InvalidMessageError("known", f"must hold sequence numbers, got {known!r}")
    upper = _rows.MAX_SEQ if before_seq is None else _rows.count(before_seq, "before_seq")
    units = unit_queries(query)
    if not units or n == 0 or upper == 0:
        return [], []
    skip = _listed(known)
    async with self.connection(tenant) as conn:
        cap = None if budget is None else budget + 1
        found = await _survey(conn, tenant, conversation, units, upper, _NOT_TOOL, False, cap)
        if found is None:
            return [], []
        cid, upper, stats, dfs = found
        ranking = _ranking(cid, units, dfs, upper, _NOT_TOOL, n, budget, stats)
        if ranking is None:
            return [], []
        sql, params = ranking
        # The hits, and the outlines within ``reach`` of them (up to the last seq
        # searched, but those ``skip`` names), as rows of one statement: a hit's
        # row has its score first, an outline's NULL.
        cur = await conn.execute(
            f"WITH hits AS ({sql}), near AS (SELECT DISTINCT s.seq FROM hits, "
            "generate_series(greatest(1, hits.seq - %s), least(%s, hits.seq + %s)) AS s(seq) "
            "WHERE s.seq <> ALL(%s::bigint[])) "
            "SELECT score, seq, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM hits UNION ALL "
            f"SELECT NULL, {OUTLINE_COLUMNS} FROM messages m "
            "WHERE m.cid = %s AND m.seq = ANY(ARRAY(SELECT seq FROM near))",
            (*params, reach, upper - 1, reach, skip, cid),
        )
        rows = await cur.fetchall()
    hits = sorted(((int(r[1]), float(r[0])) for r in rows if r[0] is not None), key=_best_first)
    near = sorted((r[1:] for r in rows if r[0] is None), key=_first)
    if known:
        near = [r for r in near if r[0] not in known]
    return hits, [_rows.outline(r) for r in near]


def _best_first(hit: tuple[int, float]) -> tuple[float, int]:
    return -hit[1], -hit[0]


def _first(row: Sequence[Any]) -> Any:
    return row[0]


def _listed(known: Container[int]) -> list[int]:
    """The seqs in ``known`` for the server to leave out, if it lists them cheaply, else none.

    (The caller's container may change on another thread meanwhile: what it
    holds is filtered again after reading.)
    """
    if not isinstance(known, Sized) or not isinstance(known, Iterable):
        return []
    try:
        if not 0 < len(known) <= _LIST_AT_MOST:
            return []
        return [s for s in known if type(s) is int and 0 < s <= _rows.MAX_SEQ]
    except RuntimeError:  # changed size during iteration
        return []


async def speaker_names(
    self: PostgresBackend,
    conversation: str,
    *,
    tenant: str,
    after_seq: int = 0,
    upto_seq: int | None = None,
) -> list[str]:
    after = _rows.count(after_seq, "after_seq")
    upto = _rows.MAX_SEQ if upto_seq is None else _rows.count(upto_seq, "upto_seq")
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            "SELECT DISTINCT m.name FROM messages m JOIN conversations c ON c.cid = m.cid "
            "WHERE c.tenant = %s AND c.id = %s AND m.name IS NOT NULL "
            "AND m.role IN ('user', 'assistant') AND m.seq > %s AND m.seq <= %s ORDER BY m.name",
            (tenant, conversation, after, upto),
        )
        found = await cur.fetchall()
    return sorted(name for (name,) in found)


async def optimize_index(self: PostgresBackend) -> None:
    """Messages are indexed at append: only refresh the planner's statistics."""
    async with self.connection(_rows.EVERY_TENANT) as conn:
        await conn.execute("ANALYZE messages")
