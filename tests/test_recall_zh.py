"""Chinese recall: CJK query analysis, pseudo-relevance feedback in CJK bigrams, the recency prior.

The feedback query is searched by the store like any message: it must be a
valid search on every backend and find the turns whose bigrams it names. The
recency prior is a knob: at 0 it must leave the ranking exactly as it was.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import Message
from contextwright.history._query import QueryAnalysis, analyse, speaker_map
from contextwright.history._rank import RankWeights, TurnIndex, TurnRanker
from contextwright.history._turns import FEEDBACK_WORD, feedback_terms
from contextwright.stores.postgres._text import unit_queries
from contextwright.text._query import message_units
from contextwright.text._terms import CJK_STOP_CHARS
from tests.conftest import OpenBackend

TURNS = [
    ("王芳", "跟你说,我上个月领养了一只橘色的猫,给它取名叫可乐。"),
    ("李明", "哈哈,真的吗?"),
    ("王芳", "可乐昨天把我的耳机线咬坏了,气死我了。"),
    ("李明", "我现在在南京一家医院当护士,每天通勤一个小时。"),
    ("王芳", "告诉你个消息,我辞职了,下个月搬去厦门,到那边做会计。"),
    ("李明", "最近天气变化好大,早上出门还得穿外套。"),
]


def _messages() -> list[Message]:
    out = []
    for i, (who, text) in enumerate(TURNS, 1):
        role = "user" if who == "王芳" else "assistant"
        out.append(Message(role, text, name=who, seq=i, created_at=1.7e9 + 60 * i))
    return out


def _index() -> TurnIndex:
    index = TurnIndex(locale="zh")
    index.add(_messages())
    return index


# -- feedback terms ------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_ascii_text_gives_the_latin_feedback_words_as_before(text):
    assert feedback_terms(text) == set(FEEDBACK_WORD.findall(text.lower()))


def test_cjk_feedback_terms_are_the_index_bigrams_without_function_characters():
    got = feedback_terms("可乐昨天把我的耳机线咬坏了 kickboxing")
    assert {"可乐", "昨天", "耳机", "机线", "咬坏", "kickboxing"} <= got
    assert not any(c in CJK_STOP_CHARS for term in got for c in term)  # "我的", "坏了" gone
    assert all(len(t) == 2 for t in got - {"kickboxing"})


def test_cjk_feedback_query_leaves_out_the_asked_and_the_speakers_names():
    index = _index()
    a = analyse("王芳的猫叫什么名字?", index.speakers)
    ranked = [(0, 0.1)]
    query = TurnRanker(RankWeights(feedback_docs=1)).feedback_query(index, a, ranked, {1: 2.0})
    assert query is not None
    terms = query.split()
    assert {"领养", "可乐"} <= set(terms)
    assert not set(terms) & (feedback_terms(a.text) | {"王芳", "李明"})
    # one search term per bigram, on every backend's query builder
    assert message_units(query) == [("gram", t) for t in terms]
    assert unit_queries(query) == [f"'{t}'" for t in terms]


def test_a_cjk_feedback_query_is_a_valid_search_on_each_backend(
    tmp_path: Path, backend: OpenBackend
):
    b = backend(tmp_path / "zh")

    async def main() -> tuple[str, list[tuple[int, float]]]:
        try:
            await b.conversations.append("c", _messages(), tenant="t", user="u")
            index = _index()
            a = analyse("王芳的猫叫什么名字?", index.speakers)
            ranker = TurnRanker(RankWeights(feedback_docs=2))
            first, _ = await b.search.search_outlines("c", a.text, tenant="t", limit=10)
            query = ranker.feedback_query(index, a, [(0, 1.0)], dict(first))
            assert query
            hits, outlines = await b.search.search_outlines(
                "c", query, tenant="t", limit=10, around=1
            )
            assert {o.seq for o in outlines} >= {seq for seq, _ in hits}
            return query, hits
        finally:
            await b.aclose()

    query, hits = asyncio.run(main())
    # every turn holding one of the query's bigrams is found, and only those
    holding = {i for i, (_, text) in enumerate(TURNS, 1) if any(t in text for t in query.split())}
    assert {seq for seq, _ in hits} == holding
    assert 1 in holding  # the turn the feedback was seeded with


# -- query analysis of CJK runs ------------------------------------------------------------


def test_a_speaker_named_inside_a_cjk_run_becomes_the_speaker_prior():
    speakers = speaker_map(["王芳", "李明"])
    a = analyse("王芳的大学室友给王芳推荐了什么?", speakers)
    assert a.speakers == {"王芳"}
    assert "王芳" not in a.text
    assert a.semantic == "的大学室友给推荐了什么?"
    b = analyse("李明和王芳谁先到?", speakers)
    assert b.speakers == {"王芳", "李明"}


def test_question_words_leave_a_cjk_query_and_function_characters_stay():
    speakers = speaker_map(["王芳", "李明"])
    assert analyse("李明的猫叫什么名字?", speakers).text == "的猫 名字"  # "的猫" is the match
    assert analyse("王芳是什么时候决定辞职的?", speakers).text == "决定辞职的"
    assert analyse("我在哪里工作?").text == "我在 工作"
    # nothing left but question words: they are searched rather than nothing
    assert analyse("什么?").text == "什么"


def test_present_is_asked_in_english_and_chinese():
    assert analyse("王芳现在住在哪个城市?").present
    assert analyse("他最近的饮食习惯是什么?").present
    assert analyse("Where does Mel live now?").present
    assert not analyse("王芳是什么时候决定辞职的?").present
    assert not analyse("Where did Mel live in 2022?").present


# -- the recency prior ---------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.integers(1, len(TURNS)), st.floats(0.1, 10.0), max_size=len(TURNS)),
    st.booleans(),
    st.booleans(),
)
def test_recency_off_ranks_a_present_question_as_any_other(hits, fill, speaker):
    index = _index()
    a = QueryAnalysis("猫", speakers=frozenset({"王芳"}) if speaker else frozenset())
    now = dataclasses.replace(a, present=True)
    ranker = TurnRanker(RankWeights(recency_boost=0.0))
    n = len(index)
    assert ranker.rank(index, now, hits, n, fill=fill) == ranker.rank(index, a, hits, n, fill=fill)
    on = TurnRanker(RankWeights(recency_boost=1.0))
    assert on.rank(index, a, hits, n, fill=fill) == ranker.rank(index, a, hits, n, fill=fill)


def test_recency_lifts_the_later_of_two_equal_matches_only_for_the_present():
    index = _index()
    hits = {1: 3.0, 5: 2.9}  # the older turn matches a little better
    ranker = TurnRanker(RankWeights(neighbours=0, recency_boost=1.0))
    a = QueryAnalysis("城市")
    assert ranker.rank(index, a, hits, len(index))[0][0] == 0
    now = dataclasses.replace(a, present=True)
    assert ranker.rank(index, now, hits, len(index))[0][0] == 4
