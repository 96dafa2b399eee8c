"""The SQLite store's full-text search of stored messages, and the indexing it needs.

`SQLiteStore` methods written as functions of the store (assembled into the class
in ``_sqlite.py``): `search`, `search_seqs`, `optimize_search_index`, and how a
search first indexes what its conversation gained since the last one (`indexed`).
What the index holds and how a query becomes FTS5: ``_fts.py``.

- **Indexed when searched.** Appending does not write the full-text index: a
  search first indexes the messages its conversation gained since the last one
  (``conversations.fts_seq``, m005; `indexed`), in a write transaction of its
  own. Writing a message's FTS5 segment was about 40 % of appending it, while
  searches are rare (a build's recall searches once, below the window).
- Indexing moves no conversation's version: it changes no stored content.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Container, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError, InvalidMessageError
from ...model._messages import ROLES
from ...text._terms import focus as _focus
from .._records import MessageOutline, SearchHit
from . import _rows
from ._fts import (
    FTS_TABLES,
    SEQ_BITS,
    fts_range,
    fts_table,
    match_query,
    unit_expressions,
    write_index,
)
from ._fts import search_outlines as fts_search_outlines
from ._rows import MSG_COLUMNS

if TYPE_CHECKING:
    from ._store import SQLiteStore

__all__ = ["index_pending", "indexed", "optimize_search_index", "search", "search_seqs"]


# FTS5 keeps a transaction's new postings in a hash table and writes them out as a
# segment whenever it holds more than 'hashsize' bytes (1 MB by default), merging
# segments as they pile up. A 10,000-message import indexes 7.5 MB: at 16 MB it is
# written once, and its indexing took 0.15 s instead of 0.20 s. The setting is
# stored in the index's config table, so it is written once per file (by the first
# bulk append); it only bounds the memory a single large transaction may use.
_BULK_ROWS = 1000
_FTS_HASH_BYTES = 16 << 20


def _size_fts_hash(conn: sqlite3.Connection) -> None:
    for table in FTS_TABLES:
        row = conn.execute(f"SELECT v FROM {table}_config WHERE k = 'hashsize'").fetchone()
        if row is None or row[0] != _FTS_HASH_BYTES:
            with suppress(sqlite3.OperationalError):  # an SQLite without the option
                conn.execute(
                    f"INSERT INTO {table} ({table}, rank) VALUES ('hashsize', ?)",
                    (_FTS_HASH_BYTES,),
                )


def optimize_search_index(self: SQLiteStore) -> None:
    """Index every message not yet indexed, then merge the indexes' segments (FTS5 ``optimize``).

    Messages are indexed when their conversation is first searched (see
    `_indexed`); after a bulk import this does it ahead of time, in one
    transaction, and leaves one segment per index, so that the first search
    neither indexes nor walks many segments. It rewrites the whole index of
    every conversation in the file, holding the write lock.
    """
    with self._tx(True, _rows.EVERY_TENANT) as conn:
        behind = conn.execute("SELECT cid FROM conversations WHERE fts_seq < last_seq")
        for (cid,) in behind.fetchall():
            index_pending(conn, cid)
        for table in FTS_TABLES:
            conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")


def indexed(
    self: SQLiteStore, tenant: str, conversation: str, before_seq: int | None = None
) -> int | None:
    """The conversation's cid (None if the tenant has none such), its messages indexed.

    Appending does not index (m005): the messages stored since the last search
    are indexed here first, in one write transaction, which re-reads how far
    the index goes under the write lock (another process may have done it).
    With ``before_seq`` only the messages below it need to be in the index (a
    search below the recent window): the index is brought up to the newest
    message only once the window has moved past it, in one batch.
    """
    with self._tx(False, tenant) as conn:
        row = conn.execute(
            "SELECT cid, fts_seq, last_seq FROM conversations WHERE tenant = ? AND id = ?",
            (tenant, conversation),
        ).fetchone()
    if row is None:
        return None
    cid, done, last = row
    need = last if before_seq is None else min(last, before_seq - 1)
    if done < need:
        with self._tx(True, tenant) as conn:
            index_pending(conn, cid)
    return int(cid)


def speaker_names(
    self: SQLiteStore,
    conversation: str,
    *,
    tenant: str,
    after_seq: int = 0,
    upto_seq: int | None = None,
) -> list[str]:
    """The distinct names of the user and assistant messages with ``after_seq < seq <= upto_seq``, sorted.

    Recall reads a conversation's speakers from here (names in a question are a
    prior, not search words). The partial index ``messages_by_name`` (m007) is
    walked from one distinct name to the next (a few seeks per speaker), and each
    name is kept if it has a message in the range (one seek): asked as a
    ``DISTINCT`` over the range, SQLite read every message of the range instead
    (23 ms at 100,000 messages, for a conversation without names).
    """
    after = _rows.count(after_seq, "after_seq")
    upto = _rows.MAX_SEQ if upto_seq is None else _rows.count(upto_seq, "upto_seq")
    with self._tx(False, tenant) as conn:
        row = conn.execute(
            "SELECT cid FROM conversations WHERE tenant = ? AND id = ?", (tenant, conversation)
        ).fetchone()
        if row is None:
            return []
        found = conn.execute(_SPEAKERS, (row[0], after, upto)).fetchall()
    return [name for (name,) in found]


# The partial index's condition is repeated in every subquery, so that each can use it.
_SPEAKERS = """
    WITH RECURSIVE names(name) AS (
        SELECT (SELECT min(name) FROM messages WHERE cid = ?1
                AND name IS NOT NULL AND role IN ('user', 'assistant'))
        UNION ALL
        SELECT (SELECT min(m.name) FROM messages m WHERE m.cid = ?1 AND m.name > names.name
                AND m.name IS NOT NULL AND m.role IN ('user', 'assistant'))
        FROM names WHERE names.name IS NOT NULL
    )
    SELECT n.name FROM names n WHERE n.name IS NOT NULL AND EXISTS (
        SELECT 1 FROM messages m WHERE m.cid = ?1 AND m.name = n.name
        AND m.name IS NOT NULL AND m.role IN ('user', 'assistant') AND m.seq > ?2 AND m.seq <= ?3
    ) ORDER BY n.name
