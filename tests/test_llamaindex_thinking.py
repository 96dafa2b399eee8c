"""A model's thinking through the LlamaIndex converter and memory: a `ThinkingPart`, sent back as it came.

llama-index-llms-anthropic keeps Claude's thinking as a ``ThinkingBlock`` with the
signature in ``additional_information``; other LLM classes (Ollama, Gemini) write
one without a signature. Each becomes a `ThinkingPart` the engine counts, and
comes back the same block (content, ``num_tokens`` and ``additional_information``
unchanged, in its place), also in what the memory hands the agent's model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core.base.llms.types import (
    ChatMessage,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)

from contextwright import ContextEngine, Conversations, InvalidMessageError, Message, TextPart
from contextwright.integrations.llamaindex import (
    ContextwrightMemory,
    chat_from_message,
    from_llamaindex,
    message_from_chat,
    to_llamaindex,
)
from contextwright.model._native import ThinkingPart
from contextwright.model._parts import ToolCallPart

from .conftest import TEXT

SIG = st.text("abcdefABCDEF0123456789+/=", min_size=1, max_size=40)
INFO = st.dictionaries(st.sampled_from(["type", "id", "x-trace"]), TEXT, max_size=2)

THINKING = (
    st.builds(  # llama-index-llms-anthropic: the block's other fields, the signature among them
        lambda c, s, info, n: ThinkingBlock(
            content=c, num_tokens=n, additional_information={**info, "signature": s}
        ),
        st.none() | st.just("") | TEXT, SIG | st.just(""), INFO, st.none() | st.integers(0, 999),
    )
    | st.builds(lambda c: ThinkingBlock(content=c), st.none() | TEXT)  # no signature (Ollama)
    | SIG.map(  # redacted thinking, as the Anthropic SDK's block dumps
        lambda d: ThinkingBlock(additional_information={"type": "redacted_thinking", "data": d})
    )
)  # fmt: skip


@st.composite
def thinking_chats(draw: st.DrawFn) -> list[ChatMessage]:
    out = []
    for n in range(draw(st.integers(1, 3))):
        blocks: list[Any] = [
            *draw(st.lists(THINKING, min_size=1, max_size=2)),
            *[TextBlock(text=t) for t in draw(st.lists(TEXT, max_size=2))],
            *[
                ToolCallBlock(tool_call_id=f"c{n}-{i}", tool_name="search", tool_kwargs={"q": i})
                for i in range(draw(st.integers(0, 2)))
            ],
        ]
        out.append(ChatMessage(role="assistant", blocks=blocks))
    return out


def dump(chat: ChatMessage) -> tuple[Any, ...]:
    return (chat.role, [b.model_dump() for b in chat.blocks], chat.additional_kwargs)


@given(thinking_chats())
def test_thinking_blocks_round_trip(chats: list[ChatMessage]) -> None:
    converted = from_llamaindex(chats)
    for m, chat in zip(converted, chats, strict=True):
        n = sum(isinstance(b, ThinkingBlock) for b in chat.blocks)
        assert [isinstance(p, ThinkingPart) for p in m.parts[:n]] == [True] * n  # first, in order
    assert [dump(c) for c in to_llamaindex(converted)] == [dump(c) for c in chats]
    stored = [Message.from_dict(json.loads(json.dumps(m.to_dict()))) for m in converted]
    assert [dump(c) for c in to_llamaindex(stored)] == [dump(c) for c in chats]


@st.composite
def cw_thinking(draw: st.DrawFn) -> Message:
    thinking = st.builds(ThinkingPart, TEXT | st.just(""), st.none() | SIG) | SIG.map(
        lambda d: ThinkingPart(redacted=True, data=d)
    )
    calls = st.builds(
        ToolCallPart, st.sampled_from(["c1", "c2"]), st.just("search"), st.just('{"q": 1}')
    )
    parts = [
        *draw(st.lists(thinking, min_size=1, max_size=2)),
        *draw(st.lists(TEXT.map(TextPart), max_size=2)),
        *draw(st.lists(calls, max_size=2, unique_by=lambda c: c.id)),
    ]
    return Message("assistant", tuple(parts))


@given(st.lists(cw_thinking(), max_size=3))
def test_contextwright_thinking_round_trips(messages: list[Message]) -> None:
    back = from_llamaindex(to_llamaindex(messages))
    assert [m.parts for m in back] == [m.parts for m in messages]


def test_the_anthropic_shape() -> None:
    chat = ChatMessage(
        role="assistant",
        blocks=[
            ThinkingBlock(content="Plan.", additional_information={"signature": "s1", "type": "thinking"}),
            ToolCallBlock(tool_call_id="c1", tool_name="search", tool_kwargs={"q": 1}),
        ],
    )  # fmt: skip
    m = message_from_chat(chat)
    assert m.parts == (ThinkingPart("Plan.", "s1"), ToolCallPart("c1", "search", '{"q": 1}'))
    assert m.text == ""  # thinking is not the message's text
    assert chat_from_message(m) == [chat]
    # not the model's own: thinking in a user message is left out, as before
    user = ChatMessage(role="user", blocks=[ThinkingBlock(content="x"), TextBlock(text="hi")])
    assert message_from_chat(user).parts == (TextPart("hi"),)


@pytest.mark.parametrize(
    ("block", "where"),
    [
        (
            ThinkingBlock(content="t", additional_information={"signature": 7}),
            "message.blocks[0].additional_information.signature",
        ),
        (
            ThinkingBlock.model_construct(content=3, additional_information={}, num_tokens=None),
            "message.blocks[0].content",
        ),
    ],
)
def test_bad_thinking_is_refused_naming_the_block(block: ThinkingBlock, where: str) -> None:
    with pytest.raises(InvalidMessageError) as err:
        message_from_chat(ChatMessage(role="assistant", blocks=[block, TextBlock(text="ok")]))
    assert err.value.where == where


async def test_the_agent_gets_its_thinking_back_in_front_of_its_tool_call(tmp_path: Path) -> None:
    engine = ContextEngine(system_prompt="You keep notes.", budget=2000)
    with Conversations(engine, tmp_path / "chat.db", inline_jobs=True) as convs:
        memory = ContextwrightMemory(conversations=convs, session_id="s1", user="u1")
        await memory.aput(ChatMessage(role="user", content="Look up the caterer."))
        await memory.aget()
        thought = ThinkingBlock(
            content="Search first.", additional_information={"signature": "sig-1"}
        )
        call = ToolCallBlock(tool_call_id="c1", tool_name="search", tool_kwargs={"q": "caterer"})
        await memory.aput_messages(
            [
                ChatMessage(role="assistant", blocks=[thought, call]),
                ChatMessage(role="tool", content="Bo's", additional_kwargs={"tool_call_id": "c1"}),
            ]
        )
        step = await memory.aget()  # the agent's next step in its tool loop
        sent = next(c for c in step if c.role == MessageRole.ASSISTANT)
        assert sent.blocks == [thought, call]
