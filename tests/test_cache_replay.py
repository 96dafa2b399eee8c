"""Cache-aware clearing: the replay goals, the clearing cut, and the receipt's prompt-cache line.

The replay sends a seeded tool-heavy agent trace (`bench/_cache_trace.py`, the
benchmark's, shorter) through `Conversations` under a budget that forces tool-result
compression and summaries, renders every build for Anthropic and compares it block
by block with the request before it: cache writes within 1.25x of the minimum (new
messages plus one full write per compaction) and >= 95 % of the non-compacting
builds keeping the previous request's cacheable part as their prefix, byte for byte.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from contextwright import ContextEngine, Conversations, HeuristicCounter, Message, group_units
from contextwright.history import CompactionConfig, clearing_cut, plan_compaction

from .conftest import conversations

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _cache_trace import agent_trace, replay

H = HeuristicCounter()
SYSTEM = "You are a careful coding agent. Read the code before changing it. " * 8


def _replay(clear: int | None, calls: int = 90, budget: int = 6000):
    engine = ContextEngine(system_prompt=SYSTEM, counter=H, budget=budget)
    config = CompactionConfig().with_(clear_at_least_tokens=clear)
    convs = Conversations(engine, None, compaction=config, inline_jobs=True)
    try:
        return replay(convs, H, calls)
    finally:
        convs.close()


def test_the_replay_meets_both_goals_and_writes_less_than_before():
    aware = _replay(None)
    assert aware.builds == 90
    assert aware.compacting >= 3  # the budget forces summaries
    assert aware.minimum > 0
    assert aware.written <= 1.25 * aware.minimum, (aware.written, aware.minimum)
    assert aware.share >= 0.95, aware.breaks
    # the receipts agree with the rendered requests: every build that kept the prefix
    # wrote what was new, and no more
    assert aware.reported_written <= 1.25 * aware.reported_minimum
    before = _replay(0)  # the earlier policy: a summary every 10 messages past the window
    assert aware.compacting < before.compacting
    assert aware.written < before.written
    assert aware.cost < before.cost


def test_the_trace_is_deterministic_and_tool_heavy():
    a = [e.messages for e in agent_trace(40, seed=5)]
    b = [e.messages for e in agent_trace(40, seed=5)]
    assert [[m.to_dict() for m in ms] for ms in a] == [[m.to_dict() for m in ms] for ms in b]
    tools = [m for ms in a for m in ms if m.role == "tool"]
    assert len(tools) >= 20
    assert any(len(m.tool_results[0].content) > 8000 for m in tools)  # compressed, offloaded
    assert any("的" in m.text or "请" in m.text for ms in a for m in ms)  # some Chinese


@st.composite
def _planned(draw: st.DrawFn) -> tuple[list[Message], list[int]]:
    msgs = draw(conversations(max_units=16))
    costs = [draw(st.integers(1, 400)) for _ in msgs]
    return msgs, costs


@given(
    case=_planned(),
    keep_tokens=st.integers(0, 3000),
    at_least=st.integers(0, 2000),
    keep_recent=st.integers(0, 8),
)
def test_a_clearing_cut_frees_at_least_its_minimum_at_a_unit_boundary(
    case, keep_tokens, at_least, keep_recent
):
    msgs, costs = case
    cut = clearing_cut(
        msgs, costs, keep_tokens=keep_tokens, at_least=at_least, keep_recent=keep_recent
    )
    n = len(msgs)
    assert 0 <= cut <= n
    if cut == 0:
        return
    assert sum(costs[:cut]) >= at_least  # clears at least that much, or nothing
    assert n - cut >= keep_recent  # the newest are kept
    assert cut == n or msgs[cut].role != "tool"  # never inside a tool-call unit
    # no more is cleared than the room needs: kept from the unit before the cut, the
    # messages would not have fitted
    prev = max(u.start for u in group_units(msgs) if u.start < cut)
    assert sum(costs[prev:]) > keep_tokens


def test_a_clearing_cut_counts_uncounted_messages_as_enough():
    msgs = [Message.user("a"), Message.assistant("b"), Message.user("c"), Message.assistant("d")]
    assert (
        clearing_cut(msgs, [None, None, 5, 5], keep_tokens=10, at_least=10**6, keep_recent=0) == 2
    )
    assert clearing_cut(msgs, [5, 5, 5, 5], keep_tokens=10, at_least=11, keep_recent=0) == 0


def test_a_soft_compaction_that_frees_too_little_waits():
    msgs = [Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(20)]
    costs = [100] * 20
    config = CompactionConfig(soft_threshold_tokens=1000, hard_threshold_tokens=5000)
    soft = plan_compaction(config, msgs, costs, summary_tokens=0, clear_at_least=1500)
    assert soft.summarize_count == 0
    assert "clear_at_least" in soft.notes[-1]
    enough = plan_compaction(config, msgs, costs, summary_tokens=0, clear_at_least=1400)
    assert enough.summarize_count == 14
    hard = plan_compaction(
        config, msgs, costs, summary_tokens=0, clear_at_least=1500, urgency="hard"
    )
    assert hard.summarize_count == 14  # over the hard threshold it is made anyway


def _history(n: int) -> list[Message]:
    return [
        m
        for i in range(n)
        for m in (Message.user(f"question {i} about the plan"), Message.assistant(f"answer {i}"))
    ]


def test_the_receipt_reports_the_prefix_the_previous_build_sent():
    engine = ContextEngine(system_prompt="You are helpful.", counter=H, budget=4000)
    history = _history(10)
    first = engine.build_sync("next?", history=history, summary="earlier: a plan")
    p = first.report.prefix
    assert p is not None
    assert not p.known
    assert p.changed == "first"
    assert p.write_tokens == p.least_write_tokens == p.cacheable_tokens > 0
    # the history grew: the previous cacheable part is the new one's prefix
    grown = [*history, Message.user("next?"), Message.assistant("sure")]
    second = engine.build_sync("and then?", history=grown, summary="earlier: a plan")
    q = second.report.prefix
    assert q is not None
    assert q.known
    assert q.changed == ""
    assert q.cached_tokens == p.cacheable_tokens
    assert q.write_tokens == q.least_write_tokens == q.cacheable_tokens - p.cacheable_tokens
    # a new summary: everything after the system message is written again
    third = engine.build_sync("more?", history=grown, summary="earlier: a plan, revised")
    r = third.report.prefix
    assert r is not None
    assert r.changed == "summary"
    assert 0 < r.cached_tokens < r.cacheable_tokens
    # a window that slides one unit per turn writes more than what is new
    small = ContextEngine(system_prompt="You are helpful.", counter=H, budget=260)
    small.build_sync("x?", history=_history(30), summary="s")
    slid = small.build_sync("y?", history=_history(31), summary="s").report.prefix
    assert slid is not None
    assert slid.changed == "history"
    assert slid.least_write_tokens < slid.write_tokens
    # dropping the memo only loses the report's knowledge of the previous build
    engine.drop_caches()
    again = engine.build_sync("more?", history=grown, summary="s")
    assert again.report.prefix is not None
    assert not again.report.prefix.known
    assert "prompt cache:" in _table(again)


def _table(built) -> str:
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(built.report.to_table())
    return console.export_text()


def test_a_window_cut_by_a_large_message_is_made_whole_by_the_next_summary():
    """The sections around the window (here a large current message) can leave the
    history less than the allowance: the summary scheduled after that build aims at
    the room the window really had, so the next window holds the whole history."""
    convs = Conversations(ContextEngine(counter=H, budget=3000), None, inline_jobs=True)
    try:
        pairs = [
            (Message.user(f"question {i} about the garden plan and the shed"),
             Message.assistant(f"answer {i}: plant the tomatoes by the fence in week {i}"))
            for i in range(43)
        ]  # fmt: skip
        convs.append_sync("c", [m for pair in pairs for m in pair])
        assert not convs.check_sync("c").summary_due  # the history fits its allowance
        big = "The inventory: " + " ".join(f"item{j} costs {j} dollars;" for j in range(240))
        cut = convs.build_sync("c", big, store_message=False).report
        assert cut.history_messages < cut.history_total  # this build's window was cut
        whole = convs.build_sync("c", "and the shed?").report
        assert whole.history_messages == whole.history_total
        assert whole.prefix is not None
        assert whole.prefix.changed == "summary"
        after = convs.build_sync("c", "and the fence?").report.prefix
        assert after is not None
        assert after.changed == ""  # append-only again
    finally:
        convs.close()


def test_a_soft_compaction_waits_until_it_can_clear_enough():
    config = CompactionConfig(
        soft_threshold_tokens=500, hard_threshold_tokens=10**6, keep_recent_messages=4,
        clear_at_least_tokens=400,
    )  # fmt: skip
    engine = ContextEngine(counter=H, budget=50_000)
    convs = Conversations(engine, None, compaction=config, inline_jobs=True)
    summaries = convs.backend.summaries
    scheduled: list[str] = []
    schedule = convs._compactor.schedule

    async def counting(conversation, *a, **kw):  # type: ignore[no-untyped-def]
        scheduled.append(conversation)
        await schedule(conversation, *a, **kw)

    convs._compactor.schedule = counting  # type: ignore[method-assign]
    try:
        long = " ".join(["the quarterly plan needs a careful review of every line item"] * 25)
        convs.append_sync("c", [Message.user(long), Message.assistant(long)])
        convs.build_sync("c", long)  # soft, but all of it is among the newest 4
        convs.append_sync("c", [Message.assistant("noted")])
        convs.build_sync("c", "ok?")
        assert convs.check_sync("c").urgency == "soft"
        assert scheduled == []  # no job per build that could only wait
        assert convs.run_sync(summaries.summaries("c", tenant="default")) == []
        convs.append_sync("c", [Message.user(long), Message.assistant(long)])
        convs.build_sync("c", "and now?")  # the oldest long ones can go: 400+ tokens
        made = convs.run_sync(summaries.summaries("c", tenant="default"))
        assert len(made) == 1
    finally:
        convs.close()