"""


def search_outlines(
    self: SQLiteStore,
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
    """The best ``limit`` messages for ``query`` as (seq, score), and the outlines around them.

    Searches the messages' index (user, assistant, system and developer
    messages; not tool results) below ``before_seq``, BM25, best first, ties
    to the newer message. The query's terms are taken as given (no stop
    words dropped). ``match_budget`` bounds the work: the terms are taken
    rarest first while the messages holding them add up to at most that many
    (BM25 scores every match; common words made a search grow with the
    conversation). The second list holds the outlines (`MessageOutline`, by
    seq) of every message within ``around`` sequence numbers of a hit, the
    hits included, below ``before_seq``: what a caller ranking neighbours
    needs, in the same snapshot, in one call. The outlines of the sequence
    numbers in ``known`` (a container the caller keeps: stored messages never
    change) are left out of that list, not read.
    """
    n = _rows.count(limit, "limit")
    reach = _rows.count(around, "around")
    budget = None if match_budget is None else _rows.count(match_budget, "match_budget")
    if not isinstance(query, str):
        raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
    if isinstance(known, str) or not isinstance(known, Container):
        raise InvalidMessageError("known", f"must hold sequence numbers, got {known!r}")
    upper = None if before_seq is None else _rows.count(before_seq, "before_seq")
    units = unit_expressions(query)
    if not units or n == 0 or upper == 0:
        return [], []
    while True:  # one read transaction, unless the index must catch up first
        with self._tx(False, tenant) as conn:
            row = conn.execute(
                "SELECT cid, fts_seq, last_seq FROM conversations WHERE tenant = ? AND id = ?",
                (tenant, conversation),
            ).fetchone()
            if row is None:
                return [], []
            cid, done, last = row
            if done >= (last if upper is None else min(last, upper - 1)):
                return fts_search_outlines(conn, cid, units, upper, n, budget, reach, known)
        with self._tx(True, tenant) as conn:
            index_pending(conn, cid)


def index_pending(conn: sqlite3.Connection, cid: int) -> None:
    """Index conversation ``cid``'s messages after its ``fts_seq`` (in the caller's write tx)."""
    done, last = conn.execute(
        "SELECT fts_seq, last_seq FROM conversations WHERE cid = ?", (cid,)
    ).fetchone()
    if done >= last:
        return
    if last - done >= _BULK_ROWS:
        _size_fts_hash(conn)
    cursor = conn.execute(
        f"SELECT {MSG_COLUMNS} FROM messages m WHERE m.cid = ? AND m.seq > ? ORDER BY m.seq",
        (cid, done),
    )
    while page := cursor.fetchmany(2000):
        write_index(conn, [(cid, _rows.message(row)) for row in page])
    conn.execute("UPDATE conversations SET fts_seq = ? WHERE cid = ?", (last, cid))


def search(
    self: SQLiteStore,
    conversation: str,
    query: str,
    *,
    tenant: str,
    limit: int = 10,
    before_seq: int | None = None,
    roles: Sequence[str] = ("user", "assistant"),
) -> list[SearchHit]:
    """Messages of this conversation matching ``query``, best first (BM25; see ``_fts.py``).

    English and CJK alike; the query is never parsed as FTS5 syntax. Only
    messages with ``seq < before_seq`` (if given) and a role in ``roles``.
    The first search after appends indexes the conversation's new messages
    (a write transaction; see `_indexed`), so it takes longer than the next.
    """
    rows = _search(self, conversation, query, tenant, limit, before_seq, roles, MSG_COLUMNS)
    return [SearchHit(_rows.message(r[:-1]), r[-1]) for r in rows]


def search_seqs(
    self: SQLiteStore,
    conversation: str,
    query: str,
    *,
    tenant: str,
    limit: int = 10,
    before_seq: int | None = None,
    roles: Sequence[str] | None = ("user", "assistant"),
) -> list[tuple[int, float]]:
    """`search`, as (seq, score) pairs: for callers that hold the text already.

    Recall keeps every turn in process; reading and decoding the matching
    messages was most of its search (1.5 ms of a one-word search at 10,000
    messages). ``roles=None`` searches the messages' index unfiltered (user,
    assistant, system and developer messages; not tool results) without
    reading the messages table at all, for a caller that knows which
    sequence numbers it wants: the role check was a third of a search.
    """
    if roles is None:
        return _search_index(self, conversation, query, tenant, limit, before_seq)
    rows = _search(self, conversation, query, tenant, limit, before_seq, roles, "m.seq")
    return [(r[0], r[1]) for r in rows]


def _search_index(
    self: SQLiteStore,
    conversation: str,
    query: str,
    tenant: str,
    limit: int,
    before_seq: int | None,
) -> list[tuple[int, float]]:
    """(seq, score) from the messages' full-text index alone, best first."""
    n = _rows.count(limit, "limit")
    expression = _expression(query)
    if expression is None or n == 0:
        return []
    upper = None if before_seq is None else _rows.count(before_seq, "before_seq")
    cid = indexed(self, tenant, conversation)
    if cid is None:
        return []
    with self._tx(False, tenant) as conn:
        lo, hi = fts_range(cid, upper)
        table = fts_table("user")
        got = conn.execute(
            f"SELECT rowid & {(1 << SEQ_BITS) - 1}, bm25({table}) AS rank FROM {table} "
            f"WHERE {table} MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rank, rowid DESC "
            "LIMIT ?",
            (expression, lo, hi, n),
        ).fetchall()
    return [(seq, -rank) for seq, rank in got]


