"""Adapters: round trips, provider rules, and the official SDKs' request types.

Three kinds of evidence that a rendered request would be accepted:

* it passes our validators (which reproduce the providers' 400s, one test per rule);
* it validates against the SDKs' own request ``TypedDict``s, checked strictly:
  ``extra="forbid"`` on every nested TypedDict, lazy ``Iterable`` fields consumed,
  and no element allowed to match a *response* model instead of a request param
  (the Anthropic content union admits response models, which accept any key);
* reading it back gives the same conversation, modulo the documented merges.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anthropic.types as anthropic_types
import openai.types.chat as openai_chat_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseInputParam
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from contextwright._errors import ConfigError, InvalidMessageError, ProviderRuleError
from contextwright.adapters import (
    FIRST_USER_TEXT,
    detect_format,
    from_anthropic,
    from_openai_chat,
    from_responses,
    render_anthropic,
    render_openai_chat,
    render_responses,
    validate_anthropic,
    validate_openai_chat,
    validate_responses,
)
from contextwright.model._messages import Message
from contextwright.model._parts import ImagePart, TextPart, ToolCallPart, ToolResultPart

# -- strict SDK type checks ---------------------------------------------------------------

_FORBID = ConfigDict(extra="forbid")  # applies to every nested TypedDict
CHAT_TYPE = TypeAdapter(list[openai_chat_types.ChatCompletionMessageParam], config=_FORBID)
RESPONSES_TYPE = TypeAdapter(ResponseInputParam, config=_FORBID)
ANTHROPIC_MESSAGES_TYPE = TypeAdapter(list[anthropic_types.MessageParam], config=_FORBID)
ANTHROPIC_SYSTEM_TYPE = TypeAdapter(list[anthropic_types.TextBlockParam], config=_FORBID)


def _consume(value: object, path: str = "") -> None:
    """Walk a validated value: run the lazy ``Iterable`` validators, refuse response models."""
    if isinstance(value, BaseModel):
        raise AssertionError(f"{path} matched the response model {type(value).__name__}")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _consume(v, f"{path}.{k}")
    elif isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return
    elif isinstance(value, Iterable):
        for i, v in enumerate(value):  # a ValidatorIterator validates here
            _consume(v, f"{path}[{i}]")


def sdk_check(adapter: TypeAdapter[Any], payload: object) -> None:
    _consume(adapter.validate_python(payload))


def sdk_check_anthropic(request: Mapping[str, Any]) -> None:
    assert set(request) <= {"system", "messages"}
    sdk_check(ANTHROPIC_MESSAGES_TYPE, request["messages"])
    if "system" in request:
        sdk_check(ANTHROPIC_SYSTEM_TYPE, request["system"])


# -- strategies ---------------------------------------------------------------------------

WORD = st.text(
    alphabet=st.characters(categories=("L", "N", "P", "S")), min_size=1, max_size=8
) | st.sampled_from(["我", "今年", "</user>", '{"a": 1}', "👩\u200d💻", "e\u0301"])
TEXT = st.lists(WORD, min_size=1, max_size=4).map(" ".join)  # never blank, no edge whitespace
DETAIL = st.sampled_from([None, "low", "high", "auto"])
IMAGE = st.one_of(
    st.builds(
        lambda n, d: ImagePart(url=f"https://example.com/{n}.png", detail=d),
        st.integers(0, 99),
        DETAIL,
    ),
    st.builds(
        lambda b, t, d: ImagePart(data=base64.b64encode(b).decode(), media_type=t, detail=d),
        st.binary(min_size=1, max_size=12),
        st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]),
        DETAIL,
    ),
)
ARGS = st.dictionaries(st.text(max_size=5), st.integers() | TEXT | st.booleans(), max_size=3)
NAME = st.none() | st.sampled_from(["alice", "bob"])


@st.composite
def conversations(draw: st.DrawFn, tool_images: bool = True) -> list[Message]:
    """Well-formed conversations: leading system/developer messages, then units
    (mostly starting with a user turn); tool-call units with 1-3 parallel calls all answered;
    images; system messages later in the list (dynamic context, goal restatement)."""
    out = [
        Message(draw(st.sampled_from(["system", "developer"])), (TextPart(draw(TEXT)),))
        for _ in range(draw(st.integers(0, 2)))
    ]
    calls_made = 0

    def user() -> Message:
        parts = draw(st.lists(st.one_of(TEXT.map(TextPart), IMAGE), min_size=1, max_size=3))
        return Message("user", tuple(parts), name=draw(NAME))

    # Usually a user turn first; sometimes the window starts with the assistant.
    out.append(user() if draw(st.integers(0, 4)) else Message.assistant(draw(TEXT)))
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "tools", "system"]))
        if kind == "user":
            out.append(user())
        elif kind == "assistant":
            out.append(Message.assistant(draw(TEXT), name=draw(NAME)))
        elif kind == "system":
            out.append(Message.system(draw(TEXT)))
        else:
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                calls_made += 1
                calls.append(
                    ToolCallPart(
                        f"call_{calls_made}",
                        draw(st.sampled_from(["search", "read_file"])),
                        json.dumps(draw(ARGS)),
                    )
                )
            text = draw(st.none() | TEXT)
            out.append(Message.assistant(text or "", tool_calls=calls))
            results = []
            for c in draw(st.permutations(calls)):
                contents: list[st.SearchStrategy[Any]] = [TEXT, st.just("")]
                if tool_images:
                    contents += [st.tuples(TEXT.map(TextPart), IMAGE), st.tuples(IMAGE)]
                content = draw(st.one_of(*contents))
                results.append(ToolResultPart(c.id, content, draw(st.booleans()), c.name))
            if draw(st.booleans()):
                out.append(Message("tool", tuple(results)))
            else:
                out.extend(Message("tool", (r,)) for r in results)
    return out


# -- round-trip canon ---------------------------------------------------------------------


def _image(p: ImagePart, provider: str, in_result: bool) -> tuple[Any, ...]:
    url = p.url or f"data:{p.media_type};base64,{p.data}"
    detail = p.detail
    if provider == "anthropic":
        detail = None  # no such field
    elif provider == "responses" and not in_result:
        detail = detail or "auto"  # required on input messages
    return (url, detail)


def events(messages: list[Message], provider: str) -> list[tuple[Any, ...]]:
    """A conversation flattened to what must survive a round trip through ``provider``."""
    out: list[tuple[Any, ...]] = []
    started = False
    for m in messages:
        if m.role in ("system", "developer"):
            # Anthropic: system messages after the history render as user text.
            role = "user" if provider == "anthropic" and started else "system"
            out.extend((role, "text", p.text) for p in m.parts if isinstance(p, TextPart))
            continue
        started = True
        for p in m.parts:
            if isinstance(p, TextPart):
                out.append((m.role, "text", p.text))
            elif isinstance(p, ImagePart):
                out.append((m.role, "image", _image(p, provider, False)))
            elif isinstance(p, ToolCallPart):
                out.append(("assistant", "call", p.id, p.name, json.loads(p.arguments or "{}")))
            else:
                content: Any = (
                    p.content
                    if isinstance(p.content, str)
                    else tuple(
                        ("text", c.text)
                        if isinstance(c, TextPart)
                        else ("image", _image(c, provider, True))
                        for c in p.content
                    )
                )
                error = p.is_error if provider == "anthropic" else False
                out.append(("tool", "result", p.call_id, content or "", error, p.name))
    return out


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(conversations(tool_images=False), st.sampled_from(["system", "developer"]))
def test_openai_chat_render_is_valid_typed_and_round_trips(
    conv: list[Message], system_role: Any
) -> None:
    wire = render_openai_chat(conv, system_role=system_role, validate=False)
    json.dumps(wire)
    validate_openai_chat(wire)
    sdk_check(CHAT_TYPE, wire)
    back = from_openai_chat(wire)
    assert events(back, "openai") == events(conv, "openai")
    assert [m.name for m in back] == [m.name for m in conv for _ in m.tool_results or (None,)]


@settings(max_examples=80, deadline=None)
@given(conversations())
def test_openai_chat_render_with_tool_images_is_valid_and_typed(conv: list[Message]) -> None:
    wire = render_openai_chat(conv, validate=False)
    validate_openai_chat(wire)
    sdk_check(CHAT_TYPE, wire)


@settings(max_examples=80, deadline=None)
@given(conversations(), st.sampled_from(["system", "developer"]))
def test_responses_render_is_valid_typed_and_round_trips(
    conv: list[Message], system_role: Any
) -> None:
    wire = render_responses(conv, system_role=system_role, validate=False)
    json.dumps(wire)
    validate_responses(wire)
    sdk_check(RESPONSES_TYPE, wire)
    assert events(from_responses(wire), "responses") == events(conv, "responses")


@settings(max_examples=80, deadline=None)
@given(conversations(), st.data())
def test_anthropic_render_is_valid_typed_and_round_trips(
    conv: list[Message], data: st.DataObject
) -> None:
    marks = data.draw(st.lists(st.integers(0, len(conv) - 1), max_size=6))
    request = render_anthropic(conv, cache_breakpoints=marks, validate=False)
    json.dumps(request)
    validate_anthropic(request)
    sdk_check_anthropic(request)
    roles = [m["role"] for m in request["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))
    back = from_anthropic(request["messages"], request.get("system"))
    expected = events(conv, "anthropic")
    first = next(m for m in conv if m.role not in ("system", "developer"))
    if first.role == "assistant":  # the documented placeholder user turn
        n_system = sum(1 for e in expected if e[0] == "system")
        expected.insert(n_system, ("user", "text", FIRST_USER_TEXT))
    assert events(back, "anthropic") == expected


# -- the SDK checks are strict enough to catch a misspelled key ----------------------------


@pytest.mark.parametrize(
    ("adapter", "payload"),
    [
        (CHAT_TYPE, [{"role": "user", "contnet": "x"}]),
        (CHAT_TYPE, [{"role": "user", "content": [{"type": "text", "txt": "x"}]}]),
        (
            CHAT_TYPE,
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "type": "function", "fucntion": {}}],
                }
            ],
        ),
        (CHAT_TYPE, [{"role": "tool", "tool_call_id": "c", "content": "x", "name": "f"}]),
        (
            RESPONSES_TYPE,
            [{"type": "function_call", "call_idd": "c", "name": "f", "arguments": ""}],
        ),
        (RESPONSES_TYPE, [{"role": "user", "content": [{"type": "input_text", "txt": "x"}]}]),
        (
            RESPONSES_TYPE,
            [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}],
        ),
        (
            ANTHROPIC_MESSAGES_TYPE,
            [{"role": "user", "content": [{"type": "text", "text": "x", "cache_controll": {}}]}],
        ),
        (
            ANTHROPIC_MESSAGES_TYPE,
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_idd": "t"}]}],
        ),
        (ANTHROPIC_SYSTEM_TYPE, [{"type": "text", "txt": "x"}]),
    ],
)
def test_sdk_check_rejects_misspelled_keys(adapter: TypeAdapter[Any], payload: object) -> None:
    with pytest.raises((ValidationError, AssertionError)):
        sdk_check(adapter, payload)


# -- OpenAI Chat conventions --------------------------------------------------------------


def test_openai_chat_conventions() -> None:
    conv = [
        Message.system("sys"),
        Message.developer("dev", name="ops"),
        Message.user("q"),
        Message.assistant(tool_calls=[ToolCallPart("a", "f"), ToolCallPart("b", "g", '{"x": 1}')]),
        Message(
            "tool",
            (
                ToolResultPart("a", "ra", is_error=True),
                ToolResultPart("b", (TextPart("rb"), ImagePart(url="https://i/1.png"))),
            ),
        ),
        Message.assistant("done"),
    ]
    wire = render_openai_chat(conv)
    assert [m["role"] for m in wire] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
    ]
    assert wire[1]["name"] == "ops"
    assert wire[3]["content"] is None
    assert wire[4] == {"role": "tool", "tool_call_id": "a", "content": "ra"}  # is_error dropped
    assert wire[5]["content"].startswith("rb\n[1 image(s)")
    assert wire[6]["content"][0] == {"type": "text", "text": "Images returned by tool call b:"}
    assert wire[6]["content"][1]["image_url"] == {"url": "https://i/1.png"}
    dev = render_openai_chat(conv, system_role="developer")
    assert [m["role"] for m in dev[:2]] == ["developer", "developer"]
    back = from_openai_chat(wire)
    assert back[4].tool_results[0].name == "f"  # filled from the call
    with pytest.raises(ConfigError):
        render_openai_chat(conv, system_role="boss")  # type: ignore[arg-type]


def test_openai_chat_render_rejects_broken_input() -> None:
    with pytest.raises(ProviderRuleError) as exc:
        render_openai_chat([Message.user("q"), Message.tool("nope", "r")])
    assert exc.value.rule == "orphan_tool_result"
    with pytest.raises(InvalidMessageError, match=r"messages\[1\]"):
        render_openai_chat([Message.user("q"), {"role": "user"}])  # type: ignore[list-item]


def test_openai_chat_reads_parts_and_refusals() -> None:
    msgs = from_openai_chat(
        [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD", "detail": "high"}}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "assistant", "content": None, "refusal": "still no"},
            {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": "r"}]},
        ]
    )  # fmt: skip
    assert msgs[0].parts[1] == ImagePart(data="QUJD", media_type="image/png", detail="high")
    assert msgs[1].text == "no"
    assert msgs[2].text == "still no"
    assert msgs[3].tool_results[0].content == (TextPart("r"),)


# -- Responses conventions ----------------------------------------------------------------


def test_responses_conventions() -> None:
    conv = [
        Message.developer("dev"),
        Message("user", (TextPart("see"), ImagePart(url="https://i/1.png"))),
        Message.assistant("let me", tool_calls=[ToolCallPart("a", "f"), ToolCallPart("b", "g")]),
        Message("tool", (ToolResultPart("a", "ra"), ToolResultPart("b", "rb"))),
        Message("assistant", (TextPart("one"), TextPart("two"))),
    ]
    wire = render_responses(conv)
    assert wire[0] == {"role": "system", "content": "dev"}
    assert wire[1]["content"][1] == {
        "type": "input_image",
        "image_url": "https://i/1.png",
        "detail": "auto",
    }
    assert wire[2] == {"role": "assistant", "content": "let me"}
    assert [w.get("type") for w in wire[3:7]] == ["function_call"] * 2 + [
        "function_call_output"
    ] * 2
    assert wire[7] == {"role": "assistant", "content": "one\ntwo"}
    back = from_responses(wire)
    assert [m.role for m in back] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert back[2].tool_calls == conv[2].tool_calls
    assert back[3].tool_results[0].name == "f"
    assert render_responses(conv, system_role="developer")[0]["role"] == "developer"


def test_responses_reads_output_messages() -> None:
    msgs = from_responses(
        [
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
        ]
    )  # fmt: skip
    assert [m.role for m in msgs] == ["assistant", "tool"]
    assert msgs[0].text == "hi"
    assert msgs[0].tool_calls[0].id == "c"


# -- Anthropic conventions ----------------------------------------------------------------


def test_anthropic_system_placement_and_merging() -> None:
    conv = [
        Message.system("static"),
        Message.developer("pinned"),
        Message.user("q"),
        Message.assistant("looking", tool_calls=[ToolCallPart("a", "f")]),
        Message.tool("a", "ra"),
        Message.system("dynamic context"),
        Message.user("current"),
        Message.system("goal restatement"),
    ]
    request = render_anthropic(conv)
    assert request["system"] == [
        {"type": "text", "text": "static"},
        {"type": "text", "text": "pinned"},
    ]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user"]
    last = request["messages"][2]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text", "text", "text"]
    assert [b.get("text") for b in last[1:]] == ["dynamic context", "current", "goal restatement"]
    assert "system" not in render_anthropic(conv[2:5])


def test_anthropic_tool_results_come_first_in_a_merged_turn() -> None:
    conv = [
        Message.user("q"),
        Message.assistant(tool_calls=[ToolCallPart("a", "f"), ToolCallPart("b", "f")]),
        Message.tool("a", "ra"),
        Message.system("note"),
        Message.tool("b", "rb", is_error=True),
    ]
    content = render_anthropic(conv)["messages"][2]["content"]
    assert [b["type"] for b in content] == ["tool_result", "tool_result", "text"]
    assert content[1] == {
        "type": "tool_result",
        "tool_use_id": "b",
        "content": "rb",
        "is_error": True,
    }


def test_anthropic_drops_empty_text_and_empty_turns() -> None:
    conv = [
        Message.user("q"),
        Message("assistant", (TextPart("  "),)),
        Message("user", (TextPart(""), TextPart("again"))),
        Message.assistant(tool_calls=[ToolCallPart("a", "f")]),
        Message("tool", (ToolResultPart("a", ""),)),
        Message.assistant("answer  \n"),
    ]
    messages = render_anthropic(conv)["messages"]
    assert messages[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "q"}, {"type": "text", "text": "again"}],
    }
    assert messages[2]["content"] == [{"type": "tool_result", "tool_use_id": "a"}]
    assert messages[3]["content"] == [{"type": "text", "text": "answer"}]  # prefill stripped


def test_anthropic_first_turn_must_be_user() -> None:
    conv = [Message.system("s"), Message.assistant("hello"), Message.user("hi")]
    request = render_anthropic(conv)
    assert request["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": FIRST_USER_TEXT}],
    }
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user"]
    custom = render_anthropic(conv, first_user_text="(conversation start)", cache_breakpoints=[0])
    assert custom["messages"][0]["content"][0]["text"] == "(conversation start)"
    assert _marked(custom) == ["system[0]"]
    with pytest.raises(ProviderRuleError) as exc:
        render_anthropic(conv, first_user_text=None)
    assert (exc.value.rule, exc.value.where) == ("first_not_user", "messages[0]")
    with pytest.raises(ConfigError):
        render_anthropic(conv, first_user_text=" ")
    with pytest.raises(ProviderRuleError, match="empty_messages"):
        render_anthropic([Message.system("only a system prompt")])


def _marked(request: dict[str, Any]) -> list[str]:
    out = []
    for j, b in enumerate(request.get("system", [])):
        if "cache_control" in b:
            out.append(f"system[{j}]")
    for i, m in enumerate(request["messages"]):
        for j, b in enumerate(m["content"]):
            if "cache_control" in b:
                assert b["cache_control"] == {"type": "ephemeral"}
                out.append(f"messages[{i}].content[{j}]")
    return out


def test_anthropic_cache_breakpoints() -> None:
    conv = [
        Message.system("s1"),
        Message.system("s2"),
        Message.user("u1"),  # 2
        Message.assistant("a1"),  # 3
        Message("user", (TextPart("u2"), TextPart(" "))),  # 4: the blank text is not rendered
        Message("assistant", (TextPart(""),)),  # 5: renders nothing
        Message.user("u3"),  # 6
        Message.assistant("a2"),  # 7
    ]
    assert _marked(render_anthropic(conv, cache_breakpoints=[0, 4, -1])) == [
        "system[0]",
        "messages[2].content[0]",
        "messages[3].content[0]",
    ]
    # More than max_breakpoints: the last ones are kept; duplicates count once.
    marks = [0, 1, 2, 3, 3, 7, -1]
    assert _marked(render_anthropic(conv, cache_breakpoints=marks)) == [
        "system[1]",
        "messages[0].content[0]",
        "messages[1].content[0]",
        "messages[3].content[0]",
    ]
    assert len(_marked(render_anthropic(conv, cache_breakpoints=marks, max_breakpoints=2))) == 2
    assert _marked(render_anthropic(conv, cache_breakpoints=marks, max_breakpoints=0)) == []
    # A message that renders nothing marks the last block before it (u2, merged with u3).
    assert _marked(render_anthropic(conv, cache_breakpoints=[5])) == ["messages[2].content[0]"]
    for bad in ([8], [-9], ["1"]):
        with pytest.raises(ConfigError):
            render_anthropic(conv, cache_breakpoints=bad)  # type: ignore[arg-type]
    # Never more than Anthropic's 4 in all, whatever max_breakpoints says.
    assert (
        len(_marked(render_anthropic(conv, cache_breakpoints=[0, 1, 2, 3, 6], max_breakpoints=5)))
        == 4
    )


def test_anthropic_reading_splits_tool_results_from_user_content() -> None:
    msgs = from_anthropic(
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "tool_use", "id": "a", "name": "f", "input": {"x": 1}}, {"type": "tool_use", "id": "b", "name": "g", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "ra", "cache_control": {"type": "ephemeral"}}, {"type": "tool_result", "tool_use_id": "b", "is_error": True, "content": [{"type": "text", "text": "rb"}, {"type": "image", "source": {"type": "url", "url": "https://i/1.png"}}]}, {"type": "text", "text": "and?"}]},
        ],
        system="be nice",
    )  # fmt: skip
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "user"]
    first, second = msgs[3].tool_results
    assert (first.call_id, first.content, first.is_error, first.name) == ("a", "ra", False, "f")
    assert first.native is not None  # the cache_control the user set is kept
    assert first.native.data["cache_control"] == {"type": "ephemeral"}
    assert second == ToolResultPart(
        "b", (TextPart("rb"), ImagePart(url="https://i/1.png")), True, "g"
    )
    assert msgs[2].tool_calls[0].input == {"x": 1}
    assert msgs[4].text == "and?"
    assert from_anthropic([{"role": "system", "content": "mid"}])[0].role == "system"


def test_anthropic_data_url_images_become_base64_sources() -> None:
    request = render_anthropic([Message("user", (ImagePart(url="data:image/png;base64,QUJD"),))])
    assert request["messages"][0]["content"][0]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "QUJD",
    }


# -- validators: one rule, one bad payload ------------------------------------------------

U = {"role": "user", "content": "q"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
CALL2 = {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}
A_CALLS = {"role": "assistant", "content": None, "tool_calls": [CALL, CALL2]}
T1 = {"role": "tool", "tool_call_id": "c1", "content": "r1"}
T2 = {"role": "tool", "tool_call_id": "c2", "content": "r2"}

OPENAI_CASES: list[tuple[object, str, str]] = [
    ("not a list", "invalid_request", "messages"),
    ([1], "invalid_message", "messages[0]"),
    ([{"role": "bot", "content": "x"}], "unknown_role", "messages[0].role"),
    ([{"role": "user"}], "missing_content", "messages[0].content"),
    ([U, {"role": "assistant", "content": None}], "missing_content", "messages[1].content"),
    ([{"role": "user", "content": 5}], "invalid_content", "messages[0].content"),
    ([U, {"role": "assistant", "content": "x", "tool_calls": []}], "invalid_tool_call", "messages[1].tool_calls"),
    ([U, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]}],
     "invalid_tool_call", "messages[1].tool_calls[0]"),
    ([U, A_CALLS, {"role": "tool", "content": "r"}], "missing_tool_call_id", "messages[2].tool_call_id"),
    ([U, T1], "orphan_tool_result", "messages[1]"),
    ([U, A_CALLS, T1, T2, U, T1], "orphan_tool_result", "messages[5]"),
    ([U, A_CALLS, T1, {"role": "tool", "tool_call_id": "c9", "content": "r"}], "orphan_tool_result", "messages[3]"),
    ([U, A_CALLS, T1, U], "missing_tool_result", "messages[1]"),
    ([U, A_CALLS, T2], "missing_tool_result", "messages[1]"),
    ([U, {"role": "assistant", "tool_calls": [CALL, CALL]}, T1], "duplicate_tool_call_id", "messages[1].tool_calls[1]"),
    ([U, A_CALLS, T1, T1, T2], "duplicate_tool_call_id", "messages[3]"),
]  # fmt: skip

FC = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
FCO = {"type": "function_call_output", "call_id": "c1", "output": "r"}
RESPONSES_CASES: list[tuple[object, str, str]] = [
    ("nope", "invalid_request", "input"),
    ([1], "invalid_item", "input[0]"),
    ([{"content": "x"}], "invalid_item", "input[0]"),
    ([{"role": "tool", "content": "x"}], "unknown_role", "input[0].role"),
    ([{"role": "user"}], "missing_content", "input[0].content"),
    ([{"role": "user", "content": 5}], "invalid_content", "input[0].content"),
    ([{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}], "invalid_content_part", "input[0].content[0]"),
    ([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}], "invalid_content_part", "input[0].content[0]"),
    ([{"type": "function_call", "call_id": "c1", "arguments": "{}"}], "invalid_function_call", "input[0]"),
    ([FC, {"type": "function_call_output", "call_id": "c1"}], "invalid_function_call_output", "input[1]"),
    ([FC, FC, FCO], "duplicate_call_id", "input[1]"),
    ([FC, FCO, FCO], "duplicate_call_id", "input[2]"),
    ([FCO, FC], "orphan_function_call_output", "input[0]"),
    ([{"role": "user", "content": "q"}, FC], "missing_function_call_output", "input[1]"),
]  # fmt: skip


def _anth(*messages: object, **extra: object) -> dict[str, object]:
    return {"messages": list(messages), **extra}


AU = {"role": "user", "content": "q"}
USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "r"}
A_USE = {"role": "assistant", "content": [{"type": "text", "text": "x"}, USE]}
CACHED = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
THINK_ON = {"type": "enabled", "budget_tokens": 1024}
THOUGHT = {"type": "thinking", "thinking": "t", "signature": "sig"}
A_THINK_USE = {"role": "assistant", "content": [THOUGHT, USE]}
A_USE2, A_USE3, A_USE4 = (
    {"role": "assistant", "content": [{**USE, "id": f"t{k}"}]} for k in (2, 3, 4)
)
RESULT2, RESULT3, RESULT4 = ({**RESULT, "tool_use_id": f"t{k}"} for k in (2, 3, 4))
ANTHROPIC_CASES: list[tuple[object, str, str]] = [
    ("nope", "invalid_request", "request"),
    ({"messages": "x"}, "invalid_request", "messages"),
    (_anth(AU, system=5), "invalid_request", "system"),
    (_anth(1), "invalid_message", "messages[0]"),
    (_anth({"role": "user", "content": 5}), "invalid_content", "messages[0].content"),
    (_anth({"role": "user", "content": [{"text": "x"}]}), "invalid_block", "messages[0].content[0]"),
    (_anth(AU, system=[{"type": "image"}]), "invalid_block", "system[0]"),
    (_anth(AU, {"role": "assistant", "content": [RESULT]}), "invalid_block", "messages[1].content[0]"),
    (_anth(), "empty_messages", "messages"),
    (_anth({"role": "system", "content": "s"}, AU), "system_in_messages", "messages[0].role"),
    (_anth({"role": "tool", "content": "s"}), "unknown_role", "messages[0].role"),
    (_anth({"role": "assistant", "content": "hi"}, AU), "first_not_user", "messages[0]"),
    (_anth(AU, AU), "roles_not_alternating", "messages[1]"),
    (_anth({"role": "user", "content": ""}), "empty_content", "messages[0]"),
    (_anth({"role": "user", "content": []}, {"role": "assistant", "content": "x"}), "empty_content", "messages[0]"),
    (_anth({"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "x"}]}), "empty_text", "messages[0].content[0]"),
    (_anth({"role": "user", "content": " \n"}), "empty_text", "messages[0].content[0]"),
    (_anth(AU, system=[{"type": "text", "text": ""}]), "empty_text", "system[0]"),
    (_anth(AU, A_USE, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": ""}]}]}),
     "empty_text", "messages[2].content[0].content[0]"),
    (_anth(AU, A_USE, AU), "missing_tool_result", "messages[1]"),
    (_anth(AU, A_USE), "missing_tool_result", "messages[1]"),
    (_anth({"role": "user", "content": [RESULT]}), "orphan_tool_result", "messages[0].content[0]"),
    (_anth(AU, A_USE, {"role": "user", "content": [{"type": "text", "text": "x"}, RESULT]}), "tool_result_not_first", "messages[2].content[1]"),
    (_anth(AU, A_USE, {"role": "user", "content": [RESULT]}, A_USE, {"role": "user", "content": [RESULT]}),
     "duplicate_tool_use_id", "messages[3].content[1]"),
    (_anth(AU, {"role": "assistant", "content": "The answer is "}), "trailing_whitespace_prefill", "messages[1]"),
    (_anth({"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "QQ=="}}]}),
     "unsupported_media_type", "messages[0].content[0].source.media_type"),
    (_anth({"role": "user", "content": [{"type": "image", "source": "https://x"}]}), "invalid_block", "messages[0].content[0]"),
    (_anth({"role": "user", "content": [CACHED, CACHED, CACHED]}, system=[CACHED, CACHED]),
     "too_many_cache_controls", "messages[0].content[2]"),
    # thinking enabled, a tool loop under way: the turn's opening assistant message thinks first
    (_anth(AU, A_USE, {"role": "user", "content": [RESULT]}, thinking=THINK_ON),
     "thinking_not_first", "messages[1].content[0]"),
    (_anth(AU, A_THINK_USE, {"role": "user", "content": [RESULT]}, A_USE2, {"role": "user", "content": [RESULT2]},
           A_USE3, {"role": "user", "content": [RESULT3]}, {"role": "assistant", "content": "ok"}, AU, A_USE4, {"role": "user", "content": [RESULT4]},
           thinking=THINK_ON),
     "thinking_not_first", "messages[9].content[0]"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("validator", "payload", "rule", "where"),
    [(validate_openai_chat, *c) for c in OPENAI_CASES]
    + [(validate_responses, *c) for c in RESPONSES_CASES]
    + [(validate_anthropic, *c) for c in ANTHROPIC_CASES],
)
def test_validator_rule(
    validator: Callable[[Any], None], payload: object, rule: str, where: str
) -> None:
    with pytest.raises(ProviderRuleError) as exc:
        validator(payload)
    assert (exc.value.rule, exc.value.where) == (rule, where)


def test_thinking_first_only_when_required() -> None:
    # the loop's later assistant messages continue the turn that thought first
    loop = [AU, A_THINK_USE, {"role": "user", "content": [RESULT]}, A_USE2,
            {"role": "user", "content": [RESULT2]}]  # fmt: skip
    validate_anthropic({"messages": loop, "thinking": THINK_ON})
    validate_anthropic(
        {"messages": [*loop, {"role": "assistant", "content": "done"}], "thinking": THINK_ON}
    )
    # a new user turn may leave earlier thinking out; without enabled thinking no rule applies
    plain = [AU, A_USE, {"role": "user", "content": [RESULT]}]
    validate_anthropic(
        {"messages": [*plain, {"role": "assistant", "content": "ok"}, AU], "thinking": THINK_ON}
    )
    for thinking in (None, {"type": "disabled"}, {"type": "adaptive"}):
        validate_anthropic({"messages": plain, "thinking": thinking})
    redacted = {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "d"}, USE]}
    validate_anthropic(
        {"messages": [AU, redacted, {"role": "user", "content": [RESULT]}], "thinking": THINK_ON}
    )


def test_validators_accept_good_payloads() -> None:
    validate_openai_chat(
        [{"role": "system", "content": "s"}, U, A_CALLS, T2, T1,
         {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         {"role": "tool", "tool_call_id": "c3", "content": "r"}, {"role": "system", "content": "later"}, U,
         {"role": "assistant", "content": None, "refusal": "no"}]
    )  # fmt: skip
    validate_responses(
        [{"role": "developer", "content": "d"}, {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
         {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": []}]},
         {"type": "reasoning", "id": "rs_1", "summary": []}, {**FC, "id": "fc_1"}, FCO,
         {"role": "system", "content": "later"}]
    )  # fmt: skip
    validate_anthropic(
        _anth(AU, A_USE, {"role": "user", "content": [RESULT, {"type": "text", "text": " "}, {"type": "text", "text": "more"}]},
              {"role": "assistant", "content": ""}, system=[CACHED, CACHED, CACHED], tools=[{"name": "f", "cache_control": {"type": "ephemeral"}}])
    )  # fmt: skip
    validate_anthropic(_anth(AU, {"role": "assistant", "content": "prefill"}, system="s"))


# -- readers name the position of bad input -----------------------------------------------

BAD_INPUT: list[tuple[Callable[..., object], tuple[Any, ...], str]] = [
    (from_openai_chat, ("x",), "messages"),
    (from_openai_chat, ([1],), "messages[0]"),
    (from_openai_chat, ([{"role": "wizard", "content": "x"}],), "messages[0].role"),
    (from_openai_chat, ([{"role": "function", "name": "f", "content": "x"}],), "messages[0].role"),
    (from_openai_chat, ([U, {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}],), "messages[1].function_call"),
    (from_openai_chat, ([{"role": "user"}],), "messages[0].content"),
    (from_openai_chat, ([{"role": "user", "content": "x", "name": 5}],), "messages[0].name"),
    (from_openai_chat, ([{"role": "user", "content": [{"type": "input_audio"}]}],), "messages[0].content[0].input_audio"),
    (from_openai_chat, ([{"role": "user", "content": [{"type": "video"}]}],), "messages[0].content[0].type"),
    (from_openai_chat, ([{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"input": "x"}}]}],), "messages[0].tool_calls[0].custom.name"),
    (from_openai_chat, ([{"role": "assistant", "content": None, "audio": {}}],), "messages[0].audio.id"),
    (from_openai_chat, ([{"role": "user", "content": [{"type": "text", "text": 5}]}],), "messages[0].content[0].text"),
    (from_openai_chat, ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],), "messages[0].content[0].image_url.url"),
    (from_openai_chat, ([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}],), "messages[0].content[0].type"),
    (from_openai_chat, ([{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}],), "messages[0].tool_calls[0].id"),
    (from_openai_chat, ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]}],), "messages[0].tool_calls[0].function.arguments"),
    (from_openai_chat, ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{"}}]}],), "messages[0].tool_calls[0].function.arguments"),
    (from_openai_chat, ([{"role": "assistant", "tool_calls": {"id": "c"}}],), "messages[0].tool_calls"),
    (from_openai_chat, ([{"role": "tool", "content": "x"}],), "messages[0].tool_call_id"),
    (from_openai_chat, ([{"role": "tool", "tool_call_id": "c"}],), "messages[0].content"),
    (from_responses, ({"input": []},), "input"),
    (from_responses, ([{"type": "telepathy", "summary": []}],), "input[0].type"),
    (from_responses, ([{"type": "item_reference"}],), "input[0].id"),
    (from_responses, ([{"type": "custom_tool_call", "name": "f", "input": "x"}],), "input[0].call_id"),
    (from_responses, ([{"role": "tool", "content": "x"}],), "input[0].role"),
    (from_responses, ([{"role": "user"}],), "input[0].content"),
    (from_responses, ([{"role": "system", "content": [{"type": "input_image", "image_url": "u"}]}],), "input[0].content[0].type"),
    (from_responses, ([{"role": "user", "content": [{"type": "input_image", "detail": "auto"}]}],), "input[0].content[0].image_url"),
    (from_responses, ([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "no"}],), "input[0].arguments"),
    (from_responses, ([{"type": "function_call", "call_id": "c", "arguments": "{}"}],), "input[0].name"),
    (from_responses, ([{"type": "function_call_output", "output": "x"}],), "input[0].call_id"),
    (from_responses, ([{"type": "function_call_output", "call_id": "c"}],), "input[0].output"),
    (from_responses, ([{"type": "function_call_output", "call_id": "c", "output": [{"type": "video"}]}],), "input[0].output[0].type"),
    (from_anthropic, ("x",), "messages"),
    (from_anthropic, ([{"role": "bot", "content": "x"}],), "messages[0].role"),
    (from_anthropic, ([{"role": "user"}],), "messages[0].content"),
    (from_anthropic, ([{"role": "user", "content": [5]}],), "messages[0].content[0]"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "tool_result"}]}],), "messages[0].content[0].tool_use_id"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}],), "messages[0].content[0].is_error"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "document"}]}]}],), "messages[0].content[0].content[0].source"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "video"}]}]}],), "messages[0].content[0].content[0].type"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "image", "source": {"type": "s3", "key": "f"}}]}],), "messages[0].content[0].source.type"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "document", "source": "x"}]}],), "messages[0].content[0].source"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}]}],), "messages[0].content[0].type"),
    (from_anthropic, ([{"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search"}]}],), "messages[0].content[0].input"),
    (from_anthropic, ([{"role": "assistant", "content": [{"type": "web_search_tool_result", "content": []}]}],), "messages[0].content[0].tool_use_id"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "x"}}]}],), "messages[0].content[0].source.media_type"),
    (from_anthropic, ([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}],), "messages[0].content[0].type"),
    (from_anthropic, ([{"role": "assistant", "content": [{"type": "thinking", "thinking": 5}]}],), "messages[0].content[0].thinking"),
    (from_anthropic, ([{"role": "assistant", "content": [{"type": "redacted_thinking"}]}],), "messages[0].content[0].data"),
    (from_anthropic, ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}],), "messages[0].content[0].input"),
    (from_anthropic, ([{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],), "messages[0].content[0].id"),
    (from_anthropic, ([AU], [{"type": "image"}]), "system[0].type"),
    (from_anthropic, ([AU], [{"type": "text"}]), "system[0].text"),
    (from_anthropic, ([AU], 5), "system"),
]  # fmt: skip


@pytest.mark.parametrize(("reader", "args", "where"), BAD_INPUT)
def test_readers_name_the_position(
    reader: Callable[..., object], args: tuple[Any, ...], where: str
) -> None:
    with pytest.raises(InvalidMessageError) as exc:
        reader(*args)
    assert exc.value.where == where


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(
        ["", "x", "user", "assistant", "tool", "system", "text", "image", "tool_use", "tool_result",
         "function_call", "function_call_output", "image_url", "input_text", "input_image", "base64",
         "url", "{}", "data:image/png;base64,QQ==", "thinking", "redacted_thinking", "document",
         "reasoning", "compaction", "item_reference", "server_tool_use", "web_search_tool_result",
         "custom_tool_call", "custom_tool_call_output", "computer_call", "local_shell_call_output",
         "input_file", "input_audio", "file", "search_result", "signature", "encrypted_content"]
    ),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(
        st.sampled_from(
            ["role", "content", "type", "text", "tool_calls", "tool_call_id", "id", "function", "name",
             "arguments", "image_url", "url", "source", "data", "media_type", "input", "tool_use_id",
             "is_error", "call_id", "output", "detail", "refusal", "thinking", "signature",
             "citations", "cache_control", "title", "summary", "audio", "file_data", "file_id"]
        ),
        inner,
        max_size=5,
    ),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(JSON, max_size=4), st.sampled_from([from_openai_chat, from_responses, from_anthropic])
)
def test_readers_never_leak_other_errors(
    payload: list[Any], reader: Callable[[Any], object]
) -> None:
    with contextlib.suppress(InvalidMessageError):
        reader(payload)


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON, max_size=4))
def test_validators_never_leak_other_errors(payload: list[Any]) -> None:
    checks: list[tuple[Callable[[Any], None], object]] = [
        (validate_openai_chat, payload),
        (validate_responses, payload),
        (validate_anthropic, {"messages": payload}),
    ]
    for validator, arg in checks:
        with contextlib.suppress(ProviderRuleError):
            validator(arg)


# -- format detection ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ([{"role": "user", "content": "hi"}], "openai"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "openai"),
        ([U, A_CALLS, T1, T2], "openai"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}], "openai"),
        ([{"role": "user", "content": "q"}, FC, FCO], "responses"),
        ([{"role": "user", "content": [{"type": "input_text", "text": "q"}]}], "responses"),
        ({"input": [{"role": "user", "content": "q"}]}, "responses"),
        ([AU, A_USE, {"role": "user", "content": [RESULT]}], "anthropic"),
        ({"system": "s", "messages": [AU]}, "anthropic"),
        ([{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}], "anthropic"),
    ],
)  # fmt: skip
def test_detect_format(payload: object, expected: str) -> None:
    assert detect_format(payload) == expected


@pytest.mark.parametrize("payload", ["text", 5, {"foo": []}, [1], [A_USE, T1]])
def test_detect_format_rejects(payload: object) -> None:
    with pytest.raises(InvalidMessageError):
        detect_format(payload)


def test_detect_format_matches_each_renderer() -> None:
    conv = [
        Message.system("s"),
        Message.user("q"),
        Message.assistant(tool_calls=[ToolCallPart("a", "f")]),
        Message.tool("a", "r"),
    ]
    assert detect_format(render_openai_chat(conv)) == "openai"
    assert detect_format(render_responses(conv)) == "responses"
    assert detect_format(render_anthropic(conv)) == "anthropic"
    assert detect_format(render_anthropic(conv)["messages"]) == "anthropic"
