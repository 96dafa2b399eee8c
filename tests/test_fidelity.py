"""Lossless provider content: thinking, documents, citations, server tools, reasoning items,
built-in tool calls and compactions read, stored, and written back as they came; sent to
another provider converted or dropped, with a receipt line, and never in a form it rejects.

Golden files hold real-shaped payloads (tests/golden/); properties generate
conversations holding every kind of part. Each rendered request passes our validators
and the SDK's own request types (strictly, as in test_adapters).
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import anthropic.types as anthropic_types
import anthropic.types.beta as anthropic_beta
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict, TypeAdapter

from contextwright.adapters import (
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
from contextwright.model._native import ProviderPart, ThinkingPart
from contextwright.model._units import group_units
from tests.test_adapters import (
    ANTHROPIC_SYSTEM_TYPE,
    CHAT_TYPE,
    RESPONSES_TYPE,
    sdk_check,
)

GOLDEN = Path(__file__).parent / "golden"

# The Messages API's content union admits response models (which take any key), and
# a text block with citations matches one; each message's blocks are checked against
# the request params alone, the beta ones (compaction blocks) where asked.
_FORBID = ConfigDict(extra="forbid")
ANTHROPIC_BLOCKS = TypeAdapter(list[anthropic_types.ContentBlockParam], config=_FORBID)
ANTHROPIC_BETA_BLOCKS = TypeAdapter(list[anthropic_beta.BetaContentBlockParam], config=_FORBID)


def sdk_check_anthropic(request: dict[str, Any], *, beta: bool = False) -> None:
    assert set(request) <= {"system", "messages"}
    for m in request["messages"]:
        assert set(m) == {"role", "content"}
        assert m["role"] in ("user", "assistant")
        content = m["content"]
        if not isinstance(content, str):
            sdk_check(ANTHROPIC_BETA_BLOCKS if beta else ANTHROPIC_BLOCKS, content)
    if "system" in request:
        sdk_check(ANTHROPIC_SYSTEM_TYPE, request["system"])


def golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    return data


def same_json(a: object, b: object) -> bool:
    """The same JSON value, to the byte once keys are sorted (objects are unordered)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def blocks_form(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic messages with string content written as one text block (the same request)."""
    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        out.append({**m, "content": content})
    return out


def check_everywhere(messages: list[Message]) -> dict[str, Any]:
    """Render for all three providers; each passes our rules and the SDK's types."""
    notes: dict[str, list[Any]] = {"anthropic": [], "openai": [], "responses": []}
    anthropic = render_anthropic(messages, notes=notes["anthropic"])
    sdk_check_anthropic(anthropic)
    chat = render_openai_chat(messages, notes=notes["openai"])
    sdk_check(CHAT_TYPE, chat)
    responses = render_responses(messages, notes=notes["responses"])
    sdk_check(RESPONSES_TYPE, responses)
    return {"anthropic": anthropic, "openai": chat, "responses": responses, "notes": notes}


# -- Anthropic ------------------------------------------------------------------------------


def test_anthropic_golden_comes_back_as_it_came() -> None:
    request = golden("anthropic_thinking_tools.json")
    messages = from_anthropic(request["messages"], request["system"])
    out = render_anthropic(messages)
    expected = blocks_form(request["messages"])
    # the same JSON (JSON objects are unordered; the stores sort keys): thinking,
    # citations and server tool results are written back exactly as they came
    assert same_json(out["messages"], expected)
    assert same_json(out["system"], request["system"])
    validate_anthropic(out)
    sdk_check_anthropic(out)
    # the neutral JSON form (what the stores write) reads back to the same request
    stored = [Message.from_dict(json.loads(json.dumps(m.to_dict()))) for m in messages]
    assert stored == messages
    assert render_anthropic(stored) == out


def test_anthropic_golden_parts_and_text_forms() -> None:
    request = golden("anthropic_thinking_tools.json")
    messages = from_anthropic(request["messages"], request["system"])
    assert [m.role for m in messages] == [
        "system", "user", "assistant", "tool", "assistant", "user", "assistant",
    ]  # fmt: skip
    user = messages[1]
    kinds = [(type(p).__name__, getattr(p, "kind", None)) for p in user.parts]
    assert kinds == [
        ("ProviderPart", "document"), ("ProviderPart", "document"), ("TextPart", None),
    ]  # fmt: skip
    # the text document's text is what search, summaries and other providers read
    assert "Revenue grew 12% in Q3." in user.text
    thinking = messages[2].parts[0]
    assert isinstance(thinking, ThinkingPart)
    assert thinking.signature
    assert "revenue grew" not in messages[2].text  # thinking is never "text"
    redacted = messages[6].parts[0]
    assert isinstance(redacted, ThinkingPart)
    assert redacted.redacted
    assert redacted.data
    # the system block's cache_control (the user's) is kept in its native form
    assert messages[0].parts[0].native is not None  # type: ignore[union-attr]


def test_anthropic_golden_for_other_providers_converts_or_drops_with_notes() -> None:
    request = golden("anthropic_thinking_tools.json")
    messages = from_anthropic(request["messages"], request["system"])
    out = check_everywhere(messages)
    validate_openai_chat(out["openai"])
    validate_responses(out["responses"])
    wire = json.dumps(out["openai"]) + json.dumps(out["responses"])
    assert "EuYBCkQYAiJA" not in wire  # signatures never leave Anthropic
    assert "The notes say revenue" not in wire  # nor does thinking
    assert "Revenue grew 12% in Q3. Costs fell 3%." in wire  # the text document, as text
    assert "Paris: rain expected" in wire  # web search results, as text
    assert "112.0" in wire  # the code execution's output, as text
    for provider in ("openai", "responses"):
        done = {(n.part, n.action) for n in out["notes"][provider]}
        assert ("anthropic thinking", "dropped") in done
        assert ("anthropic redacted_thinking", "dropped") in done
        assert ("anthropic document", "converted") in done
        assert ("anthropic server_tool_use", "dropped") in done
        assert ("anthropic web_search_tool_result", "converted") in done
    assert out["notes"]["anthropic"] == []  # nothing lost on the way home


def input_form(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses items with input messages in their easy form (the same request):
    no ``type``, one text part as a string."""
    out = []
    for item in items:
        if item.get("type", "message") == "message" and item["role"] != "assistant":
            content = item["content"]
            if (
                isinstance(content, list)
                and len(content) == 1
                and content[0]["type"] == "input_text"
            ):
                content = content[0]["text"]
            item = {"role": item["role"], "content": content}
        out.append(item)
    return out


def test_responses_golden_comes_back_as_it_came() -> None:
    request = golden("responses_reasoning_tools.json")
    messages = from_responses(request["input"])
    out = render_responses(messages, system_role="developer")
    # reasoning (with its encrypted content), built-in calls, ids and annotations:
    # the same JSON as they came, in the same order
    assert same_json(out, input_form(request["input"]))
    validate_responses(out)
    sdk_check(RESPONSES_TYPE, out)
    stored = [Message.from_dict(json.loads(json.dumps(m.to_dict()))) for m in messages]
    assert stored == messages
    # a reasoning item is in the unit of the call it led to: kept or dropped with it
    units = group_units(messages)
    first_call = next(u for u in units if u.kind == "tool_call")
    parts = messages[first_call.start].parts
    assert next(getattr(p, "kind", None) for p in parts) == "reasoning"
    # the stored function call an item_reference stands for pairs with its output
    assert [u.kind for u in units].count("tool_call") == 4


def test_responses_golden_for_other_providers_converts_or_drops_with_notes() -> None:
    request = golden("responses_reasoning_tools.json")
    messages = from_responses(request["input"])
    out = check_everywhere(messages)
    validate_anthropic(out["anthropic"])
    validate_openai_chat(out["openai"])
    wire = json.dumps(out["anthropic"]) + json.dumps(out["openai"])
    assert "gAAAAAB" not in wire  # encrypted reasoning never leaves OpenAI Responses
    assert "rs_68af" not in wire
    assert "msg_68af" not in wire
    assert "Refunds are possible within 30 days of booking." in wire  # file search, as text
    assert "85.0" in wire  # the code interpreter's logs, as text
    for provider in ("anthropic", "openai"):
        done = {(n.part, n.action) for n in out["notes"][provider]}
        assert ("responses reasoning", "dropped") in done
        assert ("responses web_search_call", "dropped") in done
        assert ("responses file_search_call", "converted") in done
        assert ("responses input_file", "dropped") in done
    assert out["notes"]["responses"] == []


# A conversation of Anthropic turns holding every block kind, drawn by hypothesis.

TEXT = st.text(st.characters(categories=("L", "N", "P")), min_size=1, max_size=12).map(
    lambda s: s.strip() or "x"
)
SIG = st.binary(min_size=8, max_size=24).map(lambda b: base64.b64encode(b).decode())
CACHE = st.sampled_from([None, {"type": "ephemeral"}])


def _with_cache(block: dict[str, Any], cache: dict[str, Any] | None) -> dict[str, Any]:
    return block if cache is None else {**block, "cache_control": cache}


@st.composite
def anthropic_user_blocks(draw: st.DrawFn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["doc_text", "doc_pdf", "search", "image"]))
        if kind == "doc_text":
            source = {"type": "text", "media_type": "text/plain", "data": draw(TEXT)}
            blocks.append({"type": "document", "source": source, "citations": {"enabled": True}})
        elif kind == "doc_pdf":
            source = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}
            blocks.append({"type": "document", "source": source, "title": draw(TEXT)})
        elif kind == "search":
            blocks.append({
                "type": "search_result", "source": "https://s.example/" + draw(TEXT),
                "title": draw(TEXT), "content": [{"type": "text", "text": draw(TEXT)}],
            })  # fmt: skip
        else:
            source = {"type": "url", "url": "https://i.example/a.png"}
            blocks.append(_with_cache({"type": "image", "source": source}, draw(CACHE)))
    blocks.append(_with_cache({"type": "text", "text": draw(TEXT)}, draw(CACHE)))
    return blocks


@st.composite
def anthropic_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [{"role": "user", "content": draw(anthropic_user_blocks())}]
    uses = 0
    for _ in range(draw(st.integers(1, 4))):
        content: list[dict[str, Any]] = []
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": draw(TEXT), "signature": draw(SIG)})
        elif draw(st.booleans()):
            content.append({"type": "redacted_thinking", "data": draw(SIG)})
        if draw(st.booleans()):
            uses += 1
            sid = f"srvtoolu_{uses}"
            content.append({"type": "server_tool_use", "id": sid, "name": "web_search",
                            "input": {"query": draw(TEXT)}})  # fmt: skip
            content.append({"type": "web_search_tool_result", "tool_use_id": sid, "content": [
                {"type": "web_search_result", "title": draw(TEXT), "url": "https://w.example",
                 "encrypted_content": draw(SIG)}]})  # fmt: skip
        text = {"type": "text", "text": draw(TEXT)}
        if draw(st.booleans()):
            text["citations"] = [{"type": "char_location", "cited_text": draw(TEXT),
                                  "document_index": 0, "document_title": None,
                                  "start_char_index": 0, "end_char_index": 1}]  # fmt: skip
        content.append(text)
        calls = []
        for _ in range(draw(st.integers(0, 2))):
            uses += 1
            call = {"type": "tool_use", "id": f"toolu_{uses}", "name": "lookup",
                    "input": {"q": draw(TEXT)}}  # fmt: skip
            calls.append(
                _with_cache(call, draw(st.sampled_from([None, None, {"type": "ephemeral"}])))
            )
        content.extend(calls)
        turns.append({"role": "assistant", "content": content})
        reply: list[dict[str, Any]] = [
            _with_cache({"type": "tool_result", "tool_use_id": c["id"], "content": draw(TEXT)},
                        draw(st.sampled_from([None, None, {"type": "ephemeral"}])))
            for c in calls
        ]  # fmt: skip
        turns.append({"role": "user", "content": reply + draw(anthropic_user_blocks())})
    return turns


def _marks(request: dict[str, Any]) -> int:
    return json.dumps(request).count('"cache_control"')


@settings(max_examples=60, deadline=None)
@given(anthropic_conversations())
def test_anthropic_round_trip_property(turns: list[dict[str, Any]]) -> None:
    messages = from_anthropic(copy.deepcopy(turns))
    out = render_anthropic(messages)
    validate_anthropic(out)
    sdk_check_anthropic(out)
    if _marks({"messages": turns}) <= 4:  # the user's own breakpoints, all kept
        assert out["messages"] == turns
    else:  # more than Anthropic takes: the newest four are kept, the rest is as it was
        assert _marks(out) == 4
    again = render_anthropic(from_anthropic(out["messages"]))
    assert again == out  # render -> parse -> render is the identity
    check_everywhere(messages)


def test_unsigned_thinking_and_foreign_reasoning_never_reach_anthropic() -> None:
    reasoning = ProviderPart.of("responses", "reasoning", {"type": "reasoning", "id": "rs_1",
                                                           "summary": []})  # fmt: skip
    conv = [
        Message.user("q"),
        Message("assistant", (ThinkingPart("no signature"), reasoning, *Message.assistant("a").parts)),
    ]  # fmt: skip
    notes: list[Any] = []
    out = render_anthropic(conv, notes=notes)
    assert out["messages"][1]["content"] == [{"type": "text", "text": "a"}]
    assert {(n.part, n.action) for n in notes} == {
        ("anthropic thinking", "dropped"), ("responses reasoning", "dropped"),
    }  # fmt: skip


# -- OpenAI Chat ----------------------------------------------------------------------------


def test_openai_chat_golden_comes_back_as_it_came() -> None:
    request = golden("openai_chat_audio_refusal.json")
    messages = from_openai_chat(request["messages"])
    out = render_openai_chat(messages)
    assert same_json(out, request["messages"])
    validate_openai_chat(out)
    sdk_check(CHAT_TYPE, out)
    refusal = messages[8].parts[0]
    assert refusal.text == "I can't delete an account without the customer's consent."  # type: ignore[union-attr]
    stored = [Message.from_dict(json.loads(json.dumps(m.to_dict()))) for m in messages]
    assert render_openai_chat(stored) == out


def test_openai_chat_golden_for_other_providers() -> None:
    request = golden("openai_chat_audio_refusal.json")
    messages = from_openai_chat(request["messages"])
    out = check_everywhere(messages)
    validate_anthropic(out["anthropic"])
    validate_responses(out["responses"])
    wire = json.dumps(out["anthropic"]) + json.dumps(out["responses"])
    # a refusal is sent as its text; audio and files only Chat can take are dropped
    assert "I can't delete an account without the customer's consent." in wire
    assert "I won't delete the account." in wire
    assert "audio_68af" not in wire
    for provider in ("anthropic", "responses"):
        done = {(n.part, n.action) for n in out["notes"][provider]}
        assert ("openai input_audio", "dropped") in done
        assert ("openai audio", "dropped") in done
        assert ("openai refusal", "converted") in done
    # the custom tool call goes elsewhere as a function call with its input
    calls = [
        b for m in out["anthropic"]["messages"] for b in m["content"] if b["type"] == "tool_use"
    ]
    assert calls[0]["input"] == {"input": "UPDATE orders SET refunded = true WHERE id = 42"}
