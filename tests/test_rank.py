"""The turn ranker against a plain restatement of its documented formula.

`TurnRanker.rank` has a short path for lexical evidence alone (the stateful
default) and a general one (priors, feedback, vectors, fill); both must give what
the module docstring describes, computed here the slow, obvious way. Recall ranks
only the first few candidates at first (``top``) and packs from them, asking for
the whole ranking if they run out: that must pack what the whole ranking would.
"""

from __future__ import annotations

import calendar
import math
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import ConfigError, HeuristicCounter, Message
from contextwright.history import RecallSource
from contextwright.history._query import QueryAnalysis
from contextwright.history._query import date_matches as _date_matches
from contextwright.history._rank import TurnIndex, TurnRanker
from contextwright.history._turns import day_label, feedback_terms

DAY = 86_400.0
T0 = 1_700_000_000.0  # 14 November 2023
WORDS = ["kitten", "cello", "basil", "trail", "recital", "pesto", "Ada", "Bruno", "über", "río", "耳机"]  # fmt: skip


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Turns with gaps (new sessions), two speakers, some tool messages and blanks between."""
    n = draw(st.integers(1, 40))
    out: list[Message] = []
    at = T0
    seq = 0
    for i in range(n):
        at += draw(st.sampled_from([60.0, 600.0, 5 * 3600.0, 20 * DAY]))
        seq += draw(st.integers(1, 3))  # seq gaps: the index must not assume 1, 2, 3…
        kind = draw(st.sampled_from(["user", "assistant", "assistant", "tool", "blank"]))
        if kind == "tool":
            out.append(Message.tool(f"c{i}", "kitten tool output", seq=seq, created_at=at))
            continue
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6)))
        role = "user" if kind == "user" else "assistant"
        name = "Ada" if role == "user" else "Bruno"
        out.append(
            Message(role, "   " if kind == "blank" else text, name=name, created_at=at, seq=seq)
        )
    return out


def _reference(
    index: TurnIndex, analysis: QueryAnalysis, hits: dict[int, float], n: int, ranker: TurnRanker
) -> list[tuple[int, float]]:
    """The module docstring's steps 2, 4 and 5 for lexical evidence, without shortcuts."""
    w = ranker.weights
    lexical: dict[int, float] = {}
    for seq, score in hits.items():
        if score <= 0 or seq not in index.seqs:
            continue
        p = index.seqs.index(seq)
        if p >= n:
            continue
        for q in range(max(0, p - w.neighbours), min(n, p + w.neighbours + 1)):
            if index.turns[q].session == index.turns[p].session:
                lexical[q] = lexical.get(q, 0.0) + score * w.neighbour_decay ** abs(q - p)
    out = []
    for p, s in lexical.items():
        rank = sum(1 for other in lexical.values() if other > s)  # competition rank
        fused = 1.0 / (w.rrf_k + rank)
        speakers = analysis.speakers
        if len(speakers) == 1 and index.turns[p].speaker in speakers:
            fused *= 1.0 + w.speaker_boost
        if (analysis.months or analysis.years) and _date_matches(index.turns[p].month, analysis):
            fused *= 1.0 + w.date_boost
        out.append((p, fused))
    out.sort(key=lambda ps: (-ps[1], -ps[0]))  # best first, ties to the newer turn
    return out


@settings(max_examples=300, deadline=None)
@given(
    conversations(),
    st.data(),
    st.sampled_from(
        [
            QueryAnalysis("kitten"),  # lexical evidence alone: the short path
            QueryAnalysis("kitten", speakers=frozenset({"Bruno"})),
            QueryAnalysis("kitten", months=frozenset({11, 12})),
            QueryAnalysis("kitten", speakers=frozenset({"Ada", "Bruno"}), years=frozenset({2023})),
        ]
    ),
)
def test_rank_is_the_documented_formula(messages, data, analysis):
    index = TurnIndex()
    index.add(messages)
    seqs = [m.seq for m in messages]
    # exact binary fractions, so that the reference's sums in another order are equal
    scores = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 4.0])
    hits = data.draw(st.dictionaries(st.sampled_from([*seqs, 10_000]), scores, max_size=12))
    n = data.draw(st.integers(0, len(index)))
    ranker = TurnRanker()
    got = ranker.rank(index, analysis, hits, n)
    want = _reference(index, analysis, hits, n, ranker)
    assert [p for p, _ in got] == [p for p, _ in want]
    assert all(math.isclose(a, b, rel_tol=1e-12) for (_, a), (_, b) in zip(got, want, strict=True))
    top = data.draw(st.integers(0, len(got) + 2))
    assert ranker.rank(index, analysis, hits, n, top=top) == got[:top]  # a prefix, same scores