def _expression(query: str) -> str | None:
    """The FTS5 expression of ``query`` (see `search`), None if it has no terms."""
    if not isinstance(query, str):
        raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
    # Function words match nearly every row and BM25 must score every match:
    # dropping them made search 3x faster on a 10,000-turn conversation.
    return match_query(_focus(query)) or match_query(query)


def _search(
    self: SQLiteStore,
    conversation: str,
    query: str,
    tenant: str,
    limit: int,
    before_seq: int | None,
    roles: Sequence[str],
    columns: str,
) -> list[tuple[Any, ...]]:
    """Rows of ``columns`` with their score last, best first (see `search`)."""
    n = _rows.count(limit, "limit")
    bad = [r for r in roles if r not in ROLES]
    if isinstance(roles, str) or bad:
        raise ConfigError(f"roles must be a sequence of {', '.join(ROLES)}; got {roles!r}")
    expression = _expression(query)
    if expression is None or n == 0 or not roles:
        return []
    upper = None if before_seq is None else _rows.count(before_seq, "before_seq")
    wanted = set(roles)
    tables = sorted({fts_table(r) for r in wanted})
    cid = indexed(self, tenant, conversation)
    if cid is None:
        return []
    with self._tx(False, tenant) as conn:
        lo, hi = fts_range(cid, upper)
        # Two steps: rank in the FTS index alone (FTS5 sorts by rank with a
        # bounded heap, reading no message rows), then fetch the few winners.
        # Joining first made SQLite carry every matching message's parts
        # through the sort: 25 ms at 10,000 messages, 235 ms at 100,000.
        # Roles are filtered after ranking (one index holds four roles), so
        # ask for more. With tool results asked for too, the two indexes'
        # BM25 scores are merged as they are (each index has its own
        # statistics: close enough to interleave, not an exact common scale).
        # Few rows are dropped by role when both user and assistant turns are
        # wanted (only system and developer messages share their index).
        sparse = {"user", "assistant"} <= wanted or wanted == {"tool"}
        pool = n + 20 if sparse else max(4 * n, n + 20)
        marks = ", ".join("?" * len(wanted))
        while True:
            ranked: list[tuple[int, float]] = []
            exhausted = True
            for table in tables:
                got = conn.execute(
                    f"SELECT rowid & {(1 << SEQ_BITS) - 1}, bm25({table}) AS rank FROM {table} "
                    f"WHERE {table} MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rank LIMIT ?",
                    (expression, lo, hi, pool),
                ).fetchall()
                ranked += got
                exhausted = exhausted and len(got) < pool
            score = dict(ranked)
            found = (
                conn.execute(
                    f"SELECT {columns}, m.seq FROM messages m WHERE m.cid = ? AND m.seq IN "
                    f"({', '.join('?' * len(score))}) AND m.role IN ({marks})",
                    (cid, *score, *wanted),
                ).fetchall()
                if score
                else []
            )
            # Roles are filtered after ranking: if that left too few, widen the pool.
            if len(found) >= n or exhausted:
                break
            pool *= 4
    # best first; among equal scores the newer message
    found.sort(key=lambda r: (score[r[-1]], -r[-1]))
    return [(*r[:-1], -score[r[-1]]) for r in found[:n]]
