"""LangChain messages ↔ contextwright messages: lossless both ways (property tests), and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from contextwright import (
    ImagePart,
    InvalidMessageError,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from contextwright.integrations.langchain import (
    from_langchain,
    from_langchain_messages,
    to_langchain,
    to_langchain_messages,
)

from .conftest import TEXT

IDS = st.text("abcdefghij0123456789-_", min_size=1, max_size=12)
NAMES = st.none() | st.sampled_from(["alice", "Bob", "weather_tool", "张三"])
SCALAR = (
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.sampled_from(["x", "价格", ""])
)
JSON = st.recursive(
    SCALAR | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)
    ),
    max_leaves=8,
)
OBJ = st.dictionaries(st.sampled_from(["k", "model", "finish_reason", "n"]), JSON, max_size=3)
URL = st.sampled_from(["https://example.com/a.png", "https://x.test/p?q=1"])
B64 = st.sampled_from(["iVBORw0KGgo=", "R0lGODlhAQABAAAAACw="])
MIME = st.sampled_from(["image/png", "image/jpeg"])


# -- LangChain side -----------------------------------------------------------------------


@st.composite
def image_blocks(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["url", "base64", "image_url", "image_url_data", "image_url_str"]))
    if kind == "url":
        block: dict[str, Any] = {"type": "image", "url": draw(URL)}
        if draw(st.booleans()):
            block["mime_type"] = draw(MIME)
        return block
    if kind == "base64":
        return {"type": "image", "base64": draw(B64), "mime_type": draw(MIME)}
    if kind == "image_url_str":
        return {"type": "image_url", "image_url": draw(URL)}
    url = draw(URL) if kind == "image_url" else f"data:{draw(MIME)};base64,{draw(B64)}"
    inner: dict[str, Any] = {"url": url}
    if draw(st.booleans()):
        inner["detail"] = draw(st.sampled_from(["low", "high", "auto"]))
    return {"type": "image_url", "image_url": inner}


def content(images: bool) -> st.SearchStrategy[Any]:
    text_block = TEXT.map(lambda t: {"type": "text", "text": t})
    extra_text = st.tuples(TEXT, st.sampled_from(["id", "index"]), IDS).map(
        lambda x: {"type": "text", "text": x[0], x[1]: x[2]}
    )
    other = st.sampled_from([
        {"type": "reasoning", "reasoning": "think first"},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
    ])  # fmt: skip
    blocks = text_block | extra_text | TEXT | other
    if images:
        blocks = blocks | image_blocks()
    return TEXT | st.just("") | st.lists(blocks, max_size=4)


def tool_calls() -> st.SearchStrategy[list[dict[str, Any]]]:
    call = st.builds(
        lambda n, a, i: {"name": n, "args": a, "id": i, "type": "tool_call"},
        st.sampled_from(["weather", "search", "读取"]),
        st.dictionaries(st.sampled_from(["city", "q", "n", "深度"]), JSON, max_size=3),
        IDS,
    )
    return st.lists(call, max_size=3, unique_by=lambda c: c["id"])


@st.composite
def lc_messages(draw: st.DrawFn) -> BaseMessage:
    kind = draw(st.sampled_from(["human", "system", "developer", "ai", "tool", "chat"]))
    kw: dict[str, Any] = {"id": draw(IDS)}
    if draw(st.booleans()):
        kw["response_metadata"] = draw(OBJ)
    if kind == "tool":
        kw["additional_kwargs"] = draw(OBJ)
        return ToolMessage(
            content=draw(content(True)), tool_call_id=draw(IDS), name=draw(NAMES),
            status=draw(st.sampled_from(["success", "error"])),
            artifact=draw(st.none() | OBJ), **kw,
        )  # fmt: skip
    kw["name"] = draw(NAMES)
    kw["additional_kwargs"] = draw(OBJ)
    if kind == "human":
        return HumanMessage(content=draw(content(True)), **kw)
    if kind == "system":
        return SystemMessage(content=draw(content(False)), **kw)
    if kind == "developer":
        kw["additional_kwargs"]["__openai_role__"] = "developer"
        return SystemMessage(content=draw(content(False)), **kw)
    if kind == "chat":
        role = draw(st.sampled_from(["user", "assistant", "system"]))
        return ChatMessage(content=draw(content(role == "user")), role=role, **kw)
    extra: dict[str, Any] = {}
    if draw(st.booleans()):
        extra["usage_metadata"] = {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    if draw(st.booleans()):
        extra["invalid_tool_calls"] = [
            {
                "name": "f",
                "args": "{bad",
                "id": "x1",
                "error": "no JSON",
                "type": "invalid_tool_call",
            }
        ]
    return AIMessage(content=draw(content(False)), tool_calls=draw(tool_calls()), **extra, **kw)


@given(st.lists(lc_messages(), max_size=6))
def test_langchain_round_trip_is_lossless(messages: list[BaseMessage]) -> None:
    converted = from_langchain_messages(messages)
    assert len(converted) == len(messages)
    back = to_langchain_messages(converted)
    assert back == messages
    assert [type(m) for m in back] == [type(m) for m in messages]
    # stored and read again: the neutral JSON form keeps all of it
    stored = [Message.from_dict(json.loads(json.dumps(m.to_dict()))) for m in converted]
    assert to_langchain_messages(stored) == messages


# -- contextwright side ---------------------------------------------------------------------


def cw_images() -> st.SearchStrategy[ImagePart]:
    by_url = st.builds(
        lambda u, m, d: ImagePart(url=u, media_type=m, detail=d), URL, st.none() | MIME,
        st.none() | st.sampled_from(["low", "high"]),
    )  # fmt: skip
    by_data = st.builds(
        lambda b, m, d: ImagePart(data=b, media_type=m, detail=d), B64, MIME,
        st.none() | st.sampled_from(["low", "high"]),
    )  # fmt: skip
    return by_url | by_data


@st.composite
def cw_messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
    text = TEXT.map(TextPart)
    if role == "tool":
        result_content = TEXT | st.lists(text | cw_images(), min_size=1, max_size=3).map(tuple)
        results = st.builds(ToolResultPart, IDS, result_content, st.booleans(), NAMES)
        parts: list[Any] = draw(st.lists(results, min_size=1, max_size=3))
    elif role == "assistant":
        calls = st.builds(
            ToolCallPart, IDS, st.sampled_from(["weather", "search"]),
            st.dictionaries(st.sampled_from("xyz"), JSON, max_size=2).map(
                lambda d: json.dumps(d, ensure_ascii=False)
            ),
        )  # fmt: skip
        parts = [*draw(st.lists(text, max_size=2)), *draw(st.lists(calls, max_size=2))]
    elif role == "user":
        parts = draw(st.lists(text | cw_images(), min_size=1, max_size=3))
    else:
        parts = draw(st.lists(text, min_size=1, max_size=2))
    meta = draw(st.dictionaries(st.sampled_from(["dia_id", "source", "n"]), JSON, max_size=2))
    return Message(
        role, tuple(parts), id=draw(IDS), name=draw(NAMES), metadata=meta,  # type: ignore[arg-type]
        created_at=draw(st.none() | st.floats(0, 2e9)), seq=draw(st.none() | st.integers(1, 10**6)),
    )  # fmt: skip


@given(st.lists(cw_messages(), max_size=6))
def test_contextwright_round_trip_is_lossless(messages: list[Message]) -> None:
    lc = to_langchain_messages(messages)
    assert len(lc) == sum(len(m.tool_results) or 1 for m in messages)
    assert len({m.id for m in lc}) == len(lc) or len({m.id for m in messages}) < len(messages)
    back = from_langchain_messages(lc)
    assert [m.to_dict() for m in back] == [m.to_dict() for m in messages]


def test_what_maps_onto_the_model_does() -> None:
    ai = AIMessage(
        "Let me look.", id="a1", name="helper",
        tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "id": "c1"}],
    )  # fmt: skip
    tool = ToolMessage("sunny", tool_call_id="c1", name="weather", status="error", id="t1")
    m_ai, m_tool = from_langchain_messages([ai, tool])
    assert (m_ai.role, m_ai.id, m_ai.name, m_ai.text) == (
        "assistant",
        "a1",
        "helper",
        "Let me look.",
    )
    assert m_ai.tool_calls == (ToolCallPart("c1", "weather", '{"city": "Lisbon"}'),)
    assert m_tool.role == "tool"
    assert m_tool.tool_results == (ToolResultPart("c1", "sunny", True, "weather"),)
    dev = from_langchain(
        SystemMessage("Be brief.", additional_kwargs={"__openai_role__": "developer"})
    )
    assert dev.role == "developer"
    assert "langchain" not in dev.metadata
    image = from_langchain(HumanMessage([
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
    ]))  # fmt: skip
    assert image.parts == (
        TextPart("What is this?"),
        ImagePart(data="AAAA", media_type="image/png", detail="low"),
    )
    # several results in one message (as read from Anthropic) become one ToolMessage each
    both = Message("tool", (ToolResultPart("c1", "a"), ToolResultPart("c2", "b")), id="m")
    lc = to_langchain(both)
    assert [(m.id, m.tool_call_id) for m in lc] == [("m", "c1"), ("m~1", "c2")]  # type: ignore[attr-defined]
    assert from_langchain_messages(lc) == [both]


def test_for_the_model_only_what_was_counted() -> None:
    ai = AIMessage(
        [{"type": "reasoning", "reasoning": "x" * 500}, {"type": "text", "text": "Hi"}],
        id="a", additional_kwargs={"big": "y" * 500}, response_metadata={"model": "m"},
    )  # fmt: skip
    m = from_langchain(ai)
    sent = to_langchain(m, for_model=True)[0]
    assert sent.content == [{"type": "text", "text": "Hi"}]
    assert sent.additional_kwargs == {}
    assert "model" not in sent.response_metadata
    assert to_langchain(m)[0] == ai  # the history gets all of it back
    # shortened by the engine: the template no longer fits, the text goes as it is
    short = m.replace(parts=(TextPart("H"), TextPart("i")))
    assert to_langchain(short, for_model=True)[0].content == [
        {"type": "text", "text": "H"}, {"type": "text", "text": "i"}
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("message", "where"),
    [
        (ChatMessage("hi", role="robot"), "message.role"),
        (RemoveMessage(id="x"), "message"),
        (HumanMessage("ok", additional_kwargs={"f": object()}), "message.additional_kwargs"),
        (ToolMessage("ok", tool_call_id="c", artifact=object()), "message.artifact"),
        (HumanMessage("bad \ud800 text"), "message.parts[0].text"),
        (AIMessage("", tool_calls=[{"name": "", "args": {}, "id": "c"}]), "message.parts[0].name"),
        (HumanMessage([{"type": "image", "url": ""}]), "message.content[0].url"),
    ],
)
def test_bad_messages_raise_typed_errors(message: BaseMessage, where: str) -> None:
    with pytest.raises(InvalidMessageError) as err:
        from_langchain(message)
    assert err.value.where == where


def test_missing_langchain_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['langchain_core'] = None; sys.modules['langchain'] = None\n"
        "import contextwright\n"
        "try:\n"
        "    import contextwright.integrations.langchain\n"
        "except contextwright.MissingDependencyError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'contextwright[langchain]'" in out.stdout, out.stderr
    # and `import contextwright` never imports LangChain
    code = (
        "import sys, contextwright, contextwright.integrations\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langchain', 'langchain_core', 'langgraph')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
