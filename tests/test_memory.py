"""SQLiteMemoryStore and PostgresMemoryStore: scoping, search in English and Chinese, weighting, supersession,
near duplicates, embeddings spaces, the vector cache, and tenant isolation as a property.

The behaviour tests run on both backends (``store_db``: a real SQLite file or a
fresh PostgreSQL database, opened by URL through `open_memory_store`); embeddings come from a small
deterministic "concept" embedder (synonyms share a dimension) so that vector search
is exercised without a model; the real model is tested in ``test_embed.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import sqlite3
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextwright import ConfigError, ContextEngine, InvalidMessageError, Memory, Message
from contextwright.memory import (
    MemoryStore,
    Scope,
    SearchWeights,
    SQLiteMemoryStore,
    VectorIndex,
    open_memory_store,
)
from contextwright.sources import UserMemorySource
from contextwright.stores import SQLiteStore
from tests.store_backends import is_postgres, store_db

__all__ = ["store_db"]  # the fixture, imported for pytest

A = Scope("acme", "alice")
B = Scope("acme", "bob")
DAY = 86_400.0

CONCEPTS = {
    "kid": 0, "kids": 0, "child": 0, "daughter": 0, "son": 0,
    "job": 1, "work": 1, "works": 1, "nurse": 1, "hospital": 1,
    "tea": 2, "coffee": 2, "drink": 2,
    "car": 3, "drives": 3, "toyota": 3,
}  # fmt: skip


class ConceptEmbedder:
    """Bag of concepts: synonyms share a dimension, other words hash into the rest."""

    def __init__(self, name: str = "concepts-v1", dimension: int = 64) -> None:
        self.name = name
        self.dimension = dimension
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in re.findall(r"\w+", text.lower()):
                d = CONCEPTS.get(w)
                if d is None:
                    d = 8 + int(hashlib.md5(w.encode()).hexdigest(), 16) % (self.dimension - 8)
                out[i, d] += 1.0
            if not out[i].any():
                out[i, -1] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(clock, store_db):
    with open_memory_store(store_db, clock=clock) as s:
        yield s


def contents(hits):
    return [h.memory.content for h in hits]


# -- records and validation -------------------------------------------------------------------


def test_memory_defaults_keep_the_old_positional_form():
    m = Memory("likes tea")
    assert (m.content, m.category, m.importance, m.id, m.key, m.active) == (
        "likes tea",
        "fact",
        50,
        "",
        None,
        True,
    )
    assert m.live
    assert m.scope is None
    assert m.superseded_by is None
    assert Memory("用户35岁", "fact", 90).importance == 90


def test_add_assigns_id_scope_and_times(store, clock):
    m = store.add(A, "Likes green tea", category="preference", importance=70,
                  source_message_ids=["msg_1", "msg_2"], meta={"confidence": 0.9})  # fmt: skip
    assert m.id.startswith("m_")
    assert len(m.id) == 34
    assert (m.tenant, m.user, m.namespace, m.scope) == ("acme", "alice", "", A)
    assert m.created_at == m.updated_at == clock.now
    assert store.get(A, m.id) == m
    got = store.get(A, m.id)
    assert got is not None
    assert got.meta == {"confidence": 0.9}
    assert got.source_message_ids == ("msg_1", "msg_2")
    assert store.get(B, m.id) is None  # another user's id is not found, not forbidden
    assert store.count(A) == 1
    assert store.count(B) == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"content": ""}, InvalidMessageError, "empty"),
        ({"content": "   "}, InvalidMessageError, "empty"),
        ({"content": 42}, InvalidMessageError, "string"),
        ({"importance": 101}, ConfigError, "0..100"),
        ({"importance": -1}, ConfigError, "0..100"),
        ({"importance": True}, ConfigError, "int"),
        ({"category": "Not A Name"}, ConfigError, "category"),
        ({"category": ""}, ConfigError, "category"),
        ({"key": ""}, ConfigError, "key"),
        ({"meta": {"x": object()}}, ConfigError, "JSON"),
        ({"source_message_ids": "msg_1"}, ConfigError, "source_message_ids"),
        ({"embedding": [1.0, 0.0]}, ConfigError, "embedder"),
    ],
)
def test_bad_input_is_refused_and_nothing_written(store, kwargs, error, match):
    args = {"content": "valid text", **kwargs}
    content = args.pop("content")
    with pytest.raises(error, match=match):
        store.add(A, content, **args)
    assert store.count(A, include_superseded=True) == 0


def test_scope_must_be_a_scope(store):
    with pytest.raises(ConfigError):
        store.add(("acme", "alice"), "x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Scope("", "u")
    # the reads check it first on both backends, even where the answer would be empty
    for query in ("x", "", "   "):
        with pytest.raises(ConfigError, match="scope"):
            store.search_sync(("acme", "alice"), query)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="scope"):
        store.find_similar(("acme", "alice"), "x", limit=0)  # type: ignore[arg-type]


# -- search -------------------------------------------------------------------------------------


def test_chinese_search_by_bigrams(store):
    store.add(A, "我在上海工作", importance=60)
    store.add(A, "上海的天气很好", importance=60)
    store.add(A, "喜欢喝绿茶", importance=60)
    assert contents(store.search_sync(A, "上海"))[:2] == ["我在上海工作", "上海的天气很好"] or set(
        contents(store.search_sync(A, "上海"))[:2]
    ) == {"我在上海工作", "上海的天气很好"}
    assert contents(store.search_sync(A, "在上海工作"))[0] == "我在上海工作"
    assert contents(store.search_sync(A, "他在哪里工作?"))[0] == "我在上海工作"
    assert contents(store.search_sync(A, "绿茶")) == ["喜欢喝绿茶"]
    assert store.search_sync(A, "北京") == []
    assert contents(store.search_sync(A, "海"))  # one character: a prefix over the bigrams


def test_english_search_and_ranking(store):
    store.add(A, "I work at Acme in Berlin")
    store.add(A, "Visited Berlin last summer")
    store.add(A, "Likes green tea")
    hits = store.search_sync(A, "Where does she work?")
    assert contents(hits)[0] == "I work at Acme in Berlin"
    ranked = contents(store.search_sync(A, "Does she work in Berlin?"))
    assert ranked[:2] == ["I work at Acme in Berlin", "Visited Berlin last summer"]
    assert store.search_sync(A, "the and of") == []  # nothing but stop words: nothing matches
    assert store.search_sync(A, "") == []
    assert store.search_sync(A, "x", limit=0) == []
    scores = [h.score for h in hits]
    assert all(0.0 < s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)


def test_search_terms_are_never_fts_syntax(store):
    store.add(A, 'He said "NEAR(" and OR AND NOT * ^ - :')
    for query in ['"', "NEAR(", "a OR", "*", "body : x", "scope : s1", "-", '""']:
        store.search_sync(A, query)  # no syntax error reaches the caller


def test_category_filter_and_min_score(store):
    store.add(A, "Likes green tea", category="preference")
    store.add(A, "Drinks tea with her boss at work", category="fact")
    assert contents(store.search_sync(A, "tea", categories=["preference"])) == ["Likes green tea"]
    assert len(store.search_sync(A, "tea", categories=["preference", "fact"])) == 2
    assert store.search_sync(A, "tea", categories=[]) == []
    partial = store.search_sync(A, "green tea at work")
    assert {h.memory.content for h in partial} == {
        "Likes green tea",
        "Drinks tea with her boss at work",
    }
    assert all(h.relevance is not None and h.relevance < 1.0 for h in partial)
    both = store.search_sync(A, "green tea")
    assert next(h.relevance for h in both) == pytest.approx(1.0)
    assert 0.0 < both[1].relevance < 0.9  # type: ignore[operator]
    assert contents(store.search_sync(A, "green tea", min_score=0.9)) == ["Likes green tea"]
    assert store.search_sync(A, "green tea at work", min_score=1.01) == []
    with pytest.raises(ConfigError):
        store.search_sync(A, "tea", categories="preference")  # type: ignore[arg-type]


def test_importance_and_recency_weigh_equal_matches(store, clock):
    old_important = store.add(A, "Plays tennis on Sundays", importance=90)
    clock.now += 30 * DAY
    store.add(A, "Plays tennis with her brother", importance=30)
    hits = store.search_sync(A, "tennis")
    # 0.98 (importance 90) × 0.9 (one half-life) = 0.882 beats 0.86 (importance 30) × 1.0
    assert hits[0].memory.id == old_important.id
    store.update_importance(A, old_important.id, 30)
    hits = store.search_sync(A, "tennis")
    assert hits[0].memory.content == "Plays tennis with her brother"  # now recency decides
    assert hits[0].relevance == pytest.approx(hits[1].relevance)
    # relevance still dominates: a full match of low importance beats a partial one of high
    store.add(A, "Tennis club membership expires in May", importance=100)
    assert (
        contents(store.search_sync(A, "tennis with her brother"))[0]
        == "Plays tennis with her brother"
    )


def test_weights_are_explained_by_the_formula(clock, store_db):
    w = SearchWeights(importance=0.2, recency=0.2, half_life_days=30)
    with open_memory_store(store_db, clock=clock, weights=w) as s:
        s.add(A, "Plays chess", importance=0)
        clock.now += 30 * DAY
        (hit,) = s.search_sync(A, "chess")
        assert hit.relevance == pytest.approx(1.0)
        assert hit.score == pytest.approx(
            1.0 * 0.8 * 0.9
        )  # importance 0 → 0.8; one half-life → 0.9
    with pytest.raises(ConfigError):
        SearchWeights(semantic=1.5)


def test_search_updates_access_statistics(store, clock):
    m = store.add(A, "Owns a red bicycle")
    clock.now += 5
    (hit,) = store.search_sync(A, "bicycle")
    assert (hit.memory.access_count, hit.memory.accessed_at) == (1, clock.now)
    store.search_sync(A, "bicycle")
    got = store.get(A, m.id)
    assert got is not None
    assert got.access_count == 2
    assert got.accessed_at == clock.now


def test_top_by_importance_then_recency(store, clock):
    store.add(A, "low", importance=10)
    store.add(A, "high", importance=90)
    clock.now += 1
    store.add(A, "high and newer", importance=90)
    store.add(A, "a preference", category="preference", importance=95)
    store.add(B, "someone else's", importance=100)
    assert [m.content for m in store.top_sync(A, 3)] == ["a preference", "high and newer", "high"]
    assert [m.content for m in store.top_sync(A, 5, categories=["fact"])] == [
        "high and newer",
        "high",
        "low",
    ]
    assert store.top_sync(A, 0) == []


# -- supersession and duplicates ------------------------------------------------------------------


def test_same_key_supersedes_in_one_write(store, clock):
    old = store.add(A, "Works at Acme", key="employer", importance=80)
    clock.now += 10
    new = store.add(A, "Works at Globex", key="employer", importance=80)
    was = store.get(A, old.id)
    assert was is not None
    assert (was.superseded_by, was.superseded_at) == (new.id, clock.now)
    assert not was.live
    assert new.live
    assert [m.content for m in store.history(A, key="employer")] == [
        "Works at Acme",
        "Works at Globex",
    ]
    assert contents(store.search_sync(A, "works")) == ["Works at Globex"]
    assert set(contents(store.search_sync(A, "works", include_superseded=True))) == {
        "Works at Acme", "Works at Globex",
    }  # fmt: skip
    assert [m.content for m in store.top_sync(A, 5)] == ["Works at Globex"]
    assert store.count(A) == 1
    assert store.count(A, include_superseded=True) == 2
    # another category or another scope with the same key is another fact
    store.add(A, "Wants to work at Initech", key="employer", category="intent")
    store.add(B, "Works at Hooli", key="employer")
    now = store.get(A, new.id)
    assert now is not None
    assert now.live
    assert store.history(A, category="intent")[0].live


def test_a_batch_may_supersede_its_own_items(clock, store_db):
    with open_memory_store(store_db, embedder=ConceptEmbedder(), clock=clock) as s:
        s.add(A, "Drives a Toyota", key="car")
        assert contents(s.search_sync(A, "car")) == ["Drives a Toyota"]  # the vectors are cached
        s.add_many(A, [
            {"content": "Drives a Ford", "key": "car"},
            {"content": "Drives a Tesla", "key": "car"},
        ])  # fmt: skip
        assert contents(s.search_sync(A, "car", limit=10)) == ["Drives a Tesla"]
        assert [m.content for m in s.history(A, key="car") if m.live] == ["Drives a Tesla"]


def test_supersede_explicitly(store):
    old = store.add(A, "Has one cat", category="fact", importance=60)
    new = store.supersede(A, old.id, "Has two cats")
    assert (new.category, new.importance, new.key) == ("fact", 60, None)
    was = store.get(A, old.id)
    assert was is not None
    assert was.superseded_by == new.id
    with pytest.raises(InvalidMessageError, match="already superseded"):
        store.supersede(A, old.id, "Has three cats")
    with pytest.raises(InvalidMessageError, match="no memory"):
        store.supersede(B, new.id, "not yours")
    keyed = store.add(A, "Age 35", key="age")
    newer = store.supersede(A, keyed.id, "Age 36", importance=70)
    assert newer.key == "age"
    assert newer.importance == 70
    assert [m.content for m in store.history(A, key="age")] == ["Age 35", "Age 36"]
    assert store.get(A, keyed.id).superseded_by == newer.id  # type: ignore[union-attr]


def test_find_similar_catches_near_duplicates_before_any_llm(store):
    tea = store.add(A, "Likes green tea in the morning", category="preference")
    store.add(A, "Lives in Berlin")
    exact = store.find_similar(A, "likes GREEN tea in the morning!")
    assert [h.memory.id for h in exact] == [tea.id]
    assert exact[0].score == 1.0
    near = store.find_similar(A, "Likes green tea in the mornings", threshold=0.7)
    assert near
    assert near[0].memory.id == tea.id
    assert 0.7 <= near[0].score < 1.0
    assert store.find_similar(A, "Likes green tea in the mornings", threshold=0.99) == []
    assert store.find_similar(A, "Owns a sailing boat") == []
    assert store.find_similar(A, "likes green tea in the morning", category="fact") == []
    assert store.find_similar(B, "likes green tea in the morning") == []
    zh = store.add(A, "我在上海工作")
    assert store.find_similar(A, "我在上海工作。")[0].memory.id == zh.id
    newer = store.supersede(A, tea.id, "Likes black tea")
    assert [
        h.memory.id for h in store.find_similar(A, "Likes green tea in the morning", threshold=0.5)
    ] != [tea.id]
    assert newer.live


def test_find_similar_uses_cosine_with_an_embedder(clock, store_db):
    with open_memory_store(store_db, embedder=ConceptEmbedder(), clock=clock) as s:
        m = s.add(A, "has a daughter")
        hits = s.find_similar(A, "has a kid", threshold=0.9)
        assert [h.memory.id for h in hits] == [m.id]  # characters differ, concepts do not


def test_forget_and_forget_scope(store, store_db):
    a = store.add(A, "Secret project Falcon")
    store.add(A, "Second secret about Falcon")
    b = store.add(B, "Bob's Falcon notes")
    assert store.forget(B, a.id) is False  # not B's: untouched
    assert store.forget(A, a.id) is True
    assert store.forget(A, a.id) is False
    assert store.get(A, a.id) is None
    assert contents(store.search_sync(A, "Falcon")) == ["Second secret about Falcon"]
    assert store.forget_scope(A) == 1
    assert store.search_sync(A, "Falcon") == []
    assert store.history(A) == []
    assert store.count(A) == 0
    assert [h.memory.id for h in store.search_sync(B, "Falcon")] == [b.id]
    # the index entries are gone too, not only the rows
    if is_postgres(store_db):
        with store._pool.connection() as pg:
            (n,) = pg.execute(
                "SELECT count(*) FROM memories WHERE tsv @@ plainto_tsquery('english', 'falcon')"
            ).fetchone()
        assert n == 1
        return
    conn = store.db._conn
    assert conn is not None
    (n,) = conn.execute(
        "SELECT count(*) FROM memory_fts WHERE memory_fts MATCH 'body : falcon'"
    ).fetchone()
    assert n == 1


def test_inactive_memories_are_never_searched(store):
    m = store.add(A, "Experience: ask before recommending", category="experience")
    assert store.set_active(A, m.id, False) is True
    assert store.search_sync(A, "recommending") == []
    assert store.top_sync(A, 5) == []
    assert store.history(A)[0].active is False
    assert store.set_active(B, m.id, True) is False
    store.set_active(A, m.id, True)
    assert contents(store.search_sync(A, "recommending")) == ["Experience: ask before recommending"]
    assert store.update_importance(B, m.id, 10) is None
    with pytest.raises(ConfigError):
        store.update_importance(A, m.id, 200)


# -- the file, the embedding space, the vector cache ----------------------------------------------


def test_same_file_as_the_conversations(tmp_path):
    db = tmp_path / "chat.db"
    with SQLiteStore(db) as conv:
        assert conv.applied_migrations[:2] == ["m001_initial", "m002_memory"]
        conv.append("c1", [Message.user("我今年35岁，在上海工作")], tenant="acme", user="alice")
        mem = SQLiteMemoryStore(conv)
        mem.add(A, "35 years old, works in Shanghai", key="age")
        mem.close()  # does not close the shared store
        assert conv.read("c1", tenant="acme")[0].text.startswith("我今年")
    with SQLiteStore(db) as conv, SQLiteMemoryStore(conv) as mem:
        assert conv.applied_migrations == []
        assert contents(mem.search_sync(A, "Shanghai")) == ["35 years old, works in Shanghai"]
        assert conv.search("c1", "上海", tenant="acme")


def test_a_different_embedder_is_refused(store_db):
    db = store_db
    with open_memory_store(db, embedder=ConceptEmbedder()) as s:
        s.add(A, "has a daughter")
    with pytest.raises(ConfigError, match=r"concepts-v1 \(64 dimensions\).*concepts-v2"):
        open_memory_store(db, embedder=ConceptEmbedder("concepts-v2"))
    with pytest.raises(ConfigError, match="32 dimensions"):
        open_memory_store(db, embedder=ConceptEmbedder(dimension=32))
    with open_memory_store(db) as lexical:  # no embedder: lexical search still works
        assert contents(lexical.search_sync(A, "daughter")) == ["has a daughter"]
    with open_memory_store(db, embedder=ConceptEmbedder()) as same:
        assert contents(same.search_sync(A, "kid")) == ["has a daughter"]


def test_an_embedder_returning_the_wrong_shape_is_refused(clock, store_db):
    class Broken(ConceptEmbedder):
        def embed(self, texts):
            return np.ones((len(texts), 3), dtype=np.float32)

    with (
        open_memory_store(store_db, embedder=Broken(), clock=clock) as s,
        pytest.raises(ConfigError, match="shape"),
    ):
        s.add(A, "x")


def test_hybrid_search_finds_synonyms_and_keeps_lexical_hits(clock, store_db):
    emb = ConceptEmbedder()
    with open_memory_store(store_db, embedder=emb, clock=clock) as s:
        s.add_many(A, ["Has a daughter called Mia", "Drives a Toyota", "Zyxt code word"])
        s.add(B, "Bob has a son")
        assert contents(s.search_sync(A, "tell me about her kid"))[0] == "Has a daughter called Mia"
        assert contents(s.search_sync(A, "zyxt"))[0] == "Zyxt code word"  # lexical, no concept
        hit = s.search_sync(A, "daughter Mia")[0]
        assert hit.memory.embedding_model == "concepts-v1"
        # 0.6 × cosine 0.63 (2 of 5 concepts) + 0.4 × lexical 1.0
        assert hit.relevance == pytest.approx(0.6 * 2 / 10**0.5 + 0.4, abs=1e-4)
        assert "Bob has a son" not in contents(s.search_sync(A, "son", limit=10))
        # embedding the same text twice (find_similar, then add) costs one model call
        calls = emb.calls
        s.find_similar(A, "Walks the dog every day")
        s.add(A, "Walks the dog every day")
        assert emb.calls == calls + 1


def test_explicit_embeddings_and_reembed(clock, store_db):
    emb = ConceptEmbedder()
    with open_memory_store(store_db, embedder=emb, clock=clock) as s:
        vec = emb.embed(["likes coffee"])[0]
        s.add(A, "Prefers espresso", embedding=vec * 3)  # normalised by the store
        assert contents(s.search_sync(A, "coffee drink"))[0] == "Prefers espresso"
        with pytest.raises(ConfigError):
            s.add(A, "bad", embedding=np.ones(5))
    with open_memory_store(store_db, clock=clock) as plain:  # same database, no embedder
        plain.add(B, "Has a son")
        with open_memory_store(store_db, embedder=emb, clock=clock) as hybrid:
            assert hybrid.reembed(B) == 1
            assert hybrid.reembed(B) == 0
            assert contents(hybrid.search_sync(B, "kids"))[0] == "Has a son"


def test_vector_cache_follows_writes_of_this_and_other_stores(store_db, clock):
    db = store_db
    emb = ConceptEmbedder()
    one = open_memory_store(db, embedder=emb, clock=clock)
    two = open_memory_store(db, embedder=emb, clock=clock)
    first = one.add(A, "Has a daughter", key="children")
    assert contents(one.search_sync(A, "kid")) == ["Has a daughter"]  # the cache is loaded
    one.add(A, "Drives a Toyota")  # applied to the cache in place
    assert contents(one.search_sync(A, "car")) == ["Drives a Toyota"]
    two.add(A, "Has a daughter and a son", key="children")  # another writer: one's cache is stale
    assert contents(one.search_sync(A, "kid")) == ["Has a daughter and a son"]
    assert first.id not in [h.memory.id for h in one.search_sync(A, "kid", limit=10)]
    two.forget_scope(A)
    assert one.search_sync(A, "kid") == []
    one.close()
    two.close()


def test_vector_index_binary_prefilter_matches_exact_search():
    rng = np.random.default_rng(1)
    n, dim = 3000, 64
    m = rng.standard_normal((n, dim)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    exact = VectorIndex(dim, exact_max=10**9)
    approx = VectorIndex(dim, exact_max=0, pool=300)
    cats = ["a" if i % 3 else "b" for i in range(n)]
    for ix in (exact, approx):
        ix.append(list(range(1, n + 1)), m, cats)
        ix.set_superseded(7)
        ix.remove(8)
        ix.set_active(9, False)
    for target in (6, 7, 8, 9, 10, 11):
        q = m[target - 1] + 0.02 * rng.standard_normal(dim).astype(np.float32)
        q /= np.linalg.norm(q)
        got = approx.nearest(q, 5)
        assert got[0][0] == exact.nearest(q, 5)[0][0]
        assert {7, 8, 9}.isdisjoint(i for i, _ in got)
        assert got == sorted(got, key=lambda x: -x[1])
    assert cats[0] == "b"
    assert approx.nearest(m[0], 1, categories=["b"])[0][0] == 1
    assert approx.nearest(m[0], 1, categories=["a"])[0][0] != 1
    assert all(cats[i - 1] == "a" for i, _ in approx.nearest(m[0], 20, categories=["a"]))
    assert approx.nearest(m[6], 1, include_superseded=True)[0][0] == 7
    assert approx.cosines([1, 999_999], m[0]) == {1: pytest.approx(1.0, abs=1e-5)}
    with pytest.raises(ConfigError):
        approx.append([5], m[:1], ["a"])  # ids must grow


# -- async, and the event loop ----------------------------------------------------------------------


async def test_async_protocol_runs_off_the_event_loop(clock, store_db):
    """A search's embedding runs on a worker thread while the loop runs other tasks.

    The embedder waits, off the loop, until a task on the loop has run after it
    began: were it called on the loop's thread, that task could not run and the
    wait would end unset (after a minute; no wall-clock gap is measured).
    """
    began, ticked = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    class Blocking(ConceptEmbedder):
        armed = False

        def embed(self, texts):
            if self.armed:
                seen["thread"] = threading.get_ident()
                began.set()
                seen["loop ran meanwhile"] = ticked.wait(timeout=60)
            return super().embed(texts)

    embedder = Blocking()
    with open_memory_store(store_db, embedder=embedder, clock=clock) as s:
        s.add(A, "Has a daughter", importance=80)
        assert isinstance(s, MemoryStore)
        embedder.armed = True

        async def ticker() -> None:
            while not began.is_set():
                await asyncio.sleep(0.001)
            ticked.set()  # the loop runs this while the embedding is in progress

        tick = asyncio.create_task(ticker())
        hits, top = await asyncio.gather(s.search(A, "a new query about kids", 3), s.top(A, 5))
        await tick
        assert contents(hits) == ["Has a daughter"]
        assert [m.content for m in top] == ["Has a daughter"]
    assert seen["loop ran meanwhile"] is True
    assert seen["thread"] != threading.get_ident()


async def test_user_memory_source_reads_the_store(clock, store_db):
    with open_memory_store(store_db, clock=clock) as s:
        s.add(A, "用户35岁,本科学历", importance=90)
        s.add(A, "Likes green tea", category="preference", importance=40)
        s.add(B, "Bob's secret", importance=100)
        engine = ContextEngine(sources=[UserMemorySource(store=s)], budget=4000)
        built = await engine.build("Do you remember what tea I like?", tenant="acme", user="alice")
        text = "\n".join(m.text for m in built.messages)
        assert "用户35岁" in text
        assert "[PREFERENCE] Likes green tea" in text
        assert "Bob's secret" not in text


# -- isolation, as a property ------------------------------------------------------------------------

SCOPES = [Scope(t, u, ns) for t in ("t1", "t2") for u in ("u1", "u2") for ns in ("", "ns")]
WORDS = ["tea", "work", "kid", "car", "上海", "工作", "berlin", "hospital", "喜欢", "daughter"]


def marker(scope: Scope) -> str:
    return f"zz{scope.tenant}{scope.user}{scope.namespace or 'none'}"


def owner(content: str) -> str:
    found = re.search(r"zz\w+", content)
    assert found, content
    return found.group(0)


op = st.one_of(
    st.tuples(
        st.just("add"),
        st.integers(0, 7),
        st.sampled_from(WORDS),
        st.sampled_from([None, "k1", "k2"]),
    ),
    st.tuples(st.just("supersede"), st.integers(0, 7), st.sampled_from(WORDS), st.integers(0, 50)),
    st.tuples(st.just("search"), st.integers(0, 7), st.sampled_from(WORDS), st.integers(0, 7)),
    st.tuples(st.just("similar"), st.integers(0, 7), st.sampled_from(WORDS), st.integers(0, 7)),
    st.tuples(st.just("steal"), st.integers(0, 7), st.sampled_from(WORDS), st.integers(0, 50)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=40), st.booleans())
def test_no_memory_of_one_scope_is_ever_returned_for_another(ops, with_vectors):
    with SQLiteMemoryStore(":memory:", embedder=ConceptEmbedder() if with_vectors else None) as s:
        check_isolation(s, ops)


def check_isolation(s, ops) -> None:
    """Run ``ops`` on the empty store ``s``; every read returns its own scope's memories only."""
    ids: list[tuple[Scope, str]] = []

    def check(scope: Scope, memories: list[Memory]) -> None:
        for m in memories:
            assert m.scope == scope
            assert owner(m.content) == marker(scope)

    for kind, si, word, extra in ops:
        scope = SCOPES[si]
        if kind == "add":
            m = s.add(scope, f"{marker(scope)} {word}", key=extra)
            ids.append((scope, m.id))
        elif kind == "supersede" and ids:
            own = [i for sc, i in ids if sc == scope]
            if own:
                old = s.get(scope, own[extra % len(own)])
                if old is not None and old.live:
                    ids.append((scope, s.supersede(scope, old.id, f"{marker(scope)} {word} v2").id))
        elif kind in ("search", "similar"):
            other = SCOPES[extra]
            query = f"{word} {marker(other)}"  # ask for another scope's marker on purpose
            if kind == "search":
                hits = s.search_sync(scope, query, limit=10, include_superseded=True)
            else:
                hits = s.find_similar(scope, f"{marker(other)} {word}", threshold=0.0, limit=10)
            check(scope, [h.memory for h in hits])
        elif kind == "steal" and ids:
            victim, mid = ids[extra % len(ids)]
            if victim != scope:
                assert s.get(scope, mid) is None
                assert s.forget(scope, mid) is False
                assert s.set_active(scope, mid, False) is False
                assert s.update_importance(scope, mid, 1) is None
                with pytest.raises(InvalidMessageError):
                    s.supersede(scope, mid, f"{marker(scope)} stolen")
                assert s.get(victim, mid) is not None
        check(scope, s.top_sync(scope, 10))
        check(scope, s.history(scope))
    for scope in SCOPES:
        check(scope, s.history(scope))
        assert s.count(scope, include_superseded=True) == sum(1 for sc, _ in ids if sc == scope)


