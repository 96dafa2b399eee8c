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
    assert a.messages == b.messages  # equal messages (a remembered one may stand for its copy)
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


def _built(b):
    """A build's messages and receipt as plain values (fresh messages get fresh ids)."""
    r = b.report
    return (
        [(m.role, m.parts, m.name, dict(m.metadata)) for m in b.messages],
        [m.id for m in b.messages if m.role != "system"],
        (r.used, r.history_messages, r.history_units, r.history_considered),
        (r.history_shortened, r.history_stopped, list(r.warnings)),
    )


def _engine(budget_limit: int = 20_000):
    from contextwright import ContextEngine

    return ContextEngine(
        system_prompt="You help.", counter=C, budget=budget_limit, max_message_tokens=60
    )


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversations(max_units=16),
    st.integers(150, 1200),  # the first build's budget
    st.lists(
        st.tuples(
            conversations(max_units=4),  # appended since the last build
            st.sampled_from([0, 0, 0, 0, 1, 2]),  # oldest messages dropped (summarised)
            st.one_of(st.integers(-30, 30), st.integers(-600, 600)),  # the budget moves
            st.sampled_from([False, False, True]),  # a tool step, when the history allows
            st.sampled_from(["none", "copy", "edit"]),  # an older message copied or edited
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_an_engine_remembering_its_walks_builds_what_a_fresh_engine_builds(history, budget, builds):
    """Growing history, random budgets, tool units, shortening: the memo never shows."""
    from contextwright import BudgetError, InvalidMessageError

    warm = _engine()
    history = list(history)
    for i, (appended, drop, move, step, change) in enumerate(builds):
        budget = min(2000, max(60, budget + move))
        history = history[drop if drop < len(history) - 2 else 0 :] + list(appended)
        j = len(history) * 2 // 3
        if change != "none" and j < len(history) - 1 and history[j].role == "user":
            if change == "copy":  # an equal copy, as a reload from a store gives
                history[j] = history[j].replace()
            else:  # an edited message is a new message (shortened copies are cached by id)
                history[j] = Message.user(history[j].text + " and more words" * 3)
        message = None if step else Message.user(f"question {i}: what now?")
        outcomes = []
        for engine in (warm, _engine()):
            try:
                outcomes.append(_built(engine.build_sync(message, history=history, budget=budget)))
            except (BudgetError, InvalidMessageError) as exc:
                outcomes.append(type(exc).__name__)
        assert outcomes[0] == outcomes[1]
        if message is not None:
            history.append(message)


def test_a_grown_history_is_not_walked_again(monkeypatch):
    """After appends, the window comes from the remembered walk: only new units are measured."""
    from contextwright.history import _window, _window_memo

    def pair(k):
        return [Message.user(f"question {k % 10}"), Message.assistant(f"answer {k % 10}")]

    history = [m for k in range(200) for m in pair(k)]
    per_pair = count_message(C, history[0]) + count_message(C, history[1])
    memo = WindowMemo()
    assert select_window(history, 40 * per_pair, C, memo=memo).stopped == "budget"
    measured: list[int] = []
    real = _window_memo.measure

    def counting(history, unit, *a):
        measured.append(unit.start)
        return real(history, unit, *a)

    def no_walk(*a, **k):
        raise AssertionError("walked the window again")

    for k in range(30):
        history = history + pair(k)
        # the allowance never grows; every third one is exactly what some newest pairs cost
        allowance = (39 - k // 3) * per_pair - k % 3
        monkeypatch.setattr(_window_memo, "measure", counting)
        monkeypatch.setattr(_window, "_steps", no_walk)
        w = select_window(history, allowance, C, memo=memo)
        monkeypatch.undo()
        _same(w, select_window(history, allowance, C))
        assert w.tokens == (39 - k // 3 - (k % 3 > 0)) * per_pair
    assert measured == [u for k in range(30) for u in (401 + 2 * k, 400 + 2 * k)]
