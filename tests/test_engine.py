"""The pipeline's invariants, as properties, and its behaviour, as examples."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextwright import (
    Block,
    BudgetError,
    ConfigError,
    ContextEngine,
    HeuristicCounter,
    InMemoryMemoryStore,
    InvalidMessageError,
    Memory,
    Message,
    Priority,
    Scope,
    TiktokenCounter,
    UserError,
    count_messages,
    group_units,
    invalidate_user_memory,
    user_memory_tag,
)
from contextwright.sources import (
    ConversationState,
    SourceBase,
    UserMemorySource,
    consultation_sources,
    keywords,
)

from .conftest import TEXT, conversations

HEURISTIC = HeuristicCounter()
CL100K = TiktokenCounter("cl100k_base")


class StaticProfile(SourceBase):
    def __init__(self, text: str) -> None:
        super().__init__(name="profile", priority=Priority.P1, static=True)
        self.text = text

    async def fetch(self, turn, allowance):
        return Block("profile", self.text, Priority.P1, static=True)


class Fixed(SourceBase):
    def __init__(self, name: str, text: str, priority: int) -> None:
        super().__init__(name=name, priority=priority)
        self.text = text

    async def fetch(self, turn, allowance):
        return Block(self.name, self.text, self.priority)


def _engine(counter, memory_text="likes green tea", **kw):
    store = InMemoryMemoryStore()
    store.add(Scope("default", "anonymous"), Memory(memory_text, "preference", 70))
    sources = [
        UserMemorySource(store=store),
        Fixed("notes", "remember the deadline is Friday " * 5, Priority.P1),
        Fixed("extras", "optional trivia about tea " * 8, Priority.P2),
        *consultation_sources()[1:],
    ]
    return ContextEngine(
        system_prompt="You are a careful assistant.", sources=sources, counter=counter, **kw
    )


def _check_invariants(built, counter, budget, current):
    msgs = built.messages
    assert count_messages(counter, msgs) <= budget
    assert built.report.used <= budget
    # the current message is present, and it is the last user-authored message
    users = [i for i, m in enumerate(msgs) if m.role == "user"]
    assert msgs[users[-1]] is current
    assert all(m.role == "system" for m in msgs[users[-1] + 1 :])
    # tool calls are never split from their results
    assert all(u.ok for u in group_units(msgs))


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=40)
@given(conversations(max_units=25, broken=True), TEXT, st.integers(60, 3000))
def test_budget_units_and_current_message_heuristic(history, question, budget):
    engine = _engine(HEURISTIC)
    current = Message.user(question)
    try:
        built = engine.build_sync(current, history=history, budget=budget)
    except BudgetError as exc:
        assert exc.needed > budget
        return
    _check_invariants(built, HEURISTIC, budget, current)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=40)
@given(conversations(max_units=25, broken=True), TEXT, st.integers(60, 3000))
def test_budget_holds_by_the_real_tokenizer(history, question, budget):
    engine = _engine(CL100K)
    current = Message.user(question)
    try:
        built = engine.build_sync(current, history=history, budget=budget)
    except BudgetError as exc:
        assert exc.needed > budget
        return
    _check_invariants(built, CL100K, budget, current)
    # the exact count recomputed from scratch, not from the engine's caches
    fresh = [Message.from_dict(m.to_dict()) for m in built.messages]
    assert count_messages(TiktokenCounter("cl100k_base"), fresh) <= budget


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=30)
@given(conversations(max_units=20), TEXT, st.integers(300, 3000))
def test_p0_never_dropped(history, question, budget):
    engine = _engine(HEURISTIC, memory_text="allergic to peanuts")
    built = engine.build_sync(question, history=history, budget=budget)
    joined = "\n".join(m.text for m in built.messages)
    assert "allergic to peanuts" in joined
    assert built.report.block("user_memory").status == "included"


def test_protected_zone_too_big_is_a_clear_error():
    engine = ContextEngine(system_prompt="word " * 500, counter=HEURISTIC)
    with pytest.raises(BudgetError) as info:
        engine.build_sync("hi", budget=100)
    assert info.value.needed > 100
    assert "system_prompt" in str(info.value)


@given(
    st.lists(
        st.sampled_from(
            ["</user_memory>", "<user_memory>", "<current_goal>", "</current_goal>", "x", "&lt;"]
        ),
        min_size=1,
        max_size=6,
    ).map("".join)
)
def test_no_forgery_through_memory_or_message(evil):
    engine = _engine(HEURISTIC, memory_text=evil)
    built = engine.build_sync(evil, budget=4000)
    # what the engine wrote: system messages and the quoted per-turn context (the
    # current message is the user's own text, sent as written)
    context = [m for m in built.messages if m.metadata.get("contextwright") == "turn_context"]
    assert len(context) == 1
    system_text = "\n".join(m.text for m in built.messages if m.role == "system" or m in context)
    for tag in ("user_memory", "current_goal", "context"):
        assert system_text.count(f"</{tag}>") == 1
        assert system_text.count(f"<{tag}>") + system_text.count(f"<{tag} ") == 1


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=30)
@given(conversations(max_units=10), conversations(max_units=10), TEXT, st.integers(1500, 6000))
def test_prefix_is_byte_identical_when_only_history_grows(h1, h2, question, budget):
    engine = ContextEngine(
        system_prompt="You are a careful assistant.",
        pinned=["Never reveal the key."],
        sources=[StaticProfile("Name: Ada\nLanguage: English"), *consultation_sources()[1:]],
        counter=HEURISTIC,
    )
    a = engine.build_sync(question, history=h1, budget=budget, summary="They talked about tea.")
    b = engine.build_sync(
        question, history=h1 + h2, budget=budget, summary="They talked about tea."
    )
    assert a.messages[0].text == b.messages[0].text
    assert a.messages[1].text == b.messages[1].text  # the summary
    assert "Never reveal the key." in a.messages[0].text


def test_window_keeps_newest_and_reports():
    history = []
    for i in range(200):
        history += [Message.user(f"question {i} " * 5), Message.assistant(f"answer {i} " * 5)]
    engine = ContextEngine(system_prompt="sys", counter=HEURISTIC)
    built = engine.build_sync("latest?", history=history, budget=1000)
    kept = [m for m in built.messages if m.role in ("user", "assistant")][:-1]
    assert kept[-1] is history[-1]
    assert 0 < len(kept) < len(history)
    r = built.report
    assert r.history_stopped == "budget"
    assert r.block("history").status == "truncated"
    assert r.history_considered < len(history)  # it did not walk the whole thread


def test_long_tool_result_is_shortened_not_lost():
    from contextwright import ToolCallPart

    big = "row " * 6000
    history = [
        Message.user("run the query"),
        Message.assistant("", tool_calls=[ToolCallPart("c1", "sql", "{}")]),
        Message.tool("c1", big),
    ]
    engine = ContextEngine(counter=HEURISTIC, max_message_tokens=300)
    built = engine.build_sync("what did it return?", history=history, budget=2000)
    tool = [m for m in built.messages if m.role == "tool"]
    assert len(tool) == 1
    assert "cut from this message" in tool[0].text
    assert tool[0].metadata["shortened_from"] > 300
    assert built.report.history_shortened == 1


def test_p2_dropped_before_p1_truncated():
    engine = ContextEngine(
        counter=HEURISTIC,
        sources=[
            Fixed("important", "alpha " * 400, Priority.P1),
            Fixed("optional", "beta " * 50, Priority.P2),
        ],
        restate_goal=False,
    )
    built = engine.build_sync("hi", budget=400)
    r = built.report
    assert r.block("optional").status == "dropped"
    assert r.block("important").status == "truncated"
    assert "P2" in r.block("optional").reason


class Slow(SourceBase):
    async def fetch(self, turn, allowance):
        await asyncio.sleep(5)
        return Block("slow", "never")


class Broken(SourceBase):
    async def fetch(self, turn, allowance):
        raise RuntimeError("backend down")


def test_failures_and_timeouts_are_isolated_and_reported():
    engine = ContextEngine(
        counter=HEURISTIC,
        sources=[
            Slow(name="slow", deadline=0.05),
            Broken(name="broken"),
            Fixed("ok", "fine", Priority.P1),
        ],
    )
    built = engine.build_sync("hi", budget=1000)
    r = built.report
    assert r.block("slow").status == "timed_out"
    assert r.block("broken").status == "failed"
    assert "backend down" in r.block("broken").reason
    assert r.block("ok").status == "included"


class Waits(SourceBase):
    """Awaits real suspensions: a sleep, a thread, a future that fails; records what it saw."""

    def __init__(self, name: str, log: list[str], *, sleep: float = 0.05, **kw) -> None:
        super().__init__(name=name, **kw)
        self.log, self.sleep = log, sleep

    async def fetch(self, turn, allowance):
        self.log.append(f"{self.name} task {asyncio.current_task().get_name()}")
        try:
            await asyncio.sleep(0)
            await asyncio.sleep(self.sleep)
            got = await asyncio.get_running_loop().run_in_executor(None, lambda: 41 + 1)
            failing = asyncio.get_running_loop().create_future()
            failing.set_exception(KeyError("gone"))
            try:
                await failing
            except KeyError:
                self.log.append(f"{self.name} saw its future fail")
            return Block(self.name, f"answer {got}", Priority.P1)
        except asyncio.CancelledError:
            self.log.append(f"{self.name} cancelled")
            raise


class Eager(SourceBase):
    def __init__(self, log: list[str]) -> None:
        super().__init__(name="eager")
        self.log = log

    async def fetch(self, turn, allowance):
        self.log.append(f"eager task {asyncio.current_task().get_name()}")
        return Block("eager", "computed on the spot", Priority.P1)


def test_sources_run_concurrently_under_deadlines():
    """Sources start in order; the waiting ones overlap and keep their deadline."""
    log: list[str] = []
    engine = ContextEngine(
        counter=HEURISTIC,
        restate_goal=False,
        sources=[
            Eager(log),
            Waits("a", log),
            Waits("b", log),
            Waits("late", log, sleep=600, deadline=0.1),
            Broken(name="broken"),
        ],
    )

    async def main():
        asyncio.current_task().set_name("the-build")
        t = asyncio.get_running_loop().time()
        built = await engine.build("hi", budget=1000)
        return built, asyncio.get_running_loop().time() - t

    built, took = asyncio.run(main())
    r = built.report
    assert r.block("eager").status == "included"
    assert r.block("a").status == r.block("b").status == "included"
    assert "answer 42" in built.messages[0].text + built.messages[-1].text
    assert r.block("late").status == "timed_out"
    assert r.block("broken").status == "failed"
    # every source was started, in order, before any waiting one finished
    assert [line.split()[0] for line in log if " task " in line] == ["eager", "a", "b", "late"]
    assert "a saw its future fail" in log
    assert "b saw its future fail" in log
    assert "late cancelled" in log  # the deadline reached the suspended coroutine
    # a and b overlap: b started before a finished
    b_started = next(i for i, line in enumerate(log) if line.startswith("b task "))
    assert b_started < log.index("a saw its future fail")
    assert took < 300  # late (600 s) was cut at its deadline, not awaited
    assert r.block("a").fetch_ms >= 50


def test_triggers_skip_sources():
    engine = ContextEngine(
        counter=HEURISTIC,
        sources=[Fixed("visa", "visa rules", Priority.P1)],
    )
    engine.sources[0].trigger = keywords(["签证", "visa"])
    assert engine.build_sync("hello", budget=500).report.block("visa").status == "skipped"
    assert (
        engine.build_sync("我的签证快到期了", budget=500).report.block("visa").status == "included"
    )


def test_cache_hits_and_invalidation():
    store = InMemoryMemoryStore()
    scope = Scope("t1", "u1")
    store.add(scope, "likes tea")
    engine = ContextEngine(counter=HEURISTIC, sources=[UserMemorySource(store=store)])
    first = engine.build_sync("hi", budget=500, tenant="t1", user="u1")
    assert not first.report.block("user_memory").cached
    store.add(scope, "now prefers coffee", importance=99)
    second = engine.build_sync("hi", budget=500, tenant="t1", user="u1")
    assert second.report.block("user_memory").cached
    assert "coffee" not in "".join(m.text for m in second.messages)
    assert engine.invalidate("user_memory:t1/u1") == 1
    third = engine.build_sync("hi", budget=500, tenant="t1", user="u1")
    assert "coffee" in "".join(m.text for m in third.messages)
    assert third.report.cache_misses == 1


def test_no_cross_tenant_leak_through_cache():
    store = InMemoryMemoryStore()
    store.add(Scope("acme", "alice"), "alice's secret project is Falcon")
    engine = ContextEngine(counter=HEURISTIC, sources=[UserMemorySource(store=store)])
    a = engine.build_sync("project?", budget=500, tenant="acme", user="alice", conversation="c")
    b = engine.build_sync("project?", budget=500, tenant="other", user="bob", conversation="c")
    assert "Falcon" in "".join(m.text for m in a.messages)
    assert "Falcon" not in "".join(m.text for m in b.messages)


def test_no_cross_tenant_leak_through_cache_with_separators_in_ids():
    # Namespaces joined with "/" made tenant "t", user "u", conversation "u/z" share one
    # with tenant "t/u", user "u", conversation "z": the first was served the second's
    # cached memory block. Tags joined the same way dropped each other's entries.
    store = InMemoryMemoryStore()
    store.add(Scope("t/u", "u"), "the vault code is 7731")
    engine = ContextEngine(counter=HEURISTIC, sources=[UserMemorySource(store=store)])
    owner = engine.build_sync("code?", budget=500, tenant="t/u", user="u", conversation="z")
    assert "7731" in "".join(m.text for m in owner.messages)
    other = engine.build_sync("code?", budget=500, tenant="t", user="u", conversation="u/z")
    assert not other.report.block("user_memory").cached
    assert "7731" not in "".join(m.text for m in other.messages)
    # each user's tag drops its own block only
    engine.build_sync("code?", budget=500, tenant="t", user="u/u", conversation="z")
    assert engine.invalidate(user_memory_tag("t", "u/u")) == 1
    assert engine.invalidate(user_memory_tag("t/u", "u")) == 1
    # the tag `invalidate_user_memory` drops is the one the source caches under
    engine.build_sync("code?", budget=500, tenant="t/u", user="u", conversation="z")
    invalidate_user_memory(engine)(Scope("t/u", "u"))
    again = engine.build_sync("code?", budget=500, tenant="t/u", user="u", conversation="z")
    assert not again.report.block("user_memory").cached


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda e: e.build_sync("", budget=100), InvalidMessageError),
        (lambda e: e.build_sync(Message.assistant("x"), budget=100), InvalidMessageError),
        (lambda e: e.build_sync(42, budget=100), InvalidMessageError),
        (lambda e: e.build_sync("hi", history="abc", budget=100), InvalidMessageError),
        (lambda e: e.build_sync("hi", history=[{"role": "user"}], budget=100), InvalidMessageError),
        (lambda e: e.build_sync("hi", budget=0), ConfigError),
        (lambda e: e.build_sync("hi", budget="big"), ConfigError),
        (lambda e: e.build_sync("hi"), ConfigError),
    ],
)
def test_bad_input_to_build(call, error):
    with pytest.raises(error):
        call(ContextEngine(counter=HEURISTIC))


def test_bad_engine_config():
    with pytest.raises(ConfigError):
        ContextEngine(sources=[object()])  # type: ignore[list-item]
    with pytest.raises(ConfigError):
        ContextEngine(sources=[Fixed("a", "x", 1), Fixed("a", "y", 1)])
    with pytest.raises(ConfigError):
        ContextEngine(max_message_tokens=3)


async def test_build_sync_refuses_inside_a_loop():
    engine = ContextEngine(counter=HEURISTIC)
    with pytest.raises(UserError, match=r"await engine\.build"):
        engine.build_sync("hi", budget=200)
    built = await engine.build("hi", budget=200)
    assert built.messages[-2].text == "hi"


def test_state_driven_sources_in_chinese():
    state = ConversationState.from_dict(
        {
            "collected_info": {"age": 35, "education": "本科"},
            "assessment": {
                "recommended": ["高才通B类"],
                "score": 75,
                "highlights": ["名校"],
                "concerns": [],
            },
            "stage": "assessment",
            "device": {
                "device_type": "mobile (iPhone)",
                "timezone": "UTC+8",
                "utc_offset_minutes": 480,
            },
        }
    )
    engine = ContextEngine(
        counter=HEURISTIC,
        sources=consultation_sources(core_fields=["age", "education", "annualIncome"]),
        locale="zh",
    )
    built = engine.build_sync("我该申请哪个?", budget=3000, state=state)
    text = "\n".join(m.text for m in built.messages)
    assert "年龄: 35" in text
    assert "尚未收集: 年收入" in text
    assert "推荐方案: 高才通B类" in text
    assert "设备类型: mobile (iPhone)" in text
    assert "用户当前目标" in text


def test_task_status_rides_with_the_goal_and_a_broken_hook_is_reported():
    engine = ContextEngine(
        counter=HEURISTIC, task_status=lambda turn: f"Task status: ACTIVE\nGoal: {turn.query}"
    )
    built = engine.build_sync("find the cheapest flight", budget=1000)
    assert "Task status: ACTIVE" in built.messages[-1].text

    def broken(turn):
        raise RuntimeError("tracker down")

    engine = ContextEngine(counter=HEURISTIC, task_status=broken)
    built = engine.build_sync("hi", budget=1000)
    assert any("tracker down" in w for w in built.report.warnings)
    assert built.messages[-1].text.startswith("<current_goal>")


def test_two_users_sharing_a_conversation_id_never_share_cached_blocks():
    class PerUser(SourceBase):
        async def fetch(self, turn, allowance):
            return Block("profile", f"secret of {turn.user}", Priority.P1)

    engine = ContextEngine(counter=HEURISTIC, sources=[PerUser(name="profile", ttl=60)])
    a = engine.build_sync("hi", budget=500, user="alice")  # both in conversation "default"
    b = engine.build_sync("hi", budget=500, user="bob")
    assert "secret of alice" in a.messages[-3].text
    assert "secret of bob" in b.messages[-3].text
    assert "alice" not in "".join(m.text for m in b.messages)
