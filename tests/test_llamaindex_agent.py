"""LlamaIndex agents end to end with `ContextwrightMemory`: a ``FunctionAgent`` over 200
turns under a 2,000-token budget, its fake model calling a tool, and a ``ReActAgent``.

What the fake model received is measured with the engine's own counter: never over
the budget, never a tool call without its results (or the reverse), and the first
turn's fact comes back through recall when asked at the end.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from contextwright import ContextEngine, Conversations, count_messages, group_units
from contextwright.integrations.llamaindex import ContextwrightMemory, from_llamaindex

BUDGET = 2000
FACT = "My locker code is 4417."
FILLER = "please file this under groceries: milk, eggs, bread, apples, coffee and rice. "


def save_note(text: str) -> str:
    """Save a note for the user."""
    return f"saved note of {len(text)} characters"


def question(messages: Sequence[ChatMessage]) -> str:
    """The turn's user message: the newest one that is not a quoted context block."""
    for m in reversed(messages):
        if m.role == MessageRole.USER and not (m.content or "").startswith("<context>"):
            return m.content or ""
    return ""


class FakeModel:
    """Answers as a model would, and records every request it received."""

    def __init__(self) -> None:
        self.received: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kw: Any) -> ChatMessage:
        self.received.append(list(messages))
        spoken = [m for m in messages if m.role != MessageRole.SYSTEM]
        if spoken and spoken[-1].role == MessageRole.TOOL:
            return ChatMessage(role="assistant", content="Saved it.")
        text = question(messages)
        if text.startswith("Note"):
            call = ToolCallBlock(
                tool_call_id=f"call-{len(self.received)}", tool_name="save_note",
                tool_kwargs={"text": text},
            )  # fmt: skip
            return ChatMessage(role="assistant", blocks=[call])
        seen = " ".join(m.content or "" for m in messages)
        codes = re.findall(r"locker code is (\d+)", seen)
        return ChatMessage(role="assistant", content=f"Your locker code is {codes[0]}." if codes else "I don't know.")  # fmt: skip


def check_received(model: FakeModel, engine: ContextEngine) -> int:
    """The largest request by the engine's count; asserts budget and whole units."""
    largest = 0
    for request in model.received:
        messages = from_llamaindex(request)
        tokens = count_messages(engine.counter, messages, engine.overhead)
        assert tokens <= BUDGET, tokens
        assert all(u.ok for u in group_units(messages)), [u.kind for u in group_units(messages)]
        largest = max(largest, tokens)
    return largest


async def test_a_function_agent_over_200_turns_stays_in_budget_and_recalls(tmp_path: Path) -> None:
    engine = ContextEngine(system_prompt="You keep the user's notes.", budget=BUDGET)
    model = FakeModel()
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(save_note)],
        llm=MockFunctionCallingLLM(response_generator=model),
    )
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as convs:
        # reserve: the run's own tool call and result, which the agent keeps outside memory
        memory = ContextwrightMemory(
            conversations=convs, session_id="notes", user="u1", reserve=300
        )
        await agent.run(FACT, memory=memory)
        for i in range(198):
            await agent.run(f"Note {i}: " + FILLER, memory=memory)
        answer = await agent.run("What is my locker code?", memory=memory)

        assert str(answer) == "Your locker code is 4417."
        assert len(model.received) == 1 + 2 * 198 + 1  # every note: the call, then the answer
        largest = check_received(model, engine)
        assert largest > BUDGET * 0.7  # the budget was used, not sidestepped
        # the fact came back through recall: quoted in the turn's context block, while
        # the window holds only recent turns
        last = model.received[-1]
        context = [m.content or "" for m in last if (m.content or "").startswith("<context>")]
        assert context
        assert "4417" in context[0]
        assert not any((m.content or "") == FACT for m in last)
        report = memory.report
        assert report is not None
        recalled = [b for b in report.blocks if b.source == "recalled_turns"]
        assert recalled
        assert recalled[0].status == "included"
        stored = [m async for m in convs.messages("notes", user="u1")]
        assert len(stored) == 2 + 198 * 4 + 2  # nothing lost (a note: user, call, result, answer)
        assert stored[0].text == FACT


async def test_a_react_agent_uses_the_memory(tmp_path: Path) -> None:
    engine = ContextEngine(budget=BUDGET)
    received: list[list[ChatMessage]] = []

    def react(messages: Sequence[ChatMessage], **kw: Any) -> ChatMessage:
        received.append(list(messages))
        if "Observation:" in (messages[-1].content or ""):
            return ChatMessage(role="assistant", content="Thought: done.\nAnswer: Saved it.")
        text = question(messages).replace('"', "'")
        return ChatMessage(
            role="assistant",
            content=f'Thought: I should save this.\nAction: save_note\nAction Input: {{"text": "{text}"}}',
        )

    agent = ReActAgent(
        tools=[FunctionTool.from_defaults(save_note)],
        llm=MockFunctionCallingLLM(response_generator=react),
    )
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as convs:
        memory = ContextwrightMemory(conversations=convs, session_id="r", user="u1", reserve=800)
        for i in range(30):
            answer = await agent.run(f"Note {i}: " + FILLER, memory=memory)
            assert str(answer) == "Saved it."
        for request in received:
            # the ReAct prompt (tool descriptions, format) and the run's reasoning ride
            # on top of the memory's messages: the reserve covers them
            tokens = count_messages(engine.counter, from_llamaindex(request), engine.overhead)
            assert tokens <= BUDGET, tokens
        assert len([m async for m in convs.messages("r", user="u1")]) == 60  # question, reasoning


@pytest.mark.parametrize("reserve", [0])
async def test_without_a_reserve_the_run_can_overflow(tmp_path: Path, reserve: int) -> None:
    """Why ``reserve`` exists: the agent appends the run's tool call and result to
    what the memory returned, so a memory filled to the budget leaves no room."""
    engine = ContextEngine(budget=600)
    model = FakeModel()
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(save_note)],
        llm=MockFunctionCallingLLM(response_generator=model),
    )
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as convs:
        memory = ContextwrightMemory(
            conversations=convs, session_id="o", user="u1", reserve=reserve
        )
        for i in range(12):
            await agent.run(f"Note {i}: " + FILLER * 2, memory=memory)
        sizes = [
            count_messages(engine.counter, from_llamaindex(r), engine.overhead)
            for r in model.received
        ]
        assert max(sizes) > 600
