"""The LlamaIndex integration: message conversion both ways (property-tested), the memory's
put/get/reset semantics over a real SQLite store, the long-term memory block, the
missing extra, and the example (run as a script)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core.base.llms.types import (
    AudioBlock,
    CacheControl,
    CachePoint,
    ChatMessage,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.memory import Memory as LlamaMemory

from contextwright import (
    ConfigError,
    ContextEngine,
    Conversations,
    InMemoryMemoryStore,
    InvalidMessageError,
    Message,
    MissingDependencyError,
    Scope,
    TextPart,
    ToolCallPart,
    UserError,
    count_messages,
)
from contextwright.integrations.llamaindex import (
    ContextwrightMemory,
    ContextwrightMemoryBlock,
    chat_from_message,
    from_llamaindex,
    message_from_chat,
    to_llamaindex,
)
from contextwright.model._native import ThinkingPart

from .conftest import TEXT, conversations

ROOT = Path(__file__).resolve().parents[1]


def shape(m: Message) -> tuple[Any, ...]:
    """What a conversion must keep: the role and the parts (tool arguments parsed)."""
    parts = tuple((p.id, p.name, p.input) if isinstance(p, ToolCallPart) else p for p in m.parts)
    return (m.role, parts)


@st.composite
def neutral(draw: st.DrawFn) -> list[Message]:
    """Conversations (conftest) with system, developer and image-bearing user messages."""
    out = draw(conversations())
    extra = draw(st.lists(st.sampled_from(["system", "developer", "image", "data"]), max_size=3))
    from contextwright import ImagePart

    for kind in extra:
        at = draw(st.integers(0, len(out)))
        while at < len(out) and out[at].role == "tool":
            at += 1  # never between a call and its results
        if kind == "system":
            m = Message.system(draw(TEXT))
        elif kind == "developer":
            m = Message.developer(draw(TEXT))
        elif kind == "image":
            m = Message(
                "user",
                (TextPart(draw(TEXT)), ImagePart(url="https://example.com/a.png", detail="low")),
            )
        else:
            m = Message("user", (ImagePart(data="aGVsbG8=", media_type="image/png"),))
        out.insert(at, m)
    return out


@given(neutral())
def test_messages_survive_a_round_trip_through_llamaindex(messages: list[Message]) -> None:
    back = from_llamaindex(to_llamaindex(messages))
    assert [shape(m) for m in back] == [shape(m) for m in messages]


ROLES = ["user", "assistant", "system", "developer", "tool"]
KWARGS = st.dictionaries(
    st.sampled_from(["name", "session_id", "x-trace"]), st.one_of(TEXT, st.integers()), max_size=2
)


@st.composite
def chats(draw: st.DrawFn) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for n in range(draw(st.integers(0, 8))):
        role = draw(st.sampled_from(ROLES))
        kwargs = draw(KWARGS)
        texts = [TextBlock(text=t) for t in draw(st.lists(TEXT, min_size=1, max_size=2))]
        if role == "assistant":
            calls = [
                ToolCallBlock(
                    tool_call_id=f"c{n}-{i}", tool_name="search", tool_kwargs={"q": draw(TEXT)}
                )
                for i in range(draw(st.integers(0, 2)))
            ]
            blocks: list[Any] = draw(st.sampled_from([texts, texts[:1] + calls, calls or texts]))
        elif role == "tool":
            kwargs = {**kwargs, "tool_call_id": f"c{n}"}
            blocks = texts
        else:
            blocks = texts
        out.append(ChatMessage(role=role, blocks=blocks, additional_kwargs=kwargs))
    return out


def dump(chat: ChatMessage) -> tuple[Any, ...]:
    return (chat.role, [b.model_dump() for b in chat.blocks], chat.additional_kwargs)


@given(chats())
def test_chat_messages_survive_a_round_trip(messages: list[ChatMessage]) -> None:
    back = to_llamaindex(from_llamaindex(messages))
    assert [dump(c) for c in back] == [dump(c) for c in messages]


def test_the_conversion_conventions(tmp_path: Path) -> None:
    # the older OpenAI-shaped tool calls are read; string arguments too
    legacy = ChatMessage(
        role="assistant",
        content="",
        additional_kwargs={
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
            ]
        },
    )
    m = message_from_chat(legacy)
    assert m.tool_calls == (ToolCallPart("c1", "f", '{"a": 1}'),)
    back = chat_from_message(m)[0]  # written back in the form it came in, not twice
    assert back.additional_kwargs == legacy.additional_kwargs
    assert back.blocks == [TextBlock(text="")]
    # a tool message with several results becomes one ChatMessage each
    both = Message("tool", (*Message.tool("a", "1").parts, *Message.tool("b", "2").parts))
    out = chat_from_message(both)
    assert [c.additional_kwargs["tool_call_id"] for c in out] == ["a", "b"]
    # roles LlamaIndex has and contextwright does not
    assert (
        message_from_chat(ChatMessage(role=MessageRole.CHATBOT, content="hi")).role == "assistant"
    )
    fn = ChatMessage(
        role=MessageRole.FUNCTION, content="42", additional_kwargs={"tool_call_id": "c1"}
    )
    assert message_from_chat(fn).tool_results[0].content == "42"
    # the model's thinking is a part (tests/test_llamaindex_thinking.py); cache points are
    # provider hints, not conversation; non-JSON kwargs are not kept
    thought = ChatMessage(
        role="assistant",
        blocks=[
            ThinkingBlock(content="hmm"),
            CachePoint(cache_control=CacheControl(type="ephemeral")),
            TextBlock(text="ok"),
        ],
        additional_kwargs={"raw": object()},
    )
    assert shape(message_from_chat(thought)) == ("assistant", (ThinkingPart("hmm"), TextPart("ok")))
    assert to_llamaindex([message_from_chat(thought)])[0].additional_kwargs == {}
    # an image given by path is read into data
    # (a one-pixel PNG)
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6300010000050001"
        "0d0a2db40000000049454e44ae426082"
    )
    tmp = tmp_path / "pixel.png"
    tmp.write_bytes(png)
    img = message_from_chat(ChatMessage(role="user", blocks=[ImageBlock(path=tmp)])).parts[0]
    assert img.data
    assert img.media_type == "image/png"


@pytest.mark.parametrize(
    ("chat", "where"),
    [
        (ChatMessage(role="tool", content="x"), "message.additional_kwargs.tool_call_id"),
        (
            ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_name="f", tool_kwargs={})]),
            "message.blocks[0].tool_call_id",
        ),
        (
            ChatMessage(
                role="assistant",
                blocks=[ToolCallBlock(tool_call_id="c", tool_name="f", tool_kwargs="[1]")],
            ),
            "message.blocks[0].tool_kwargs",
        ),
        (ChatMessage(role="user", blocks=[AudioBlock(audio=b"abc")]), "message.blocks[0]"),
        (
            ChatMessage(role="user", blocks=[ToolCallBlock(tool_call_id="c", tool_name="f")]),
            "message.parts[0]",
        ),
    ],
)
def test_bad_messages_are_refused_naming_where(chat: ChatMessage, where: str) -> None:
    with pytest.raises(InvalidMessageError) as info:
        message_from_chat(chat)
    assert info.value.where == where


# -- the memory ----------------------------------------------------------------------------


@pytest.fixture
def convs(tmp_path: Path):
    engine = ContextEngine(system_prompt="You keep notes.", budget=600)
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as c:
        yield c


def texts(chats: list[ChatMessage]) -> list[str]:
    return [c.content or "" for c in chats]


async def test_get_builds_for_the_put_message_and_stores_it_then(convs: Conversations) -> None:
    memory = ContextwrightMemory(conversations=convs, session_id="s1", user="u1")
    await memory.aput(ChatMessage(role="user", content="My locker code is 4417."))
    assert await memory.aget_all() == [ChatMessage(role="user", content="My locker code is 4417.")]
    assert [m async for m in convs.messages("s1", user="u1")] == []  # held until the build
    got = await memory.aget()
    assert texts(got)[:2] == ["You keep notes.", "My locker code is 4417."]
    assert "current_goal" in texts(got)[-1]  # the goal restated, as in any build
    assert memory.report is not None
    assert memory.report.budget == 600
    assert [m.text async for m in convs.messages("s1", user="u1")] == ["My locker code is 4417."]
    # asked again with nothing new (an agent after its tool ran): the same context
    assert await memory.aget(input="My locker code is 4417.") == got
    # the run's calls, results and answer are stored in one write
    await memory.aput_messages(
        [
            ChatMessage(
                role="assistant",
                blocks=[ToolCallBlock(tool_call_id="c1", tool_name="save", tool_kwargs={"x": 1})],
            ),
            ChatMessage(role="tool", content="saved", additional_kwargs={"tool_call_id": "c1"}),
        ]
    )
    step = await memory.aget()  # ends with a tool result: the agent's next step
    assert [c.role for c in step][-3:-1] == [MessageRole.ASSISTANT, MessageRole.TOOL]
    await memory.aput(ChatMessage(role="assistant", content="Saved it."))
    view = await memory.aget()  # nothing to build for: the conversation as it stands
    assert texts(view) == ["You keep notes.", "My locker code is 4417.", "", "saved", "Saved it."]
    assert len(await memory.aget_all()) == 4


async def test_get_stays_within_the_budget_less_the_reserve(convs: Conversations) -> None:
    memory = ContextwrightMemory(conversations=convs, session_id="s1", user="u1", reserve=200)
    engine = convs.engine
    for i in range(40):
        await memory.aput(ChatMessage(role="user", content=f"Note {i}: " + "call the caterer " * 8))
        got = await memory.aget()
        assert count_messages(engine.counter, from_llamaindex(got), engine.overhead) <= 400
        await memory.aput(ChatMessage(role="assistant", content=f"Noted {i}."))
        view = await memory.aget()
        assert count_messages(engine.counter, from_llamaindex(view), engine.overhead) <= 400
    assert len(await memory.aget_all()) == 80  # nothing stored is lost


async def test_reset_and_set_start_a_new_conversation_deleting_the_old(
    convs: Conversations,
) -> None:
    memory = ContextwrightMemory(conversations=convs, session_id="s1", user="u1")
    await memory.aput_messages(
        [ChatMessage(role="user", content="one"), ChatMessage(role="assistant", content="two")]
    )
    await memory.areset()
    assert await memory.aget_all() == []
    assert memory.session.conversation_id() == "s1#1"
    assert [m async for m in convs.messages("s1", user="u1")] == []  # deleted, not hidden
    assert not await convs.backend.search.search("s1", "one", tenant="default")
    await memory.aset(
        [ChatMessage(role="user", content="three"), ChatMessage(role="assistant", content="ok")]
    )
    assert texts(await memory.aget_all()) == ["three", "ok"]
    assert memory.session.conversation_id() == "s1#1"  # it was empty: no need for another
    # another memory (another process) on the same session sees a reset made here
    other = ContextwrightMemory(conversations=convs, session_id="s1", user="u1")
    assert texts(await other.aget_all()) == ["three", "ok"]
    await memory.areset()
    await other.aput(ChatMessage(role="assistant", content="four"))
    assert other.session.conversation_id() == "s1#2"
    assert texts(await memory.aget_all()) == ["four"]
    # a reset of a memory with nothing stored changes nothing
    empty = ContextwrightMemory(conversations=convs, session_id="s9", user="u1")
    await empty.areset()
    assert empty.session.conversation_id() == "s9"
    # a conversation of another user named like a generation is not taken for one
    await ContextwrightMemory(conversations=convs, session_id="s9#1", user="u2").aput_messages(
        [ChatMessage(role="user", content="not yours"), ChatMessage(role="assistant", content="no")]
    )
    await empty.aput_messages(
        [ChatMessage(role="user", content="hi"), ChatMessage(role="assistant", content="yo")]
    )
    assert texts(await empty.aget_all()) == ["hi", "yo"]
    with pytest.raises(InvalidMessageError):
        await empty.areset()  # its next generation's name is taken by another user
    assert texts(await empty.aget_all()) == ["hi", "yo"]


def test_the_sync_api_and_its_refusal_inside_a_loop(convs: Conversations) -> None:
    memory = ContextwrightMemory(conversations=convs, session_id="s1", user="u1")
    memory.put(ChatMessage(role="user", content="hello"))
    assert texts(memory.get())[1] == "hello"
    memory.put_messages([ChatMessage(role="assistant", content="hi")])
    assert texts(memory.get_all()) == ["hello", "hi"]
    memory.set([ChatMessage(role="user", content="again")])
    memory.reset()
    assert memory.get_all() == []

    async def inside() -> None:
        memory.get()

    with pytest.raises(UserError, match="async"):
        asyncio.run(inside())


async def test_another_users_conversation_is_refused(convs: Conversations) -> None:
    owner = ContextwrightMemory(conversations=convs, session_id="s1", user="u1")
    await owner.aput_messages(
        [ChatMessage(role="user", content="mine"), ChatMessage(role="assistant", content="ok")]
    )
    thief = ContextwrightMemory(conversations=convs, session_id="s1", user="u2")
    for call in (
        thief.aget(),
        thief.aget_all(),
        thief.aput(ChatMessage(role="assistant", content="x")),
        thief.areset(),
    ):
        with pytest.raises(InvalidMessageError) as info:
            await call
        assert info.value.where == "user"
    assert texts(await owner.aget_all()) == ["mine", "ok"]


def test_from_defaults_and_bad_settings(convs: Conversations) -> None:
    memory = ContextwrightMemory.from_defaults(
        chat_history=[ChatMessage(role="user", content="hi")]
    )
    assert texts(memory.get_all()) == ["hi"]
    assert memory.conversations.engine.budget is not None
    memory.conversations.close()
    with pytest.raises(ConfigError, match="reserve"):
        ContextwrightMemory(conversations=convs, session_id="s", reserve=-1)
    with pytest.raises(ConfigError, match="session_id"):
        ContextwrightMemory(conversations=convs, session_id="")
    tight = ContextwrightMemory(conversations=convs, session_id="s", reserve=600)
    with pytest.raises(ConfigError, match="leaves nothing"):
        tight.get()


async def test_the_memory_block_reads_long_term_memory_into_llamaindex_memory() -> None:
    store = InMemoryMemoryStore()
    scope = Scope("default", "u1")
    store.add(scope, "The user's locker code is 4417.", category="fact", importance=90)
    store.add(scope, "Prefers </memory> tags <b>bold</b>", category="preference", importance=10)
    store.add(Scope("default", "u2"), "Someone else's secret", importance=99)
    block = ContextwrightMemoryBlock(store=store, scope=scope, top_n=1, search_n=3)
    memory = LlamaMemory.from_defaults(session_id="x", memory_blocks=[block], token_limit=4000)
    await memory.aput(ChatMessage(role="user", content="Which tags do I prefer?"))
    got = await memory.aget()
    system = got[0].content or ""
    assert "4417" in system
    assert "&lt;/memory>" in system
    assert system.count("</memory>") == 1  # the template's own: the memory's is escaped
    assert "secret" not in system
    assert system.count("<contextwright_memory>") == 1


# -- packaging -----------------------------------------------------------------------------


def test_without_llama_index_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name.startswith("contextwright.integrations.llamaindex"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "llama_index.core", None)
    with pytest.raises(MissingDependencyError, match=r"contextwright\[llamaindex\]"):
        import contextwright.integrations.llamaindex  # noqa: F401


def test_importing_contextwright_imports_no_framework() -> None:
    code = (
        "import sys, contextwright, contextwright.integrations\n"
        "bad = [m for m in ('llama_index', 'agents', 'langchain') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_the_example_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "llamaindex_agent.py")],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["answer"] == "Your locker code is 4417."
    assert report["max_tokens_sent"] <= report["budget"]
