"""The sliding window: whole units, newest first, narrowing without a second walk."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextwright import HeuristicCounter, Message, count_message, group_units, select_window
from contextwright.history._shorten import ShortenCache, shorten_message
from contextwright.history._window import WindowMemo, narrow_window

from .conftest import conversations

C = HeuristicCounter()


@given(conversations(max_units=30, broken=True), st.integers(0, 3000), st.integers(0, 3000))
def test_narrowing_a_probe_equals_a_fresh_window(history, a, b):
    wide, narrow = max(a, b), min(a, b)
    probe = select_window(history, wide, C, max_message_tokens=200)
    derived = narrow_window(probe, narrow, history, C, max_message_tokens=200)
    fresh = select_window(history, narrow, C, max_message_tokens=200)
    assert [m.id for m in derived.messages] == [m.id for m in fresh.messages]
    assert derived.tokens == fresh.tokens
    assert derived.tokens <= narrow


@given(conversations(max_units=30, broken=True), st.integers(0, 3000))
def test_window_is_whole_units_within_allowance(history, allowance):
    w = select_window(history, allowance, C)
    assert w.tokens <= allowance
    assert sum(count_message(C, m) for m in w.messages) == w.tokens
    assert all(u.ok for u in group_units(w.messages))
    # the window is a suffix of the good units of the history
    ids = [m.id for m in history]
    if w.messages:
        assert ids.index(w.messages[-1].id) == len(ids) - 1 or w.broken


def test_cut_window_starts_with_user():
    history = [
        Message.user("q1"),
        Message.assistant("a1 " * 50),
        Message.user("q2"),
        Message.assistant("a2"),
    ]
    w = select_window(history, count_message(C, history[-1]) + count_message(C, history[-2]) + 5, C)
    assert w.messages[0].role == "user"
    w2 = select_window(history, count_message(C, history[-1]) + 1, C)
    assert w2.messages == []  # an answer alone is not a window


def test_shortening_is_cached_and_marked():
    cache = ShortenCache()
    m = Message.user("word " * 2000)
    a = shorten_message(m, 100, C, cache=cache)
    b = shorten_message(m, 100, C, cache=cache)
    assert a is b
    assert count_message(C, a) <= 110
    assert a.metadata["shortened_from"] > 100
    assert "cut from this message" in a.text


def _same(a, b):
    assert [id(m) for m in a.messages] == [id(m) for m in b.messages] or [
        (m.id, m.metadata.get("shortened_from")) for m in a.messages
    ] == [(m.id, m.metadata.get("shortened_from")) for m in b.messages]
    assert (a.tokens, a.start, a.units, a.shortened, a.stopped, a.considered_end) == (
        b.tokens, b.start, b.units, b.shortened, b.stopped, b.considered_end,
    )  # fmt: skip
    assert [(u.start, u.end, u.kind, why) for u, why in a.broken] == [
        (u.start, u.end, u.kind, why) for u, why in b.broken
    ]


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversations(max_units=12, broken=True),
    st.lists(
        st.tuples(
            conversations(max_units=3, broken=True),  # appended
            st.integers(0, 3),  # oldest messages trimmed off the front
            st.sampled_from(["none", "replace", "results"]),  # an edit of the old part
            st.integers(0, 2500),  # allowance
            st.integers(0, 3),  # stop
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_a_remembered_walk_gives_the_window_a_fresh_walk_gives(history, steps):
    """However the history changes between builds, the memo never changes the window."""
    memo = WindowMemo()
    cache = ShortenCache()
    history = list(history)
    for appended, trim, edit, allowance, stop in steps:
        history = history[trim:] + list(appended)
        if edit == "replace" and history:
            i = len(history) // 2  # an older message replaced by an equal-looking copy
            history[i] = history[i].replace(metadata={"edited": True})
        elif edit == "results" and history:
            # a late tool result: completes (or orphans) whatever came last
            history.append(Message.tool("call_1", "late result"))
        stop = min(stop, len(history))
        kw = {"max_message_tokens": 150, "cache": cache, "stop": stop}
        remembered = select_window(history, allowance, C, memo=memo, **kw)
        fresh = select_window(history, allowance, C, **kw)
        _same(remembered, fresh)
