"""The built-in sources and the triggers, in English and Chinese."""

from __future__ import annotations

import pytest

from contextwright import (
    ConfigError,
    ContextEngine,
    HeuristicCounter,
    InMemoryKnowledgeStore,
    InMemoryMemoryStore,
    InvalidMessageError,
    Memory,
    Message,
    Scope,
    ToolCallPart,
)
from contextwright.sources import (
    AgentHistorySource,
    AssessmentSource,
    CollectedInfoSource,
    ConversationState,
    ConversationStatsSource,
    DeviceContextSource,
    RelevantKnowledgeSource,
    SimilarExperiencesSource,
    Source,
    Turn,
    UserMemorySource,
    all_of,
    any_of,
    consultation_sources,
    consultation_templates,
    default_sources,
    every_n_turns,
    first_turn,
    keywords,
    predicate,
    regex,
    stage,
)

NOW = 1_700_000_000.0


def turn(text="hello", history=(), locale="en", **state):
    return Turn(
        Message.user(text), tuple(history), "t", "u", "c",
        ConversationState.from_dict(state) if state else ConversationState(), NOW, locale,
    )  # fmt: skip


def test_all_builtins_satisfy_the_protocol():
    sources = consultation_sources()
    assert [s.name for s in sources] == [
        "user_memory", "collected_info", "conversation_stats", "assessment_result",
        "relevant_knowledge", "similar_experiences", "device_context", "active_agents_history",
    ]  # fmt: skip
    assert all(isinstance(s, Source) for s in sources)
    assert [int(s.priority) for s in sources] == [0, 0, 1, 0, 1, 2, 2, 1]  # P0/P1/P2
    assert [s.ttl for s in sources] == [60, 0, 0, 0, 30, 120, 0, 0]


def test_default_sources_add_only_what_was_given():
    assert default_sources() == []
    memory, knowledge = InMemoryMemoryStore(), InMemoryKnowledgeStore()
    assert [s.name for s in default_sources(memory=memory)] == ["user_memory"]
    both = default_sources(memory=memory, knowledge=knowledge, knowledge_gate=["visa"])
    assert [s.name for s in both] == ["user_memory", "relevant_knowledge"]
    assert both[1].trigger is not None
    assert both[1].trigger(turn("a visa question"))
    assert not both[1].trigger(turn("hello"))
    swapped = default_sources(memory=memory, trigger_overrides={"user_memory": first_turn()})
    assert swapped[0].trigger is not None


def test_the_default_engine_adds_no_consultation_content():
    """A build with the general sources holds the conversation and the goal, nothing else."""
    history = [
        Message.user("hi", created_at=NOW - 600),
        Message.assistant("", tool_calls=[ToolCallPart("c1", "search", '{"q": "x"}')]),
        Message.tool("c1", "found x"),
        Message.assistant("x it is"),
    ]
    state = ConversationState.from_dict({"device": {"device_type": "mobile", "timezone": "UTC"}})
    engine = ContextEngine(counter=HeuristicCounter(), sources=default_sources())
    built = engine.build_sync("ok?", history=history, budget=2000, state=state)
    text = "\n".join(m.text for m in built.messages)
    assert 'User\'s current goal: "ok?"' in built.messages[-1].text
    for consultation in (
        "statistics",
        "Guide:",
        "Status:",
        "Device",
        "Agents and tools",
        "prompting",
    ):
        assert consultation not in text, consultation
    assert [b.name for b in built.report.blocks if b.status == "included"] == [
        "history", "current_message", "current_goal"
    ]  # fmt: skip


def test_the_consultation_preset_is_opt_in():
    state = ConversationState.from_dict({"device": {"device_type": "mobile", "timezone": "UTC"}})
    engine = ContextEngine(
        counter=HeuristicCounter(),
        sources=consultation_sources(),
        templates=consultation_templates("en"),
    )
    built = engine.build_sync("ok?", budget=2000, state=state)
    text = "\n".join(m.text for m in built.messages)
    assert "Conversation statistics:" in text
    assert "Device" in text
    assert "Guide:\n1." in built.messages[-1].text
    assert "指引" in consultation_templates("zh-CN")["goal.text"]


async def test_user_memory_top_and_relevant_deduplicated():
    store = InMemoryMemoryStore()
    scope = Scope("t", "u")
    store.add(scope, Memory("用户35岁,本科学历", "fact", 90))
    store.add(scope, Memory("likes green tea", "preference", 40))
    store.add(Scope("t", "someone-else"), Memory("secret", "fact", 100))
    block = await UserMemorySource(store=store, top_n=1).fetch(turn("any tea suggestions?"), 500)
    assert block.content.count("用户35岁") == 1
    assert "likes green tea" in block.content
    assert "secret" not in block.content
    assert block.priority == 0


async def test_collected_info_zh_labels_and_missing():
    src = CollectedInfoSource(core_fields=["age", "annualIncome"])
    block = await src.fetch(turn(locale="zh", collected_info={"age": 35}), 500)
    assert "年龄: 35" in block.content
    assert "尚未收集: 年收入" in block.content
    block_en = await src.fetch(turn(collected_info={"age": 35, "annualIncome": "1M"}), 500)
    assert "All core information has been collected." in block_en.content
    assert await src.fetch(turn(), 500) is None


