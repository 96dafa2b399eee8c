"""The scale generator (bench/make_scale_pg.py) writes what the public API would write.

The generator loads by COPY, around the store's code paths, so a schema change
could leave it writing rows the store would never write (a search column in
another format, a missing index, a wrong count) while the benchmark happily
measures them. Here the same data, at a small size, goes once through the
generator and once through the public API into another database, and the two
must hold the same rows (ids and timestamps aside), the same indexes, and answer
searches alike.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import make_scale_pg as gen  # noqa: E402
from _scale_embed import ScaleEmbedder  # noqa: E402
from contextwright import Message  # noqa: E402
from contextwright.memory import PostgresMemoryStore  # noqa: E402
from tests import pg  # noqa: E402

USERS, PER_SCOPE = 3, 40

MEMORY_ROWS = """
SELECT s.tenant, s."user", s.namespace, m.category, m.key, m.importance, m.active,
       m.superseded_by, m.embedding_model, m.fingerprint, m.source_ids,
       m.meta, m.content, m.tsv::text, m.embedding::text
FROM contextwright.memories m JOIN contextwright.memory_scopes s ON s.sid = m.sid
ORDER BY s."user", m.content
"""


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def _indexes(url: str, table: str) -> list[str]:
    rows = _rows(
        url,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'contextwright' "
        f"AND tablename = '{table}' ORDER BY indexname",
    )
    return [r[0] for r in rows]


@pytest.fixture(scope="module")
def both() -> Any:
    """(generated URL, API URL): the same memories, by COPY and through `add_many`."""
    made, added = pg.create_database("scalegen"), pg.create_database("scaleapi")
    gen.make(made, conversations=0, messages=0, memories=USERS * PER_SCOPE,
             per_scope=PER_SCOPE, log=lambda _: None)  # fmt: skip
    store = PostgresMemoryStore(added, embedder=ScaleEmbedder())
    try:
        for k, items in enumerate(gen.memory_items(USERS, PER_SCOPE)):
            store.add_many(
                gen.memory_scope(k),
                [{x: v for x, v in i.items() if x != "created_at"} for i in items],
            )
    finally:
        store.close()
    yield made, added
    pg.drop_database(made)
    pg.drop_database(added)


def test_generated_memories_are_the_rows_add_writes(both: tuple[str, str]) -> None:
    made, added = both
    got, want = _rows(made, MEMORY_ROWS), _rows(added, MEMORY_ROWS)
    assert len(got) == USERS * PER_SCOPE
    assert got == want
    scopes = 'SELECT tenant, "user", namespace, size FROM contextwright.memory_scopes ORDER BY 2'
    assert _rows(made, scopes) == _rows(added, scopes)
    spaces = "SELECT kind, model, dimension FROM contextwright.embedding_spaces"
    assert _rows(made, spaces) == _rows(added, spaces) == [("memory", ScaleEmbedder().name, 384)]
    assert _indexes(made, "memories") == _indexes(added, "memories")
    assert any("hnsw" in d for d in _indexes(made, "memories"))
    ids = _rows(made, "SELECT id FROM contextwright.memories")
    assert all(len(i) == 34 and i.startswith("m_") for (i,) in ids)
    assert len({i for (i,) in ids}) == len(ids)


@pytest.mark.parametrize("exact_max", [8_192, 0], ids=["exact", "hnsw"])
def test_generated_memories_are_found_like_added_ones(
    both: tuple[str, str], exact_max: int
) -> None:
    made = both[0]
    items = gen.memory_items(USERS, PER_SCOPE)
    stores = [PostgresMemoryStore(u, embedder=ScaleEmbedder(), exact_max=exact_max) for u in both]
    try:
        for k in range(USERS):
            scope = gen.memory_scope(k)
            for item in items[k][:: PER_SCOPE // 4]:
                q = item["content"]
                hits = [s.search_sync(scope, q, limit=5) for s in stores]
                assert hits[0][0].memory.content == q, (made, q)
                assert [(h.memory.content, round(h.relevance, 6)) for h in hits[0]] == [
                    (h.memory.content, round(h.relevance, 6)) for h in hits[1]
                ]
            assert stores[0].count(scope) == PER_SCOPE
    finally:
        for s in stores:
            s.close()


# -- messages ----------------------------------------------------------------------------------

CONVS, PER_CONV = 3, 20

CONVERSATION_ROWS = """
SELECT tenant, id, owner, last_seq, message_count, user_count, token_total, metadata, version,
       text_docs, text_len, tool_docs, tool_len
