"""The store's full-text search as recall uses it: `SQLiteStore.search_outlines` and `speaker_names`.

Recall ranks a conversation's old turns from what the store's own index (FTS5)
returns, so these check that search through the public store API on a real
SQLite file: the scores are FTS5's BM25 for the query's terms (checked against a
BM25 computed by hand from the index's own statistics for one-word queries), a
``limit`` keeps the best, a ``match_budget`` keeps the rarest terms, CJK text is
found by character and by phrase, only messages below ``before_seq`` are found
(and only those need be indexed), and the outlines around each hit come back in
the same call.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import Message, TextPart
from contextwright._errors import InvalidMessageError
from contextwright.stores import SQLiteStore

T = "acme"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "s.db") as s:
        yield s


def add(store: SQLiteStore, texts: list[str], conv: str = "c", **kw: object) -> None:
    msgs = [
        Message.user(t, **kw) if i % 2 == 0 else Message.assistant(t, **kw)  # type: ignore[arg-type]
        for i, t in enumerate(texts)
    ]
    store.append(conv, msgs, tenant=T)


def search(store: SQLiteStore, query: str, conv: str = "c", **kw: object) -> dict[int, float]:
    hits, _ = store.search_outlines(conv, query, tenant=T, limit=kw.pop("limit", 100), **kw)  # type: ignore[arg-type]
    return dict(hits)


def test_a_one_word_score_is_bm25_over_the_conversations_turns(store: SQLiteStore) -> None:
    texts = ["kitten kitten cat", "a cat", "dog and kitten", "bird", "fish", "kittens"]
    add(store, texts)
    got = search(store, "kitten")
    assert got.keys() == {1, 3, 6}  # stemmed: "kittens" is "kitten"
    k1, b = 1.2, 0.75
    lengths = [len(t.split()) for t in texts]
    avg = sum(lengths) / len(lengths)
    idf = math.log((6 - 3 + 0.5) / (3 + 0.5))
    idf = idf if idf > 0 else 1e-6
    for seq, tf in ((1, 2), (3, 1), (6, 1)):
        want = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[seq - 1] / avg))
        assert math.isclose(got[seq], want, rel_tol=1e-9)


def test_limit_keeps_the_best_ties_to_the_newer(store: SQLiteStore) -> None:
    add(store, ["red apple", "red", "green apple", "red red apple", "blue", "red"])
    whole, _ = store.search_outlines("c", "red apple", tenant=T, limit=100)
    scores = [s for _, s in whole]
    assert scores == sorted(scores, reverse=True)
    for limit in range(len(whole) + 1):
        got, _ = store.search_outlines("c", "red apple", tenant=T, limit=limit)
        assert got == whole[:limit]
    # equal scores: the newer message first
    same = [seq for seq, s in whole if s == dict(whole)[6]]
    assert same == sorted(same, reverse=True)


def test_match_budget_keeps_the_rarest_terms(store: SQLiteStore) -> None:
    add(store, ["common word"] * 6 + ["rare common", "other rare", "scarce"])
    # "common" is in 7 messages, "rare" in 2, "scarce" in 1
    assert search(store, "common rare scarce", match_budget=3).keys() == {7, 8, 9}
    assert search(store, "common rare scarce", match_budget=2).keys() == {9}
    assert search(store, "common rare scarce", match_budget=0) == {}
    assert len(search(store, "common rare scarce", match_budget=10)) == 9
    assert search(store, "common rare scarce", match_budget=10) == search(
        store, "common rare scarce"
    )


def test_a_lone_cjk_character_finds_it_anywhere_in_a_run(store: SQLiteStore) -> None:
    add(store, ["海边的风", "我在上海工作", "上海", "海", "山里的水", "hello 海"])
    assert search(store, "海").keys() == {1, 2, 3, 4, 6}


def test_a_phrase_ranks_the_run_above_its_bigrams_apart(store: SQLiteStore) -> None:
    add(store, ["我在上海工作", "上海的朋友在工作", "今天天气很好", "我们去学校", "hello world"])
    got = search(store, "上海工作")
    assert got.keys() == {1, 2}
    assert got[1] > got[2]


def test_only_messages_before_the_window(store: SQLiteStore) -> None:
    add(store, ["kitten", "kitten cat", "上海工作", "kitten"])
    assert search(store, "kitten", before_seq=3).keys() == {1, 2}
    assert search(store, "kitten 上海", before_seq=1) == {}
    assert search(store, "kitten", limit=0) == {}
    assert search(store, "...") == {}  # no terms
    assert search(store, "kitten", conv="nobody") == {}


def test_the_outlines_around_each_hit_come_in_the_same_call(store: SQLiteStore) -> None:
    add(store, [f"turn {i} filler" for i in range(1, 21)])
    store.append("c", [Message.user("needle here")], tenant=T)  # seq 21
    add(store, ["after one", "after two", "after three"])  # 22..24
    hits, outlines = store.search_outlines("c", "needle", tenant=T, limit=5, around=2)
    assert [seq for seq, _ in hits] == [21]
    assert [o.seq for o in outlines] == [19, 20, 21, 22, 23]
    assert outlines[2].text == "needle here"
    # not past the window
    _, outlines = store.search_outlines("c", "needle", tenant=T, limit=5, around=2, before_seq=23)
    assert [o.seq for o in outlines] == [19, 20, 21, 22]


def test_a_search_below_the_window_indexes_in_batches(store: SQLiteStore) -> None:
    add(store, ["alpha"] * 4)
    assert search(store, "alpha").keys() == {1, 2, 3, 4}
    add(store, ["alpha"] * 4)  # 5..8, not yet indexed
    # below seq 5 the index is complete: nothing to write
    assert search(store, "alpha", before_seq=5).keys() == {1, 2, 3, 4}
    # a window past the index: everything stored is indexed, then found
    assert search(store, "alpha", before_seq=8).keys() == {1, 2, 3, 4, 5, 6, 7}
    assert search(store, "alpha").keys() == set(range(1, 9))


def test_the_tenant_is_part_of_every_search(store: SQLiteStore) -> None:
    add(store, ["secret plan"])
    assert store.search_outlines("c", "secret", tenant="other", limit=5) == ([], [])
    assert store.speaker_names("c", tenant="other") == []


def test_speaker_names_of_the_turns_in_a_range(store: SQLiteStore) -> None:
    store.append(
        "c",
        [
            Message.user("hi", name="Mel"),
            Message.assistant("hello", name="Caroline"),
            Message.user("x"),
            Message.user("again", name="Mel"),
            Message.assistant("bye", name="Dave"),
        ],
        tenant=T,
    )
    assert store.speaker_names("c", tenant=T) == ["Caroline", "Dave", "Mel"]
    assert store.speaker_names("c", tenant=T, after_seq=1, upto_seq=4) == ["Caroline", "Mel"]
    assert store.speaker_names("c", tenant=T, after_seq=5) == []


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant", "system"]),
            st.sampled_from([None, "Mel", "Caroline", "Dave", "Émile", "mel"]),
        ),
        max_size=30,
    ),
    st.integers(0, 32),
    st.integers(0, 32),
)
def test_speaker_names_are_the_distinct_names_of_the_range(
    tmp_path_factory: pytest.TempPathFactory,
    turns: list[tuple[str, str | None]],
    after: int,
    upto: int,
) -> None:
    with SQLiteStore(tmp_path_factory.mktemp("names") / "s.db") as store:
        store.append("other", [Message.user("x", name="Zed")], tenant=T)
        if turns:
            store.append(
                "c", [Message(role, (TextPart("x"),), name=name) for role, name in turns], tenant=T
            )  # type: ignore[arg-type]
        want = sorted({
            name for i, (role, name) in enumerate(turns, 1)
            if name and role != "system" and after < i <= upto
        })  # fmt: skip
        assert store.speaker_names("c", tenant=T, after_seq=after, upto_seq=upto) == want


def test_bad_arguments_are_typed_errors_naming_the_field(store: SQLiteStore) -> None:
    add(store, ["kitten"])
    with pytest.raises(InvalidMessageError, match="query"):
        store.search_outlines("c", 3, tenant=T)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="known"):
        store.search_outlines("c", "kitten", tenant=T, known=5)  # type: ignore[arg-type]
    for field, kw in (
        ("limit", {"limit": -1}),
        ("before_seq", {"before_seq": -2}),
        ("match_budget", {"match_budget": -1}),
        ("around", {"around": -1}),
    ):
        with pytest.raises(Exception, match=field):
            store.search_outlines("c", "kitten", tenant=T, **kw)  # type: ignore[arg-type]
