"""Entity links (``history/_links.py``): a second round from the best hits, in process.

Against a slow restatement of the rule; off means the ranking of before; the
same ranking from a fresh index as from one built in steps; and a turn that
shares a rare word with the best hit, and no word with the question, rises.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import Message
from contextwright.history._links import link_scores
from contextwright.history._query import STOP_WORDS, QueryAnalysis
from contextwright.history._rank import RankWeights, TurnIndex, TurnRanker
from contextwright.history._turns import feedback_terms

T0 = 1_700_000_000.0
WORDS = ["kitten", "cello", "basil", "trail", "recital", "pesto", "taekwondo", "kickboxing",
         "Bruno", "with", "über"]  # fmt: skip


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    n = draw(st.integers(1, 30))
    out: list[Message] = []
    at = T0
    for i in range(n):
        at += draw(st.sampled_from([60.0, 5 * 3600.0]))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5)))
        role = draw(st.sampled_from(["user", "assistant"]))
        out.append(Message(role, text, name="Ada" if role == "user" else "Bruno",
                           created_at=at, seq=i + 1))  # fmt: skip
    return out


def _reference(index: TurnIndex, hits: dict[int, float], asked: str, n: int, seeds: int,
               max_df: int) -> dict[int, float]:  # fmt: skip
    """The rule of `link_scores`, the slow way."""
    turns = index.turns
    words = [feedback_terms(t.text) for t in turns]
    df = Counter(w for ws in words for w in ws)
    best = sorted(hits.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:seeds]
    seed = [index.seqs.index(s) for s, _ in best if s in index.seqs]
    seed = [p for p in seed if p < n]
    query = feedback_terms(asked)
    rare = {
        w for p in seed for w in words[p]
        if 1 < df[w] <= max_df and w not in STOP_WORDS and w not in index.speakers and w not in query
    }  # fmt: skip
    out: dict[int, float] = {}
    for p in range(n):
        shared = words[p] & rare
        if p not in seed and shared:
            out[p] = sum(math.log(len(turns)) - math.log(df[w]) for w in shared)
    return out


def _hits(draw: st.DrawFn, index: TurnIndex) -> dict[int, float]:
    scores = st.sampled_from([0.5, 1.0, 2.0, 4.0])
    return draw(st.dictionaries(st.sampled_from(index.seqs), scores, max_size=8))


@settings(max_examples=200, deadline=None)
@given(conversations(), st.data(), st.integers(1, 8), st.integers(1, 10))
def test_link_scores_are_the_documented_rule(messages, data, seeds, max_df):
    index = TurnIndex()
    index.add(messages)
    hits = _hits(data.draw, index)
    n = data.draw(st.integers(0, len(index)))
    got = link_scores(index, hits, "kitten", n, seeds=seeds, max_df=max_df)
    want = _reference(index, hits, "kitten", n, seeds, max_df)
    assert got.keys() == want.keys()
    assert all(math.isclose(got[p], want[p], rel_tol=1e-9, abs_tol=1e-12) for p in got)


@settings(max_examples=150, deadline=None)
@given(conversations(), st.data(), st.lists(st.integers(0, 30), max_size=3))
def test_a_ranking_with_links_is_that_of_a_fresh_index_and_off_is_as_before(messages, data, cuts):
    fresh = TurnIndex()
    fresh.add(messages)
    stepped = TurnIndex()  # built in steps, its words counted part-way
    start = 0
    for cut in sorted(cuts):
        stepped.add(messages[start:cut])
        start = max(start, cut)
        _ = stepped.postings  # read part-way: later turns must still be posted
    stepped.add(messages[start:])
    assert stepped.words == fresh.words
    assert stepped.postings == fresh.postings
    hits = _hits(data.draw, fresh)
    analysis = QueryAnalysis("kitten", speakers=data.draw(st.sampled_from(
        [frozenset(), frozenset({"Ada"})])))  # fmt: skip
    n = len(fresh)
    on = TurnRanker(RankWeights(link_weight=0.1, link_df=3))
    ranked = on.rank(fresh, analysis, hits, n, fill=True)
    assert ranked == on.rank(stepped, analysis, hits, n, fill=True)
    assert sorted(p for p, _ in ranked) == list(range(n))  # every turn, once
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(ranked))  # best first
    # off: exactly the ranking of the defaults, whatever link_df says
    off = TurnRanker(dataclasses.replace(RankWeights(), link_df=3))
    for fill in (False, True):
        assert off.rank(fresh, analysis, hits, n, fill=fill) == TurnRanker().rank(
            fresh, analysis, hits, n, fill=fill
        )
    # links need fill: without it the ranking is the default's
    assert on.rank(fresh, analysis, hits, n) == TurnRanker().rank(fresh, analysis, hits, n)


def test_a_turn_sharing_a_rare_word_with_the_best_hit_rises():
    texts = [
        "I am doing kickboxing at the dojo downtown",  # the hit: names the question's word
        "weather was grey all week long",
        "the dojo downtown also teaches taekwondo now",  # no question word; shares "dojo"
        "weather again, grey and cold all week",
        "pesto recipe with basil and garlic",
        "another pesto recipe with basil",
    ]
    index = TurnIndex()
    index.add(
        [Message.user(t, seq=i + 1, created_at=T0 + i * 86400.0) for i, t in enumerate(texts)]
    )
    hits = {1: 3.0}
    analysis = QueryAnalysis("kickboxing")

    def place(weights: RankWeights) -> int:
        ranked = TurnRanker(weights).rank(index, analysis, hits, len(index), fill=True)
        return [p for p, _ in ranked].index(2)

    # days apart: six sessions, no neighbour evidence; off, turn 2 ties the others by recency
    assert place(RankWeights(feedback_weight=0.0)) == 4
    assert place(RankWeights(feedback_weight=0.0, link_weight=0.1)) == 1
