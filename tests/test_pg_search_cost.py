"""A budgeted search on PostgreSQL reads what its budget allows, not its conversation.

``search_outlines`` with ``match_budget`` must cost what it does on SQLite: the
terms are counted up to the budget through the scoped index (m007), and only
the kept terms' matches are ranked. Here every statement a search sends is run
again under ``EXPLAIN (ANALYZE, FORMAT JSON)`` and the rows it took from
``messages`` are added up: a word in every message of a long conversation, and a
rare word held by many messages of *another* conversation, must not show up in
that count. Then the messages found must be SQLite's, whatever the budget (the terms a
budget keeps depend on counts only; the scores differ by design: BM25's IDF is
FTS5's on SQLite, Lucene's ``ln(1 + …)`` here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contextwright import Message
from contextwright.stores import SQLiteBackend
from contextwright.stores.postgres import PostgresBackend

T, U = "acme", "ann"
LONG = 1500  # messages in the searched conversation


def _thread(n: int, rare_every: int, rare: str) -> list[Message]:
    return [
        Message.user(f"common words here {rare if i % rare_every == 0 else 'plain'} n{i % 97}")
        for i in range(1, n + 1)
    ]


def _rows_read(plan: Any) -> int:
    """Rows the plan's scans of ``messages`` produced or filtered out, over all loops."""
    total = 0
    if plan.get("Relation Name") == "messages":
        loops = plan.get("Actual Loops", 1)
        total += (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * loops
    for child in plan.get("Plans", []):
        total += _rows_read(child)
    return total


class Explaining:
    """A connection that first runs each statement under EXPLAIN ANALYZE and keeps the plans."""

    def __init__(self, conn: Any, plans: list[Any]) -> None:
        self.conn, self.plans = conn, plans

    async def execute(self, sql: str, params: Any = ()) -> Any:
        cur = await self.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (doc,) = await cur.fetchone()
        self.plans.append(doc if isinstance(doc, list) else json.loads(doc))
        return await self.conn.execute(sql, params)


async def _import(b: Any, conversation: str, messages: list[Message]) -> None:
    for i in range(0, len(messages), 500):
        await b.append(conversation, messages[i : i + 500], tenant=T, user=U)


def test_a_budgeted_search_reads_what_the_budget_allows(pg_url: str) -> None:
    async def main() -> None:
        b = PostgresBackend(pg_url)
        try:
            await _import(b, "c", _thread(LONG, 300, "zebra"))  # zebra: 5 messages
            await _import(b, "other", _thread(LONG, 1, "zebra"))  # zebra everywhere
            await b.optimize_index()
            plans: list[Any] = []
            plain = b.connection

            @contextlib.asynccontextmanager
            async def explaining(tenant: object) -> AsyncIterator[Any]:
                async with plain(tenant) as conn:
                    yield Explaining(conn, plans)

            b.connection = explaining  # type: ignore[method-assign]
            hits, outlines = await b.search_outlines(
                "c", "common zebra", tenant=T, limit=10, match_budget=50, around=1
            )
            assert sorted(seq for seq, _ in hits) == [300, 600, 900, 1200, 1500]
            assert [o.seq for o in outlines][:3] == [299, 300, 301]
            assert len(plans) == 2  # two statements, as before
            read = sum(_rows_read(p[0]["Plan"]) for p in plans)
            # common: counted up to 51; zebra: 5 counted, 5 ranked, ~15 outlines
            assert read <= 51 + 5 + 5 + 15 + 10, read
            # without a budget every match of "common" is counted (and ranked)
            plans.clear()
            await b.search_outlines("c", "common zebra", tenant=T, limit=10)
            assert sum(_rows_read(p[0]["Plan"]) for p in plans) >= 2 * LONG
        finally:
            await b.aclose()

    asyncio.run(main())


WORDS = ["alpha", "beta", "gamma", "delta", "omega", "zeta", "kappa", "sigma"]


@pytest.mark.parametrize("budget", [None, 0, 3, 10, 40, 1000])
def test_budgeted_hits_are_sqlites(pg_url: str, tmp_path: Path, budget: int | None) -> None:
    import random

    rng = random.Random(budget or 7)
    weights = [60, 30, 15, 8, 4, 2, 1, 1]  # some words in most messages, some in few
    texts = [
        " ".join(dict.fromkeys(rng.choices(WORDS, weights, k=rng.randint(1, 4))))
        for _ in range(120)
    ]
    messages = [Message.user(t) if i % 2 else Message.assistant(t) for i, t in enumerate(texts)]
    queries = ["alpha omega", "sigma kappa zeta", "beta", "delta gamma alpha beta", "nothing"]

    async def run(b: Any) -> list[Any]:
        try:
            await b.append("c", messages, tenant=T, user=U)
            found = []
            for q in queries:
                for before in (None, 60):
                    hits, _ = await b.search_outlines(
                        "c", q, tenant=T, limit=500, before_seq=before, match_budget=budget
                    )
                    found.append(sorted(seq for seq, _ in hits))
            return found
        finally:
            await b.aclose()

    on_pg = asyncio.run(run(PostgresBackend(pg_url)))
    on_sqlite = asyncio.run(run(SQLiteBackend(tmp_path / "s.db")))
    assert on_pg == on_sqlite
    assert any(on_pg) or budget == 0