@pytest.mark.parametrize("top", [-1, 1.5, True, "3"])
def test_rank_rejects_a_bad_top(top):
    index = TurnIndex()
    index.add([Message.user("kitten", seq=1)])
    with pytest.raises(ConfigError, match="top must be"):
        TurnRanker().rank(index, QueryAnalysis("kitten"), {1: 1.0}, 1, top=top)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 60), min_size=1, max_size=40),  # words per turn
    st.data(),
)
def test_packing_from_the_start_of_the_ranking_packs_what_the_whole_ranking_would(lengths, data):
    messages = [
        Message.user(" ".join(["pesto"] * k), seq=i + 1, created_at=T0 + 60 * i)
        for i, k in enumerate(lengths)
    ]
    index = TurnIndex()
    index.add(messages)
    order = data.draw(st.permutations(range(len(index))))
    ranked = [(p, 1.0 / (1 + r)) for r, p in enumerate(order)]
    limit = data.draw(st.one_of(st.none(), st.integers(1, 8)))
    allowance = data.draw(st.integers(0, 400))
    start = data.draw(st.integers(0, len(ranked)))
    source = RecallSource(limit=limit, counter=HeuristicCounter())
    whole = source._block(index, ranked, allowance)
    asked: list[int] = []

    def rest() -> list[tuple[int, float]]:
        asked.append(1)
        return ranked

    part = source._block(index, ranked[:start], allowance, rest)
    shown = (part.content, part.provenance) if part else None
    assert shown == ((whole.content, whole.provenance) if whole else None)
    assert len(asked) <= 1


@settings(max_examples=100, deadline=None)
@given(conversations(), st.lists(st.integers(0, 40), max_size=4))
def test_feedback_counts_are_those_of_a_fresh_index_however_reads_and_adds_interleave(
    messages, cuts
):
    index = TurnIndex()
    start = 0
    for cut in sorted(cuts):
        index.add(messages[start:cut])
        start = max(start, cut)
        _ = index.df  # read part-way: later turns must still be counted
    index.add(messages[start:])
    want: Counter[str] = Counter()
    for t in index.turns:
        want.update(feedback_terms(t.text))
    assert index.df == want
    assert index.sessions == [t.session for t in index.turns]


def test_day_labels_and_month_names_do_not_follow_the_process_locale(monkeypatch):
    # calendar.month_name follows LC_TIME; a German process must still get English labels
    german = ["", "Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August",
              "September", "Oktober", "November", "Dezember"]  # fmt: skip
    monkeypatch.setattr(calendar, "month_name", german)
    at = time.mktime((2023, 5, 8, 12, 0, 0, 0, 0, 0)) - time.timezone
    assert day_label(at) == "8 May 2023"
    assert day_label(at, "zh-CN") == "2023-05-08"
    from contextwright.history._rank import analyse

    assert analyse("What happened in May 2023?").months == {5}


def _analyse_before(query: str, speakers: dict[str, str]) -> tuple[str, str, set[str], set[int]]:
    """`analyse` as it was written first (one pass that copies every piece), kept as the
    oracle for the version that only cuts the names out: the two must agree."""
    from contextwright.history._query import _MONTHS, _WORD, CJK_QUESTION_WORDS, STOP_WORDS
    from contextwright.text._terms import CJK_RUN

    words: list[str] = []
    kept: list[str] = []
    named: set[str] = set()
    months: set[int] = set()
    last = 0
    for m in _WORD.finditer(query):
        if m.start() < last:
            continue
        word = m.group(0)
        low = word.lower()
        kept.append(query[last : m.start()])
        last = m.end()
        if low in speakers and not word[0].islower():
            named.add(speakers[low])
            if query.startswith(("'s", "’s"), last):
                last += 2
            continue
        kept.append(word)
        if CJK_RUN.search(word):  # question words out, then pieces of two characters or more
            for q in sorted(CJK_QUESTION_WORDS, key=len, reverse=True):
                word = word.replace(q, " ")
            words += [piece for piece in word.split() if len(piece) > 1]
            continue
        month = _MONTHS.get(low)
        if month is not None and word[0].isupper():
            months.add(month)
        if low not in STOP_WORDS:
            words.append(word)
    kept.append(query[last:])
    if not words:
        words = [w for w in _WORD.findall(query) if w.lower() not in speakers]
    return " ".join(words), " ".join("".join(kept).split()), named, months


_QUERY_PIECES = ["Caroline", "caroline", "Mel", "Melanie", "Will", "will", "'s", "’s", "s",
                 "May", "may", "June", "2023", "1999", "the", "what", "did", "say", "pottery",
                 "camping", "Kickboxing", "我", "上海", "什么", "哪里", "?", "!", ",", "'", "’", " ", "  ", "\n"]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_QUERY_PIECES), max_size=24).map("".join))
def test_analysis_cuts_only_the_named_speakers(query: str) -> None:
    from contextwright.history._rank import analyse

    speakers = {"caroline": "Caroline", "mel": "Melanie", "melanie": "Melanie", "will": "Will"}
    got = analyse(query, speakers)
    text, semantic, named, months = _analyse_before(query, speakers)
    assert (got.text, got.semantic, set(got.speakers), set(got.months)) == (
        text, semantic, named, months,
    )  # fmt: skip