FROM contextwright.conversations ORDER BY id
"""
MESSAGE_ROWS = """
SELECT c.id, m.seq, m.id, m.role, m.name, m.created_at, m.tokens, m.counter, m.size, m.metadata,
       m.parts, m.dl, m.tsv::text
FROM contextwright.messages m JOIN contextwright.conversations c ON c.cid = m.cid
ORDER BY c.id, m.seq
"""
WORKING_ROWS = """
SELECT c.id, w.key, w.expires_at - w.created_at, w.meta, w.content
FROM contextwright.working_memory w JOIN contextwright.conversations c ON c.cid = w.cid
ORDER BY c.id, w.key
"""


def _conversations(url: str, *, recall: bool = False) -> Any:
    """A `Conversations` on ``url`` with the scale bench's engine, its clock fixed."""
    from bench_history import make_engine
    from contextwright import Conversations
    from contextwright.stores.postgres import PostgresBackend

    return Conversations(
        make_engine(gen.T0, sources=False),
        PostgresBackend(url, clock=lambda: gen.T0).backend(),
        recall=recall,
        clock=lambda: gen.T0,
    )


@pytest.fixture(scope="module")
def threads() -> Any:
    """(generated URL, API URL): the same conversations, by COPY and by one append each."""
    pytest.importorskip("contextwright.stores.postgres._log")
    from _scale_threads import conversation

    made, added = pg.create_database("scalegen"), pg.create_database("scaleapi")
    gen.make(made, conversations=CONVS, messages=PER_CONV, memories=0, per_scope=1,
             log=lambda _: None)  # fmt: skip
    conv = _conversations(added)
    try:
        for k in range(CONVS):
            for m in conversation(k, PER_CONV):
                conv.append_sync(f"c{k}", [m.replace()], tenant=gen.TENANT,
                                 user=gen.conversation_owner(k))  # fmt: skip
        conv.wait_idle_sync(60)
    finally:
        conv.close()
    yield made, added
    pg.drop_database(made)
    pg.drop_database(added)


def test_generated_conversations_are_the_rows_append_writes(threads: tuple[str, str]) -> None:
    made, added = threads
    for sql in (CONVERSATION_ROWS, MESSAGE_ROWS, WORKING_ROWS):
        got, want = _rows(made, sql), _rows(added, sql)
        assert got == want, sql
    assert len(_rows(made, MESSAGE_ROWS)) == CONVS * PER_CONV
    assert _rows(made, WORKING_ROWS), "the threads' tool results are compressed and offloaded"
    assert {r[1] for r in _rows(made, CONVERSATION_ROWS)} == {f"c{k}" for k in range(CONVS)}
    for table in ("conversations", "messages", "working_memory"):
        assert _indexes(made, table) == _indexes(added, table)


@pytest.mark.parametrize("recall", [False, True], ids=["history", "recall"])
def test_generated_conversations_build_like_appended_ones(
    threads: tuple[str, str], recall: bool
) -> None:
    out = []
    for url in threads:
        conv = _conversations(url, recall=recall)
        try:
            built = []
            for k in range(CONVS):
                b = conv.build_sync(f"c{k}", Message.user(f"what about order {k}?", id=f"q{k}{recall}", created_at=gen.T0 + 1e6),
                                    tenant=gen.TENANT, user=gen.conversation_owner(k))  # fmt: skip
                report = b.report.to_dict()
                report.pop("timings_ms")
                for block in report["blocks"]:
                    block.pop("fetch_ms", None)
                # the system prompt gets a new id and time in every build
                msgs = [{**m.to_dict(), "id": None, "created_at": None} if m.seq is None else m.to_dict()
                        for m in b.messages]  # fmt: skip
                built.append((msgs, report))
        finally:
            conv.close()
        out.append(built)
    for got, want in zip(*out, strict=True):
        assert got[0] == want[0]
        assert got[1] == want[1]
