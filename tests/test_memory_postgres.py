"""What only the PostgreSQL memory and knowledge stores have to show: isolation as a
property on a shared database, the HNSW index in the plan, Chinese through tsvector,
selection by URL, concurrent writers of one key, and the schema it needs.

The behaviour the backends share is tested in test_memory.py / test_knowledge.py,
parametrized over both (``store_db``).
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextwright import ConfigError, SchemaError
from contextwright.knowledge import SQLiteKnowledgeStore, open_knowledge_store
from contextwright.memory import Scope, SQLiteMemoryStore, open_memory_store
from tests import pg
from tests.test_memory import SCOPES, ConceptEmbedder, check_isolation, op

pytest.importorskip("psycopg")

A = Scope("acme", "alice")


@pytest.fixture(scope="module")
def shared_url():
    """One database for the property's examples (each starts by forgetting every scope)."""
    url = pg.create_database("cwprop")
    yield url
    pg.drop_database(url)


@pytest.fixture(scope="module")
def pg_stores(shared_url):
    from contextwright.memory import PostgresMemoryStore

    lexical = PostgresMemoryStore(shared_url)
    hybrid = PostgresMemoryStore(shared_url, embedder=ConceptEmbedder(), exact_max=4)
    yield lexical, hybrid
    lexical.close()
    hybrid.close()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(op, min_size=1, max_size=30), st.booleans())
def test_no_memory_of_one_scope_is_ever_returned_for_another_on_postgres(
    pg_stores, ops, with_vectors
):
    s = pg_stores[1] if with_vectors else pg_stores[0]
    for scope in SCOPES:
        s.forget_scope(scope)
    check_isolation(s, ops)  # exact_max=4: scopes above 4 rows search through HNSW


def test_vector_search_uses_the_hnsw_index_and_agrees_with_exact(pg_url):
    from contextwright.memory import PostgresMemoryStore

    emb = ConceptEmbedder(dimension=32)
    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choice(vocab, 6)) for _ in range(2000)]
    with (
        PostgresMemoryStore(pg_url, embedder=emb, exact_max=100) as ann,
        PostgresMemoryStore(pg_url, embedder=emb, exact_max=10**9) as exact,
    ):
        ann.add_many(A, texts)
        ann.add_many(Scope("acme", "bob"), texts[:50])  # another scope in the same index
        with ann._pool.connection() as conn:
            conn.execute("ANALYZE memories")
            where = "m.sid = %s AND m.active AND m.superseded_by IS NULL"
            sid = conn.execute("SELECT sid FROM memory_scopes WHERE \"user\" = 'alice'").fetchone()
            q = "[" + ",".join(["0.1"] * 32) + "]"
            for hnsw in (True, False):
                plan = conn.execute(
                    "EXPLAIN " + ann._hybrid.nearest_sql(where, hnsw=hnsw), [q, sid[0], q, 10]
                ).fetchall()
                text = "\n".join(r[0] for r in plan)
                assert ("Index Scan using memories_hnsw" in text) is hnsw, text
        agree = 0
        for t in texts[:20]:
            a = [h.memory.content for h in ann.search_sync(A, t, limit=1)]
            b = [h.memory.content for h in exact.search_sync(A, t, limit=1)]
            agree += a == b
            assert all(h.memory.user == "alice" for h in ann.search_sync(A, t, limit=10))
        assert agree >= 19  # approximate, but the own text is found


def test_chinese_finds_chinese_through_tsvector(pg_url):
    with open_memory_store(pg_url) as s:
        s.add_many(A, ["我在上海工作", "喜欢喝绿茶", "住在北京", "I work in Shanghai"])
        assert [h.memory.content for h in s.search_sync(A, "上海")] == ["我在上海工作"]
        assert [h.memory.content for h in s.search_sync(A, "绿茶")] == ["喜欢喝绿茶"]
        assert s.search_sync(A, "他住在哪里")[0].memory.content == "住在北京"
        with s._pool.connection() as conn:  # the bigrams are what the index holds
            (tsv,) = conn.execute(
                "SELECT tsv::text FROM memories WHERE content = '喜欢喝绿茶'"
            ).fetchone()
        assert "'绿茶'" in tsv
        assert "'喝绿'" in tsv