async def test_isolation_holds_in_the_rendered_prompt():
    with SQLiteMemoryStore(":memory:") as s:
        scopes = [Scope(t, u) for t in ("t1", "t2") for u in ("u1", "u2")]
        for sc in scopes:
            s.add_many(sc, [f"{marker(sc)} likes {w}" for w in ("tea", "上海", "work")])
        engine = ContextEngine(
            sources=[UserMemorySource(store=s, top_n=10, search_n=10)], budget=8000
        )
        for sc in scopes:
            for query in ("tea", "上海", *(marker(o) for o in scopes)):
                built = await engine.build(query, tenant=sc.tenant, user=sc.user)
                prompt = "\n".join(m.text for m in built.messages[:-1])  # all but the query itself
                assert marker(sc) in prompt
                for other in scopes:
                    if other != sc:
                        assert marker(other) not in prompt.replace(query, "")


def test_raw_sql_sees_scopes_stored_once():
    store = SQLiteMemoryStore(":memory:")
    store.add(A, "x")
    store.add(A, "y")
    conn = store.db._conn
    assert isinstance(conn, sqlite3.Connection)
    assert conn.execute("SELECT tenant, user, namespace, size FROM memory_scopes").fetchall() == [
        ("acme", "alice", "", 2)
    ]
    store.close()
