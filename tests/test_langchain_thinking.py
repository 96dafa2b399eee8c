"""A model's thinking through the LangChain converter: kept as parts, counted, sent back as it came.

LangChain carries reasoning in the shapes its provider packages write:
langchain-anthropic's ``thinking`` (text and signature) and ``redacted_thinking``
blocks, the v1 standard ``reasoning`` block (the signature in ``extras``),
langchain-openai's Responses reasoning items (a content block with ``summary``, or
``additional_kwargs["reasoning"]``). Each becomes a `ThinkingPart` or a
Responses `ProviderPart`, and comes back unchanged, also in what the middleware hands
the model: Anthropic rejects a tool loop whose last assistant turn lost its thinking.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from contextwright import (
    ContextEngine,
    Conversations,
    InvalidMessageError,
    Message,
    TextPart,
    ToolCallPart,
)
from contextwright.integrations.langchain import (
    ContextwrightMiddleware,
    from_langchain,
    from_langchain_messages,
    to_langchain,
    to_langchain_messages,
)
from contextwright.integrations.langchain._reasoning import FC_IDS
from contextwright.model._native import ProviderPart, ThinkingPart
from contextwright.model._thinking import drop_thinking

from .conftest import TEXT
from .lc_fakes import ToolCallingFake, lookup

IDS = st.text("abcdefghij0123456789-_", min_size=1, max_size=12)
SIG = st.text("abcdefABCDEF0123456789+/=", min_size=1, max_size=40)
ARGS = st.dictionaries(st.sampled_from(["q", "city", "深度"]), TEXT | st.integers(), max_size=2)


def with_index(block: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """The block, sometimes with the ``index`` a streamed message keeps."""
    return st.tuples(block, st.none() | st.integers(0, 3)).map(
        lambda x: x[0] if x[1] is None else {**x[0], "index": x[1]}
    )


def summary(texts: list[str]) -> list[dict[str, str]]:
    return [{"type": "summary_text", "text": t} for t in texts]


RESPONSES_ITEM = st.builds(
    lambda i, texts, enc: {
        "type": "reasoning", "id": f"rs_{i}", "summary": summary(texts),
        **({"encrypted_content": enc} if enc else {}),
    },
    IDS, st.lists(TEXT, max_size=2), st.none() | SIG,
)  # fmt: skip

THINKING = with_index(
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, TEXT | st.just(""), SIG)
    | TEXT.map(lambda t: {"type": "thinking", "thinking": t})  # langchain-google-genai, unsigned
    | SIG.map(lambda d: {"type": "redacted_thinking", "data": d})
    | st.builds(
        lambda t, s, x: {"type": "reasoning", "reasoning": t, "extras": {"signature": s, **x}},
        TEXT, SIG, st.sampled_from([{}, {"cache": "x"}]),
    )  # LangChain v1 standard, from langchain-anthropic
    | RESPONSES_ITEM
)  # fmt: skip
TEXT_BLOCK = with_index(TEXT.map(lambda t: {"type": "text", "text": t}))
TOOL_USE = {"type": "tool_use", "id": "t9", "name": "lookup", "input": {"q": 1}}


@st.composite
def thinking_ai(draw: st.DrawFn) -> AIMessage:
    """An assistant message as a thinking model returns it: thinking first, text, tool calls."""
    calls = draw(
        st.lists(
            st.builds(lambda i, a: {"name": "lookup", "args": a, "id": i, "type": "tool_call"}, IDS, ARGS),
            max_size=2, unique_by=lambda c: c["id"],
        )
    )  # fmt: skip
    content: list[Any] = [
        *draw(st.lists(THINKING, min_size=1, max_size=2)),
        *draw(st.lists(TEXT_BLOCK, max_size=2)),
    ]
    kwargs: dict[str, Any] = {}
    where = draw(st.sampled_from(["none", "tool_use", "function_call", "ids"])) if calls else "none"
    if where == "tool_use":
        content.append(TOOL_USE)  # langchain-anthropic also lists tool_use blocks in content
    elif where == "function_call":  # langchain-openai "responses/v1": the items, ids and all
        content += [
            {"type": "function_call", "name": c["name"], "arguments": json.dumps(c["args"]),
             "call_id": c["id"], "id": f"fc_{c['id']}"}
            for c in calls
        ]  # fmt: skip
    elif where == "ids":  # langchain-openai "v0": the item ids by call id
        kwargs[FC_IDS] = {c["id"]: f"fc_{c['id']}" for c in calls}
    if draw(st.booleans()):
        kwargs["reasoning"] = draw(RESPONSES_ITEM)  # langchain-openai, output_version="v0"
    if draw(st.booleans()):
        kwargs["model"] = "m"
    return AIMessage(content=content, tool_calls=calls, additional_kwargs=kwargs, id=draw(IDS))


def sendable(block: Any) -> bool:
    return not (isinstance(block, dict) and block.get("type") == "tool_use")


@given(st.lists(thinking_ai(), min_size=1, max_size=3))
def test_thinking_round_trips_and_goes_to_the_model(messages: list[AIMessage]) -> None:
    converted = from_langchain_messages(messages)
    for m, lm in zip(converted, messages, strict=True):
        blocks = [b for b in lm.content if b["type"] not in ("text", "function_call")]
        thinking = [p for p in m.parts if isinstance(p, (ThinkingPart, ProviderPart))]
        kw = "reasoning" in lm.additional_kwargs
        assert len(thinking) == sum(sendable(b) for b in blocks) + kw
        assert isinstance(m.parts[0], (ThinkingPart, ProviderPart))  # thinking first
    assert to_langchain_messages(converted) == messages  # the history gets all of it back
    stored = [Message.from_dict(json.loads(json.dumps(m.to_dict()))) for m in converted]
    assert to_langchain_messages(stored) == messages
    # the model gets the thinking, signatures and all, in order; not what was not counted
    for sent, lm in zip(to_langchain_messages(stored, for_model=True), messages, strict=True):
        assert sent.content == [b for b in lm.content if sendable(b)]
        assert sent.tool_calls == lm.tool_calls  # type: ignore[attr-defined]
        kw = lm.additional_kwargs
        assert sent.additional_kwargs == {k: kw[k] for k in ("reasoning", FC_IDS) if k in kw}


@st.composite
def cw_thinking(draw: st.DrawFn) -> Message:
    thinking = (
        st.builds(ThinkingPart, TEXT | st.just(""), st.none() | SIG)
        | SIG.map(lambda d: ThinkingPart(redacted=True, data=d))
        | RESPONSES_ITEM.map(lambda d: ProviderPart.of("responses", "reasoning", d))
    )
    calls = st.builds(
        ToolCallPart, IDS, st.just("lookup"), ARGS.map(lambda a: json.dumps(a, ensure_ascii=False))
    )
    parts = [
        *draw(st.lists(thinking, min_size=1, max_size=2)),
        *draw(st.lists(TEXT.map(TextPart), max_size=2)),
        *draw(st.lists(calls, max_size=2, unique_by=lambda c: c.id)),
    ]
    return Message("assistant", tuple(parts), id=draw(IDS))


@given(st.lists(cw_thinking(), max_size=3))
def test_contextwright_thinking_round_trips(messages: list[Message]) -> None:
    for for_model in (False, True):
        back = from_langchain_messages(to_langchain_messages(messages, for_model=for_model))
        assert [m.to_dict() for m in back] == [m.to_dict() for m in messages]


def test_the_shapes_read() -> None:
    ai = AIMessage(
        [
            {"type": "thinking", "thinking": "Plan: look it up.", "signature": "sig1", "index": 0},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Let me check."},
        ],
        tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}],
        additional_kwargs={"reasoning": {"type": "reasoning", "id": "rs_1", "summary": []}},
    )  # fmt: skip
    m = from_langchain(ai)
    assert m.parts == (
        ProviderPart.of(
            "responses", "reasoning", {"type": "reasoning", "id": "rs_1", "summary": []}
        ),
        ThinkingPart("Plan: look it up.", "sig1"),
        ThinkingPart(redacted=True, data="opaque"),
        TextPart("Let me check."),
        ToolCallPart("c1", "lookup", '{"q": "x"}'),
    )
    assert m.text == "Let me check."  # thinking is not the message's text
    # a v1 reasoning block with no signature and no summary has no known provider: kept, not sent
    other = from_langchain(AIMessage([{"type": "reasoning", "reasoning": "hmm"}, "ok"]))
    assert other.parts == (TextPart("ok"),)
    # thinking in a user message is not the model's: kept as it came, not a part
    user = from_langchain(HumanMessage([{"type": "thinking", "thinking": "x", "signature": "s"}]))
    assert user.parts == ()


def test_older_thinking_left_out_keeps_the_rest_of_the_shape() -> None:
    ai = AIMessage(
        [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "Checking.", "id": "msg_1"},
        ],
        tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}],
    )  # fmt: skip
    thinned = drop_thinking(from_langchain(ai))
    assert thinned is not None
    sent = to_langchain(thinned, for_model=True)[0]
    assert sent.content == [{"type": "text", "text": "Checking.", "id": "msg_1"}]
    assert sent.tool_calls[0]["id"] == "c1"  # type: ignore[attr-defined]
    # a Responses reasoning item goes with the id of the call it led to (else a 400)
    item = {"type": "reasoning", "id": "rs_1", "summary": []}
    fc = {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1", "id": "fc_1"}
    for ai in (
        AIMessage([item, fc], tool_calls=[{"name": "f", "args": {}, "id": "c1"}]),
        AIMessage([], tool_calls=[{"name": "f", "args": {}, "id": "c1"}],
                  additional_kwargs={"reasoning": item, FC_IDS: {"c1": "fc_1"}}),
    ):  # fmt: skip
        m = from_langchain(ai)
        assert m.tool_calls[0].native is not None  # the id is counted with the call
        thinned = drop_thinking(m)
        assert thinned is not None
        sent = to_langchain(thinned, for_model=True)[0]
        assert "rs_1" not in json.dumps([sent.content, sent.additional_kwargs])
        assert "fc_1" not in json.dumps([sent.content, sent.additional_kwargs])


@pytest.mark.parametrize(
    ("block", "where"),
    [
        ({"type": "thinking", "thinking": 3, "signature": "s"}, "message.content[0].thinking"),
        ({"type": "thinking", "signature": "s"}, "message.content[0].thinking"),
        ({"type": "thinking", "thinking": "t", "signature": 7}, "message.content[0].signature"),
        ({"type": "redacted_thinking"}, "message.content[0].data"),
        ({"type": "redacted_thinking", "data": ""}, "message.content[0].data"),
        (
            {"type": "reasoning", "reasoning": 1, "extras": {"signature": "s"}},
            "message.content[0].reasoning",
        ),
        (
            {"type": "reasoning", "reasoning": "r", "extras": {"signature": ["s"]}},
            "message.content[0].extras.signature",
        ),
        ({"type": "reasoning", "summary": [float("nan")]}, "message.content[0]"),
    ],
)
def test_bad_thinking_is_refused_naming_the_block(block: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidMessageError) as err:
        from_langchain(AIMessage([block, {"type": "text", "text": "ok"}]))
    assert err.value.where == where


class ThinkingFake(ToolCallingFake):
    """`ToolCallingFake` that thinks first, as Claude with extended thinking does."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        reply = super()._generate(messages, stop, run_manager, **kw).generations[0].message
        n = len(self.received)
        thought = {"type": "thinking", "thinking": f"Step {n}: what next?", "signature": f"sig-{n}"}
        text = [{"type": "text", "text": reply.text}] if reply.text else []
        answer = AIMessage([thought, *text], tool_calls=reply.tool_calls)  # type: ignore[attr-defined]
        return ChatResult(generations=[ChatGeneration(message=answer)])


def test_the_model_gets_its_thinking_back_in_front_of_its_tool_call() -> None:
    engine = ContextEngine(system_prompt="You are a helpful assistant.", budget=4000)
    with Conversations(engine, None) as convs:
        model = ThinkingFake()
        agent = create_agent(model, [lookup], middleware=[ContextwrightMiddleware(convs, "t-1")])
        agent.invoke({"messages": [HumanMessage("Please check parcel 7.")]})
        assert len(model.received) == 2  # the call, then the answer to its result
        loop = model.received[1]
        call = next(m for m in loop if isinstance(m, AIMessage) and m.tool_calls)
        thought = {"type": "thinking", "thinking": "Step 1: what next?", "signature": "sig-1"}
        assert call.content[:1] == [thought]
        assert call.tool_calls[0]["name"] == "lookup"
        result = next(m for m in loop if isinstance(m, ToolMessage))
        assert loop.index(call) < loop.index(result)
        # the engine counted it: the stored assistant message holds the thinking part
        stored = convs.messages_sync("t-1")
        assert ThinkingPart("Step 1: what next?", "sig-1") in stored[1].parts
