"""The OpenAI Agents SDK integration: item conversion both ways (property-tested), the
session protocol over a real SQLite store, the missing extra, and the example (run as a
script). The SDK's own agent loop against a loopback server: test_openai_agents_run.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextwright import (
    ConfigError,
    ContextEngine,
    Conversations,
    ImagePart,
    InvalidMessageError,
    Message,
    MissingDependencyError,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UserError,
    count_messages,
)
from contextwright.adapters import from_responses
from contextwright.integrations.openai_agents import ContextwrightSession, from_agents, to_agents

from .conftest import TEXT, conversations

ROOT = Path(__file__).resolve().parents[1]


def shape(m: Message) -> tuple[Any, ...]:
    """What a conversion keeps: role and parts (arguments parsed; a result's call and content)."""
    parts: list[Any] = []
    for p in m.parts:
        if isinstance(p, ToolCallPart):
            parts.append((p.id, p.name, p.input))
        elif isinstance(p, ToolResultPart):
            parts.append((p.call_id, p.content))
        else:
            parts.append(p)
    return (m.role, tuple(parts))


def merged(messages: list[Message]) -> list[Message]:
    """The one thing the Responses format cannot keep apart: an assistant turn and the
    tool calls right after it (``function_call`` items carry no message boundary)."""
    out: list[Message] = []
    for m in messages:
        if (
            out
            and m.role == "assistant"
            and out[-1].role == "assistant"
            and m.parts
            and all(isinstance(p, ToolCallPart) for p in m.parts)
        ):
            out[-1] = out[-1].replace(parts=(*out[-1].parts, *m.parts))
        else:
            out.append(m)
    return out


@st.composite
def neutral(draw: st.DrawFn) -> list[Message]:
    out = draw(conversations())
    for kind in draw(st.lists(st.sampled_from(["system", "developer", "image"]), max_size=3)):
        at = draw(st.integers(0, len(out)))
        while at < len(out) and out[at].role == "tool":
            at += 1
        if kind == "system":
            m = Message.system(draw(TEXT))
        elif kind == "developer":
            m = Message.developer(draw(TEXT))
        else:
            image = ImagePart(url="https://example.com/a.png", detail="high")
            m = Message("user", (TextPart(draw(TEXT)), image))
        out.insert(at, m)
    return out


@given(neutral())
def test_messages_survive_a_round_trip_through_agents_items(messages: list[Message]) -> None:
    back = from_agents(to_agents(messages))
    assert [shape(m) for m in back] == [shape(m) for m in merged(messages)]


@st.composite
def sdk_items(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Items as the SDK stores them: easy input messages, output messages, calls, outputs."""
    items: list[dict[str, Any]] = []
    for n in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["user", "user_parts", "system", "assistant", "calls"]))
        if kind == "user":
            items.append({"role": "user", "content": draw(TEXT)})
        elif kind == "user_parts":
            parts = [
                {"type": "input_text", "text": t}
                for t in draw(st.lists(TEXT, min_size=2, max_size=3))
            ]
            items.append({"role": "user", "content": parts, "type": "message"})
        elif kind == "system":
            items.append(
                {"role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT)}
            )
        elif kind == "assistant":
            text = {"type": "output_text", "text": draw(TEXT), "annotations": [], "logprobs": []}
            items.append({
                "id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
                "content": [text],
            })  # fmt: skip
        else:
            calls = [f"call_{n}_{i}" for i in range(draw(st.integers(1, 3)))]
            for c in calls:
                items.append({
                    "type": "function_call", "id": f"fc_{c}", "call_id": c, "name": "search",
                    "arguments": json.dumps({"q": draw(TEXT)}), "status": "completed",
                })  # fmt: skip
            for c in calls:
                items.append({"type": "function_call_output", "call_id": c, "output": draw(TEXT)})
    return items


@given(sdk_items())
def test_sdk_items_survive_a_round_trip(items: list[dict[str, Any]]) -> None:
    messages = from_agents(items)
    again = to_agents(messages)
    assert [shape(m) for m in from_agents(again)] == [shape(m) for m in messages]
    assert to_agents(from_agents(again)) == again  # a fixed point after one pass

    # what the model needs is all there, in order: texts, calls with ids and arguments, outputs
    def essentials(xs: list[Any]) -> list[Any]:
        out: list[Any] = []
        for x in xs:
            if x.get("type") == "function_call":
                out.append((x["call_id"], x["name"], json.loads(x["arguments"])))
            elif x.get("type") == "function_call_output":
                out.append((x["call_id"], x["output"]))
            else:
                content = x["content"]
                texts = [content] if isinstance(content, str) else [p["text"] for p in content]
                out.append((x["role"], "\n".join(texts) if x["role"] == "assistant" else texts))
        return out

    assert essentials(list(again)) == essentials(items)


def test_reasoning_and_hosted_tools_are_kept_unknown_items_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAAB"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "x"}},
        {"type": "telepathy", "id": "tp_1"},
        {"role": "assistant", "content": "hello"},
    ]  # fmt: skip
    with caplog.at_level(logging.WARNING):
        got = from_agents(items)
    assert [m.text for m in got] == ["hi", "hello"]
    assert "telepathy" in caplog.text
    assert "reasoning" not in caplog.text
    # reasoning and the hosted call go back to the model as they came
    back = to_agents(got)
    assert back[1] == items[1]
    assert back[2] == items[2]
    with pytest.raises(InvalidMessageError) as info:
        from_agents(items, skip_unsupported=False)
    assert info.value.where == "input[3].type"
    with pytest.raises(InvalidMessageError) as info:
        from_agents([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}])
    assert info.value.where == "input[0].arguments"


def test_developer_messages_keep_their_role() -> None:
    items = to_agents([Message.system("s"), Message.developer("d"), Message.user("u")])
    assert [i["role"] for i in items] == ["system", "developer", "user"]  # type: ignore[typeddict-item]


# -- the session ----------------------------------------------------------------------------


@pytest.fixture
def convs(tmp_path: Path):
    engine = ContextEngine(system_prompt="You keep notes.", budget=600)
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as c:
        yield c


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(text: str) -> dict[str, Any]:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }  # fmt: skip


async def test_the_session_protocol(convs: Conversations) -> None:
    session = ContextwrightSession("s1", convs, user="u1")
    assert await session.get_items() == [{"role": "system", "content": "You keep notes."}]
    assert await session.pop_item() is None
    await session.add_items([user("My locker code is 4417.")])  # held: the build stores it
    assert [m async for m in convs.messages("s1", user="u1")] == []
    items = await session.get_items()
    assert items[1] == user("My locker code is 4417.")
    assert "current_goal" in items[-1]["content"]  # type: ignore[typeddict-item]
    assert session.report is not None
    await session.add_items([
        {"type": "function_call", "call_id": "c1", "name": "save", "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "saved"},
        said("Saved it."),
    ])  # fmt: skip
    got = await session.get_items()  # the conversation as it stands, items as they came
    assert got[1:] == [
        user("My locker code is 4417."),
        {"type": "function_call", "call_id": "c1", "name": "save", "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "saved"},
        said("Saved it."),
    ]
    # limit: the newest whole turns within that many items (a call stays with its output)
    assert await session.get_items(limit=2) == got[-1:]
    assert await session.get_items(limit=3) == got[-3:]
    assert await session.get_items(limit=0) == []
    with pytest.raises(UserError):
        await session.get_items(limit=-1)
    # pop: the newest item, then the one before; the rest stays as it was
    assert await session.pop_item() == said("Saved it.")
    assert await session.pop_item() == {"type": "function_call_output", "call_id": "c1", "output": "saved"}  # fmt: skip
    assert session.session.conversation_id() == "s1#2"
    assert [m async for m in convs.messages("s1", user="u1")] == []  # popped: the old copy deleted
    now = [m async for m in convs.messages("s1#2", user="u1")]
    assert [m.role for m in now] == ["user", "assistant"]  # the call, its output popped
    # a call without its output is never handed to the model
    assert (await session.get_items())[-1] == user("My locker code is 4417.")
    # clear: a new, empty conversation
    await session.clear_session()
    assert await session.get_items() == [{"role": "system", "content": "You keep notes."}]
    await session.add_items([user("again")])
    assert await session.pop_item() == user("again")  # a held message goes at once


async def test_a_popped_part_of_a_turn_leaves_the_rest(convs: Conversations) -> None:
    session = ContextwrightSession("s2", convs, user="u1")
    await session.add_items([
        user("Look up two things."),
        {"role": "assistant", "content": "On it."},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
    ])  # fmt: skip
    popped = await session.pop_item()
    assert popped == {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"}
    stored = [m async for m in convs.messages(session.session.conversation_id(), user="u1")]
    assert stored[-1].tool_calls == (ToolCallPart("a", "f", "{}"),)
    assert stored[-1].text == "On it."


async def test_get_items_keeps_the_reserve_free(convs: Conversations) -> None:
    session = ContextwrightSession("s3", convs, user="u1", reserve=250)
    engine = convs.engine
    for i in range(30):
        await session.add_items(
            [user(f"Note {i}: " + "call the caterer " * 6), said(f"Noted {i}.")]
        )
        items = await session.get_items()
        tokens = count_messages(engine.counter, from_responses(items), engine.overhead)  # type: ignore[arg-type]
        assert tokens <= 350
    assert len([m async for m in convs.messages("s3", user="u1")]) == 60


async def test_another_users_session_is_refused(convs: Conversations) -> None:
    await ContextwrightSession("s1", convs, user="u1").add_items([user("mine"), said("ok")])
    thief = ContextwrightSession("s1", convs, user="u2")
    for call in (
        thief.get_items(),
        thief.add_items([said("x")]),
        thief.pop_item(),
        thief.clear_session(),
    ):
        with pytest.raises(InvalidMessageError) as info:
            await call
        assert info.value.where == "user"


def test_settings_are_checked(convs: Conversations) -> None:
    with pytest.raises(ConfigError, match="budget"):
        ContextwrightSession("s", convs, budget=-5)
    with pytest.raises(ConfigError, match="conversations"):
        ContextwrightSession("s", "chat.db")  # type: ignore[arg-type]
    session = ContextwrightSession("s", convs)
    config = session.run_config(tracing_disabled=True)
    assert config.call_model_input_filter == session.model_input_filter
    assert config.tracing_disabled
    with pytest.raises(UserError):
        session.run_config(call_model_input_filter=None)


# -- packaging -----------------------------------------------------------------------------


def test_without_the_sdk_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "contextwright.integrations.openai_agents", raising=False)
    monkeypatch.setitem(sys.modules, "agents.memory", None)
    with pytest.raises(MissingDependencyError, match=r"contextwright\[agents\]"):
        import contextwright.integrations.openai_agents  # noqa: F401


def test_the_example_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "openai_agents_session.py")],
        capture_output=True, text=True, env=env, timeout=90, check=True,
    )  # fmt: skip
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["answer"] == "Your locker code is 4417."
    assert report["max_tokens_sent"] <= report["budget"]
