"""PostgreSQL memory search costs what its scope costs (bench/bench_scale_pg.py, issue #20).

What the fix changed, each checked on a real PostgreSQL: a query's document
frequencies are counted among the scope's rows (so a search's ranking depends on
its scope alone, and on one scope it is SQLite's, which counts over its whole
table); the counted path of a small scope and the cached GIN path of a large one
agree; a small scope's lexical candidates come through its btree; the access
statistics a search writes are HOT updates (m006, fillfactor 70).
"""

from __future__ import annotations

import random

import psycopg

from contextwright.memory import Scope, SQLiteMemoryStore, open_memory_store
from tests.test_memory import Clock, ConceptEmbedder

A = Scope("acme", "alice")
B = Scope("acme", "bob")
NOW = 1_700_100_000.0  # searches at one instant: recency weighs alike
WORDS = [
    "tea", "coffee", "job", "nurse", "hospital", "car", "toyota", "kids", "daughter", "lyon",
    "paris", "berlin", "piano", "guitar", "runs", "swims", "reads", "novels", "cooks", "pasta",
    "allergic", "peanuts", "dog", "cat", "garden",
]  # fmt: skip
QUERIES = [
    "what does she drink", "where does alice work", "tea", "car toyota", "kids piano",
    "peanuts allergy", "garden dog", "paris job", "novels guitar", "hospital nurse lyon",
    "喜欢 喝茶", "茶",
]  # fmt: skip


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = [" ".join(rng.sample(WORDS, rng.randint(2, 6))) + f" note{seed}x{i}" for i in range(n)]
    return [*out, "她喜欢喝茶", "他每天喝咖啡"]


def _fill(store, scope: Scope, texts: list[str], clock: Clock) -> None:
    for i, t in enumerate(texts):
        clock.now += 60
        store.add(scope, t, importance=30 + i % 50)


def _ranked(store, scope: Scope) -> list[list[tuple[str, float]]]:
    return [
        [
            (h.memory.content, round(h.score, 5))
            for h in store.search_sync(scope, q, limit=8, now=NOW)
        ]
        for q in QUERIES
    ]


def test_one_scope_ranks_on_postgresql_as_on_sqlite(pg_url, tmp_path):
    texts = _texts(1, 60)
    got = []
    for db in (pg_url, tmp_path / "m.db"):
        clock = Clock()
        if db == pg_url:
            store = open_memory_store(db, embedder=ConceptEmbedder(), clock=clock)
        else:
            store = SQLiteMemoryStore(db, embedder=ConceptEmbedder(), clock=clock)
        with store:
            _fill(store, A, texts, clock)
            got.append(_ranked(store, A))
    assert got[0] == got[1]
    assert sum(map(len, got[0])) > 3 * len(QUERIES)  # the queries do find things


def test_a_scope_ranks_alike_whatever_other_scopes_hold(pg_url):
    clock = Clock()
    with open_memory_store(pg_url, embedder=ConceptEmbedder(), clock=clock) as store:
        _fill(store, A, _texts(2, 40), clock)
        before = _ranked(store, A)
        # another user's memories full of the queries' words: table-wide statistics
        # would change alice's scores (and tell her something about bob's memories)
        _fill(store, B, [" ".join(WORDS[:8])] * 30 + _texts(3, 60), clock)
        assert _ranked(store, A) == before


def test_a_large_scope_counts_through_the_index_and_agrees_with_the_counted_path(pg_url):
    clock = Clock()
    with open_memory_store(pg_url, embedder=ConceptEmbedder(), clock=clock) as store:
        _fill(store, A, _texts(4, 50), clock)
        _fill(store, B, _texts(5, 20), clock)
        counted = _ranked(store, A)
    with open_memory_store(pg_url, embedder=ConceptEmbedder(), clock=clock, exact_max=10) as s:
        assert _ranked(s, A) == counted  # GIN + HNSW path, document frequencies cached
        assert _ranked(s, A) == counted  # and from the cache
        assert len(s._hybrid._dfs) > 0


def test_small_scope_lexical_candidates_come_through_its_btree(pg_url):
    clock = Clock()
    with open_memory_store(pg_url, embedder=ConceptEmbedder(), clock=clock) as store:
        _fill(store, A, _texts(6, 30), clock)
        store.search_sync(A, "tea job", limit=3)
    with psycopg.connect(pg_url) as conn:
        conn.execute("SET search_path TO contextwright, public")
        conn.execute("SET enable_seqscan = off")  # a tiny table: the choice is GIN or btree
        (sid,) = conn.execute("SELECT sid FROM memory_scopes").fetchone()
        plan = conn.execute(
            "EXPLAIN WITH q AS (SELECT plainto_tsquery('english', 'tea') AS q) "
            "SELECT m.mid FROM (SELECT m.mid, m.tsv FROM memories m WHERE m.sid = %s "
            "AND m.active OFFSET 0) m, q WHERE m.tsv @@ q.q",
            (sid,),
        ).fetchall()
    text = "\n".join(r[0] for r in plan)
    assert "memories_tsv" not in text, text
    assert "memories_by" in text, text


def test_access_statistics_are_hot_updates(pg_url):
    clock = Clock()
    with open_memory_store(pg_url, embedder=ConceptEmbedder(), clock=clock) as store:
        _fill(store, A, _texts(7, 40), clock)
        with psycopg.connect(pg_url) as conn:
            conn.execute("SET search_path TO contextwright, public")
            (opts,) = conn.execute(
                "SELECT reloptions FROM pg_class WHERE relname = 'memories'"
            ).fetchone()
            assert "fillfactor=70" in opts
            pages = dict(conn.execute("SELECT mid, (ctid::text::point)[0] FROM memories"))
        hits = store.search_sync(A, "tea", limit=1)
        assert hits
        assert hits[0].memory.access_count == 1
        with psycopg.connect(pg_url) as conn:
            conn.execute("SET search_path TO contextwright, public")
            mid, page = conn.execute(
                "SELECT mid, (ctid::text::point)[0] FROM memories WHERE id = %s",
                (hits[0].memory.id,),
            ).fetchone()
        assert page == pages[mid]  # the new version stayed on its page: no index entry
