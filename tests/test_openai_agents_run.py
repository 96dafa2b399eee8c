"""The OpenAI Agents SDK's own agent loop with `ContextwrightSession`, against a real
loopback HTTP server speaking the Responses API (``POST /responses``), tracing off.

The fake model calls a tool to save notes and answers from what it was sent; the
server keeps every request body, and what it received is measured with the engine's
own counter: a 200-turn run under a 2,000-token budget never goes over (the agent's
instructions included), never sends a call without its output or the reverse, and
the first turn's fact comes back through recall at the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI

from contextwright import (
    ContextEngine,
    Conversations,
    Message,
    UserError,
    count_messages,
    group_units,
)
from contextwright.adapters import from_responses, validate_responses
from contextwright.integrations.openai_agents import ContextwrightSession

from .loopback import LoopbackServer, serving

BUDGET = 2000
FACT = "My locker code is 4417."
FILLER = " ".join(
    ["please file this under groceries: milk, eggs, bread, apples, coffee and rice."] * 3
)


def response(n: int, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A complete ``response`` object as the Responses API returns it."""
    return {
        "id": f"resp_{n}", "object": "response", "created_at": 1_700_000_000, "model": "gpt-4o",
        "status": "completed", "output": output, "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }  # fmt: skip


def say(n: int, text: str) -> dict[str, Any]:
    return response(n, [{
        "type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }])  # fmt: skip


def spoken(item: dict[str, Any]) -> bool:
    """Not a system message and not the quoted context block: what a model answers to."""
    content = item.get("content")
    return item.get("role") != "system" and not (
        isinstance(content, str) and content.startswith("<context>")
    )


def respond(server: LoopbackServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    n = len(server.requests)
    items = body["input"]
    last = [i for i in items if spoken(i)][-1]
    if last.get("type") == "function_call_output":
        return 200, say(n, "Saved it.")
    asked = last["content"]
    if asked.startswith("Note"):
        call = {
            "type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "save_note",
            "arguments": json.dumps({"text": asked}), "status": "completed",
        }  # fmt: skip
        return 200, response(n, [call])
    found = re.findall(r"locker code is (\d+)", json.dumps(items))
    return 200, say(n, f"Your locker code is {found[0]}." if found else "Noted.")


@function_tool
def save_note(text: str) -> str:
    """Save a note for the user."""
    return f"saved note of {len(text)} characters"


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with serving(LoopbackServer(respond)) as s:
        yield s


def agent_for(server: LoopbackServer) -> Agent[Any]:
    client = AsyncOpenAI(base_url=server.url, api_key="test-key", max_retries=0)
    return Agent(
        name="notes", instructions="You keep the user's notes.", tools=[save_note],
        model=OpenAIResponsesModel(model="gpt-4o", openai_client=client),
    )  # fmt: skip


def received(server: LoopbackServer, engine: ContextEngine) -> list[int]:
    """Tokens of every request the server got (instructions and input), checked whole."""
    sizes = []
    for request in server.requests:
        body = request["body"]
        validate_responses(body["input"])  # no orphaned call or output, as the API checks
        messages = from_responses(body["input"])
        assert all(u.ok for u in group_units(messages))
        if body.get("instructions"):
            messages.insert(0, Message.system(body["instructions"]))
        sizes.append(count_messages(engine.counter, messages, engine.overhead))
    return sizes


async def test_200_turns_stay_in_budget_and_the_first_fact_is_recalled(
    server: LoopbackServer, tmp_path: Path
) -> None:
    engine = ContextEngine(budget=BUDGET)
    agent = agent_for(server)
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as convs:
        session = ContextwrightSession("notes", convs, user="u1")
        config = session.run_config(tracing_disabled=True)
        await Runner.run(agent, FACT, session=session, run_config=config)
        for i in range(198):
            # every other turn calls the tool (its call, output and answer); the rest chat
            text = f"Note {i}: {FILLER}" if i % 2 == 0 else f"Thanks for note {i - 1}, {FILLER}"
            await Runner.run(agent, text, session=session, run_config=config)
        result = await Runner.run(
            agent, "What is my locker code?", session=session, run_config=config
        )

        assert result.final_output == "Your locker code is 4417."
        assert len(server.requests) == 1 + 99 * 2 + 99 + 1
        sizes = received(server, engine)
        assert max(sizes) <= BUDGET
        assert max(sizes) > BUDGET * 0.7  # the budget was used, not sidestepped
        last = server.requests[-1]["body"]["input"]
        context = [i["content"] for i in last if not spoken(i) and i.get("role") == "user"]
        assert context
        assert "4417" in context[0]  # quoted from recall...
        assert {"role": "user", "content": FACT} not in last  # ...not in the window
        report = session.report
        assert report is not None
        assert any(b.source == "recalled_turns" and b.status == "included" for b in report.blocks)
        stored = [m async for m in convs.messages("notes", user="u1")]
        assert len(stored) == 2 + 99 * 4 + 99 * 2 + 2  # nothing lost
        assert stored[0].text == FACT


async def test_without_the_filter_get_items_leaves_the_reserve(
    server: LoopbackServer, tmp_path: Path
) -> None:
    engine = ContextEngine(budget=BUDGET)
    agent = agent_for(server)
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as convs:
        # the SDK appends the new input and the run's items to get_items(): reserve them
        session = ContextwrightSession("plain", convs, user="u1", reserve=500)
        config = RunConfig(tracing_disabled=True)
        for i in range(20):
            await Runner.run(agent, f"Note {i}: {FILLER}", session=session, run_config=config)
        sizes = received(server, engine)
        assert max(sizes) <= BUDGET
        assert max(sizes) > BUDGET * 0.7
        assert len([m async for m in convs.messages("plain", user="u1")]) == 20 * 4


async def test_the_filter_refuses_a_run_the_session_does_not_store(
    server: LoopbackServer, tmp_path: Path
) -> None:
    engine = ContextEngine(budget=BUDGET)
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as convs:
        session = ContextwrightSession("s", convs, user="u1")
        config = session.run_config(tracing_disabled=True)
        with pytest.raises(UserError, match="not in the session"):
            await Runner.run(agent_for(server), "Note 1: hello", run_config=config)
        assert server.requests == []  # refused before anything was sent
