"""What the full-text index holds for a message, its rows, and the searches run on it.

Chinese and Japanese are written without spaces, and FTS5's ``unicode61``
tokenizer makes a whole run of CJK characters one token, so "上海" would never
match "我在上海工作". There are two ways out (docs/design-notes.md, Search): the ``trigram``
tokenizer
(SQLite >= 3.34) or segmentation. We segment, the simplest way that needs no
dictionary (``text/_terms.py`` `segment`: CJK runs as overlapping bigrams, the rest
left to ``unicode61`` with the Porter stemmer), and a query is segmented the same
way (``text/_query.py``: `match_query`, `unit_expressions`).

Measured on the development machine (20,000 synthetic messages, half English,
half Chinese, contentless tables, SQLite 3.40): trigram indexed 45k msgs/s
into 8.2 MB and answered one English word in 7.5 ms, and it cannot answer a
2-character CJK term at all (that needs a LIKE scan, ~5 ms per 20k rows);
bigrams indexed 105k msgs/s into 2.4 MB and answered the English word in 3.9 ms,
"上海" in 0.2 ms and "上海工作" in 0.1 ms. Trigram's substring matching would
also make "cat" find "concatenate" and rank by trigram statistics, not words.

A search stays inside its conversation as the file grows: over 200,000 messages
in 200 conversations, a two-word English query took 30 ms filtered by a join
and 6 ms intersected with a per-conversation token; the rowid range of
`fts_rowid` replaced that token (it made BM25 walk the conversation's whole
doclist). Tool results are indexed apart (`fts_table`).

Hangul is space-separated and stays with ``unicode61``; Thai and other scripts
without spaces are indexed as whole runs (a known limit).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Container, Iterable
from typing import Any

from ...model._messages import Message
from ...model._parts import ToolCallPart
from ...text._query import any_of, match_query, unit_expressions
from ...text._query import message_units as query_units
from ...text._terms import segment
from .._records import MessageOutline
from . import _rows

__all__ = [
    "FTS_TABLES",
    "SEQ_BITS",
    "any_of",
    "fts_entries",
    "fts_range",
    "fts_rowid",
    "fts_table",
    "index_text",
    "match_query",
    "query_units",
    "segment",
    "unindex",
    "unit_expressions",
    "write_index",
]  # fmt: skip

SEQ_BITS = 32  # a conversation's messages: seq < 2**32


def fts_rowid(cid: int, seq: int) -> int:
    """The index rowid of message ``seq`` of conversation ``cid``: its conversation in the high bits.

    A conversation's rows are then one rowid range, which FTS5 applies while it
    walks its doclists (`fts_range`). A per-conversation token in the indexed text
    did the same job worse: BM25 computes every phrase's document frequency by
    walking its whole doclist, so that token's walk grew with the conversation
    (about 1 ms of a search at 10,000 messages, against 0.2 ms for the whole
    ranking with the range).
    """
    return (cid << SEQ_BITS) | seq


def fts_range(cid: int, before_seq: int | None = None) -> tuple[int, int]:
    """The first and last rowid of conversation ``cid``'s messages with ``seq < before_seq``."""
    top = (1 << SEQ_BITS) if before_seq is None else min(before_seq, 1 << SEQ_BITS)
    return cid << SEQ_BITS, (cid << SEQ_BITS) + max(0, top - 1)


def fts_table(role: str) -> str:
    """The index a message of ``role`` is in: tool results have their own.

    In an agent's thread tool results are most of the indexed text (JSON, logs)
    while searches are mostly for what was said; ranking the turns among them
    scored thousands of tool rows only to drop them by role.
    """
    return "tool_result_fts" if role == "tool" else "message_fts"


FTS_TABLES = ("message_fts", "tool_result_fts")


def fts_entries(
    messages: Iterable[tuple[int, int, str, str]],
) -> dict[str, list[tuple[int, str]]]:
    """Index rows of ``(cid, seq, role, body)`` by table, as ``(rowid, body)``; blank bodies are left out."""
    out: dict[str, list[tuple[int, str]]] = {t: [] for t in FTS_TABLES}
    for cid, seq, role, body in messages:
        if body and not body.isspace():  # (not strip(): it copied every body)
            out[fts_table(role)].append((fts_rowid(cid, seq), body))
    return out