def test_selection_by_url(tmp_path, pg_url):
    from contextwright.knowledge import PostgresKnowledgeStore
    from contextwright.memory import PostgresMemoryStore

    with open_memory_store(pg_url) as m, open_knowledge_store(pg_url, tenant="t") as k:
        assert isinstance(m, PostgresMemoryStore)
        assert isinstance(k, PostgresKnowledgeStore)
        assert "***" in repr(m) or "@" not in repr(m).split("//", 1)[-1].split("/", 1)[0]
    path = tmp_path / "m.db"
    for db in (str(path), path, f"sqlite:///{path}"):
        with open_memory_store(db) as m, open_knowledge_store(db) as k:
            assert isinstance(m, SQLiteMemoryStore)
            assert isinstance(k, SQLiteKnowledgeStore)
    with open_memory_store("sqlite:///:memory:") as m:
        assert isinstance(m, SQLiteMemoryStore)
    for bad in ("mysql://x/y", "sqlite:/rel.db", "", 42):
        with pytest.raises(ConfigError, match="db"):
            open_memory_store(bad)


def test_concurrent_writers_of_one_key_leave_one_live_memory(pg_url):
    """Two stores (two workers) adding the same key at once: the scope lock serialises them."""
    stores = [open_memory_store(pg_url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))

    def write(i: int) -> None:
        barrier.wait()
        for j in range(5):
            stores[i].add(A, f"lives in city {i}-{j}", key="city")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stores[0].count(A) == 1
    assert stores[0].count(A, include_superseded=True) == 20
    for s in stores:
        s.close()


def test_a_database_behind_is_refused_without_migrate(pg_url):
    from contextwright.memory import PostgresMemoryStore

    with pytest.raises(SchemaError, match="migrate"):
        PostgresMemoryStore(pg_url, migrate=False)
    with PostgresMemoryStore(pg_url) as s:  # migrates
        s.add(A, "x")
    with PostgresMemoryStore(pg_url, migrate=False) as s:
        assert s.count(A) == 1


def test_knowledge_isolation_between_tenants_on_one_database(pg_url):
    tenants = [f"t{uuid.uuid4().hex[:6]}" for _ in range(3)]
    stores = [open_knowledge_store(pg_url, tenant=t, embedder=ConceptEmbedder()) for t in tenants]
    for t, s in zip(tenants, stores, strict=True):
        s.ingest(f"# {t}\n\nsecret pricing of {t}: tea and kids", source="p.md")
    for t, s in zip(tenants, stores, strict=True):
        for other in tenants:
            hits = s.search_sync(f"pricing {other} tea", limit=10)
            assert hits
            assert all(t in h.passage.content for h in hits)
        s.close()


def test_a_writer_on_postgresql_queues_in_the_database_for_every_worker(pg_url):
    """Memory writes are durable jobs in PostgreSQL: what one writer leaves, another writes."""
    from contextwright import MemoryWriter, Message
    from contextwright.memory import RuleExtractor
    from contextwright.stores.postgres._jobs import PostgresJobs

    started, never = threading.Event(), threading.Event()

    class Stuck(RuleExtractor):
        async def extract(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            started.set()
            await asyncio.to_thread(never.wait, 30)
            raise RuntimeError("never set")

    first_store = open_memory_store(pg_url)
    first = MemoryWriter(first_store, Stuck(), lease=1.0)
    assert isinstance(first.jobs_queue, PostgresJobs)
    first.submit(A, [Message.user("My name is Ada and I live in Lisbon")])
    assert started.wait(30)  # the first writer holds the job ...
    first.close(0.0, drain=False, warn=False)  # ... and dies with it (its lease stays)
    never.set()
    # another worker (a new writer on the same database) takes it over after the lease
    second_store = open_memory_store(pg_url)
    second = MemoryWriter(second_store)
    assert second.wait_idle(30, all_jobs=True)
    second.close()
    assert any("Lisbon" in m.content for m in second_store.top_sync(A, 10))
    assert second.jobs_sync() == []
    for s in (first_store, second_store):
        s.close()