async def test_stats_reply_style_and_stage_history():
    history = [Message.user("ok"), Message.assistant("sure"), Message.user("fine")]
    src = ConversationStatsSource(stage_names={"greeting": "开场破冰"})
    t = turn("yes", history, locale="zh", stage="greeting", stage_turns=1,
             stage_history=[{"stage": "greeting", "turns": 2}], started_at=NOW - 600)  # fmt: skip
    block = await src.fetch(t, 500)
    assert "总轮次: 3轮" in block.content
    assert "对话时长: 10分钟" in block.content
    assert "开场破冰(2轮)" in block.content
    assert "极简短" in block.content


async def test_assessment():
    t = turn(
        assessment={
            "recommended": ["TTPS B", "QMAS"],
            "score": 75,
            "highlights": ["degree"],
            "concerns": ["income"],
        }
    )
    block = await AssessmentSource().fetch(t, 500)
    assert "Recommended: TTPS B, QMAS" in block.content
    assert "Fit score: 75/100" in block.content
    assert await AssessmentSource().fetch(turn(), 500) is None


async def test_knowledge_gate_and_rendering():
    store = InMemoryKnowledgeStore()
    store.add("高才通B类要求三年工作经验", "高才通指南")
    src = RelevantKnowledgeSource(store=store, gate=["高才通"])
    assert src.trigger(turn("你好")) is None
    assert "高才通" in src.trigger(turn("高才通要求是什么"))
    block = await src.fetch(turn("高才通要求是什么", locale="zh"), 500)
    assert "来源:高才通指南 (相似度: 1.00)" in block.content
    assert "> 高才通B类要求三年工作经验" in block.content


async def test_experiences_stage_gate_and_active_flag():
    store = InMemoryKnowledgeStore()
    store.add("ask about concerns before pushing", "", "strategy", active=True)
    store.add("retired advice about concerns", "", "strategy", active=False)
    src = SimilarExperiencesSource(store=store, stages=["objection_handling"])
    assert src.trigger(turn("concerns", stage="greeting")) is None
    assert src.trigger(turn("concerns", stage="objection_handling"))
    block = await src.fetch(turn("I have concerns"), 500)
    assert "ask about concerns" in block.content
    assert "retired" not in block.content


async def test_device_every_five_turns_and_local_time():
    src = DeviceContextSource()
    history = []
    fired = []
    for _ in range(12):
        fired.append(bool(src.trigger(turn("x", history))))
        history += [Message.user("q"), Message.assistant("a")]
    assert [i + 1 for i, f in enumerate(fired) if f] == [1, 6, 11]
    block = await src.fetch(turn(device={"device_type": "iPhone", "utc_offset_minutes": 480}), 500)
    assert "Local time: 2023-11-15" in block.content
    assert "mobile device" in block.content


async def test_agent_history_derived_from_tool_calls_last_five():
    history = []
    for i in range(7):
        history.append(
            Message.assistant(
                "",
                tool_calls=[ToolCallPart(f"c{i}", f"tool{i}", '{"q": 1}')],
                created_at=NOW - 600 + i * 60,
            )
        )
        history.append(Message.tool(f"c{i}", "x" * 500, created_at=NOW - 600 + i * 60))
    block = await AgentHistorySource().fetch(turn("next", history), 500)
    lines = block.content.splitlines()
    assert "tool0" not in block.content
    assert "tool1" not in block.content
    assert "tool6" in block.content
    assert any("4 min ago" in line for line in lines)
    assert all(len(line) < 260 for line in lines)  # outputs clipped to 200 characters


def test_triggers():
    t = turn("Is my VISA still valid?", stage="renewal")
    assert keywords(["visa"])(t) == "keyword 'visa'"
    assert keywords(["visa"], case_sensitive=True)(t) is None
    assert regex(r"vis[ae]")(t)
    assert stage("renewal")(t)
    assert first_turn()(t) == "first turn"
    assert every_n_turns(3)(t) == "first turn"
    assert predicate(lambda t: "valid" in t.query, "mentions validity")(t) == "mentions validity"
    assert any_of(keywords(["nope"]), stage("renewal"))(t) == "stage 'renewal'"
    assert all_of(keywords(["visa"]), stage("other"))(t) is None
    for bad in (
        lambda: keywords([]),
        lambda: regex("("),
        lambda: stage(),
        lambda: every_n_turns(0),
    ):
        with pytest.raises(ConfigError):
            bad()


def test_state_from_dict_errors_name_the_key():
    with pytest.raises(InvalidMessageError, match=r"state\.colected_info"):
        ConversationState.from_dict({"colected_info": {}})
    with pytest.raises(InvalidMessageError, match=r"state\.agent_calls"):
        ConversationState.from_dict({"agent_calls": {}})
    with pytest.raises(InvalidMessageError):
        ConversationState.from_dict({"device": {"nonsense": 1}})


async def test_custom_templates_override():
    src = AssessmentSource(templates={"assessment.header": "ASSESSMENT:"})
    block = await src.fetch(turn(assessment={"score": 1}), 100)
    assert block.content.startswith("ASSESSMENT:")