def write_index(conn: sqlite3.Connection, messages: Iterable[tuple[int, Message]]) -> None:
    """Index ``(cid, message)`` pairs: each message's searchable text, segmented, in its table."""
    entries = fts_entries((cid, m.seq or 0, m.role, segment(index_text(m))) for cid, m in messages)
    for table, rows in entries.items():
        if rows:
            conn.executemany(f"INSERT INTO {table} (rowid, body) VALUES (?, ?)", rows)


def unindex(conn: sqlite3.Connection, messages: Iterable[tuple[int, Message]]) -> None:
    """Remove ``(cid, message)`` pairs indexed by `write_index` from the index.

    A contentless table forgets a row only by FTS5's ``'delete'`` command given
    the very text it indexed; stored messages never change, and that text is
    computed from them as `write_index` did.
    """
    entries = fts_entries((cid, m.seq or 0, m.role, segment(index_text(m))) for cid, m in messages)
    for table, rows in entries.items():
        if rows:
            conn.executemany(
                f"INSERT INTO {table} ({table}, rowid, body) VALUES ('delete', ?, ?)", rows
            )


def index_text(message: Message) -> str:
    """The searchable text of a message: its text, tool results, and tool calls' names and arguments."""
    text = message.text
    if message.role != "assistant":  # only assistant messages call tools
        return text
    calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
    if calls:
        text = "\n".join([text, *(f"{c.name} {c.arguments}" for c in calls)])
    return text


# -- searching a conversation's messages ------------------------------------------------------


def search_outlines(
    conn: sqlite3.Connection, cid: int, units: list[str], upper: int | None, limit: int,
    budget: int | None, around: int, known: Container[int] = (),
) -> tuple[list[tuple[int, float]], list[MessageOutline]]:  # fmt: skip
    """`SQLiteStore.search_outlines` inside its read transaction, the index complete below ``upper``.

    ``units`` are the query's terms as FTS5 expressions (`unit_expressions`);
    the outlines of the sequence numbers in ``known`` are not read.
    """
    table = fts_table("user")
    lo, hi = fts_range(cid, upper)
    if budget is not None:
        units = rare_units(conn, table, units, lo, hi, budget)
    expression = any_of(units)
    if expression is None:
        return [], []
    hits = [
        (seq, -rank)
        for seq, rank in conn.execute(
            f"SELECT rowid & {(1 << SEQ_BITS) - 1}, bm25({table}) AS rank FROM {table} "
            f"WHERE {table} MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rank, rowid DESC LIMIT ?",
            (expression, lo, hi, limit),
        )
    ]
    top = hi - lo  # the last seq searched
    wanted: set[int] = set()
    for seq, _ in hits:
        wanted.update(range(max(1, seq - around), min(top, seq + around) + 1))
    if known:
        wanted = {seq for seq in wanted if seq not in known}
    if not wanted:
        return hits, []
    rows = conn.execute(
        f"SELECT {_rows.OUTLINE_COLUMNS} FROM messages m WHERE m.cid = ? AND m.seq IN "
        "(SELECT value FROM json_each(?)) ORDER BY m.seq",
        (cid, json.dumps(sorted(wanted))),
    ).fetchall()
    return hits, [_rows.outline(r) for r in rows]


def rare_units(
    conn: sqlite3.Connection, table: str, units: list[str], lo: int, hi: int, budget: int
) -> list[str]:
    """The rarest of ``units`` (in rowids ``lo..hi``) while their matches add up to <= ``budget``.

    Each unit's matches are counted up to ``budget + 1`` (a unit with more is
    left out anyway), so counting costs at most that many postings a unit.
    Among equally rare units, the query's order.
    """
    # one statement for all the counts: each is a few postings, the statements' own
    # overhead was most of the time
    count = (
        f"(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? "
        "AND rowid BETWEEN ? AND ? LIMIT ?))"
    )
    params: list[Any] = []
    for unit in units:
        params += (f"body : {unit}", lo, hi, budget + 1)
    dfs = conn.execute("SELECT " + ", ".join([count] * len(units)), params).fetchone()
    counted = sorted((df, i) for i, df in enumerate(dfs))
    kept: list[int] = []
    spent = 0
    for df, i in counted:
        if spent + df > budget:
            break
        spent += df
        kept.append(i)
    return [units[i] for i in sorted(kept)]
